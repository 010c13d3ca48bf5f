"""``decode_line(n, C)`` is the contract the fast simulator relies on: a pure-decode step of ``n``
sequences costs ``a + b*C'`` for every total context ``C'`` in ``[C, limit)``, exactly as
``step_time`` would say (DESIGN §4). Checked at ``C`` and at several ``C'`` up to the limit, on a
dense model, a pipelined one, MoE (tensor-sharded and expert-parallel), a hybrid linear-attention
model, and sliding-window models across the point where their windows fill up.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.perf.batch import StepBatch
from inferplan.perf.roofline import RooflineModel
from perf.perf_helpers import LINE_RTOL, assert_line_matches, decode_step_s, probe_points, roofline

CONFIGS: dict[str, Callable[[], RooflineModel]] = {
    "dense": lambda: roofline("Llama-3.1-8B"),
    "dense-pp2": lambda: roofline("Llama-3.1-8B", pp=2),
    "dense-tp4-pp2": lambda: roofline("Llama-3.1-70B", "h200", tp=4, pp=2),
    "moe": lambda: roofline("Qwen3-30B-A3B"),
    "moe-pp2": lambda: roofline("Qwen3-30B-A3B", pp=2),
    "moe-ep-skewed": lambda: roofline("DeepSeek-V3", "h200", tp=8, ep=True, zipf=1.2),
    "moe-dp-ep-round-robin": lambda: roofline(
        "Qwen3-30B-A3B", dp=4, ep=True, zipf=0.6, placement="round_robin"
    ),
    "sliding-moe": lambda: roofline("gpt-oss-120b"),
    "sliding-moe-tp2-pp2": lambda: roofline("gpt-oss-120b", tp=2, pp=2),
    "sliding-interleaved": lambda: roofline("gemma-3-27b-it", tp=2),
    "hybrid-linear": lambda: roofline("Qwen3-Next-80B-A3B-Thinking", "h200", tp=2),
    "eager": lambda: roofline("Llama-3.1-8B", cuda_graphs=False),
}


def _model(config: str) -> RooflineModel:
    return CONFIGS[config]()


@settings(max_examples=300, deadline=None)
@given(
    config=st.sampled_from(sorted(CONFIGS)),
    num_seqs=st.integers(1, 1200),
    context_per_seq=st.integers(1, 40_000),
)
def test_decode_line_equals_step_time_on_its_stretch(
    config: str, num_seqs: int, context_per_seq: int
) -> None:
    assert_line_matches(_model(config), num_seqs, num_seqs * context_per_seq)


@pytest.mark.parametrize("num_seqs", [1, 3, 64, 513])
def test_sliding_window_line_stops_where_the_window_fills(num_seqs: int) -> None:
    """gpt-oss: half its layers slide over 128 tokens. Below ``n*128`` tokens of context the
    windowed reads still grow, above they are flat, so the line must stop at ``n*128`` and the
    next line (from there on) must pick up with a smaller slope."""
    model = _model("sliding-moe")
    window = 128
    saturation = num_seqs * window
    _, slope_before, limit = model.decode_line(num_seqs, num_seqs * 5)
    assert limit <= saturation
    # Walk the stretches from a short context to well past the window, as the simulator would.
    context = num_seqs * 5
    while context < 4 * saturation:
        limit = assert_line_matches(model, num_seqs, context)
        if not math.isfinite(limit):
            break
        context = math.ceil(limit)
    _, slope_after, _ = model.decode_line(num_seqs, saturation)
    assert slope_after < slope_before
    # Either side of the saturation point the step time is continuous (no jump in KV reads).
    below, at = (
        decode_step_s(model, num_seqs, saturation - 1),
        decode_step_s(model, num_seqs, saturation),
    )
    assert at == pytest.approx(below + slope_before, rel=1e-6)


def test_full_attention_line_has_no_limit_while_memory_bound() -> None:
    """Llama-3.1-8B decode at small batches is memory-bound at every context: one line."""
    _, slope, limit = _model("dense").decode_line(8, 8 * 1000)
    assert limit == math.inf
    assert slope > 0


def test_pipeline_line_matches_over_a_long_stretch() -> None:
    model = _model("dense-pp2")
    for num_seqs in (1, 2, 5, 200):
        assert_line_matches(model, num_seqs, num_seqs * 1)
        assert_line_matches(model, num_seqs, num_seqs * 100_000)


@settings(max_examples=150, deadline=None)
@given(
    config=st.sampled_from(sorted(CONFIGS)),
    num_seqs=st.integers(1, 600),
    context_per_seq=st.integers(1, 40_000),
    chunk=st.integers(2, 8192),
    chunk_context=st.integers(0, 60_000),
)
def test_batch_line_equals_step_time_with_a_prefill_chunk(
    config: str, num_seqs: int, context_per_seq: int, chunk: int, chunk_context: int
) -> None:
    """``batch_line``: decoders beside one prefill chunk (the doomed re-admissions of
    ``engine/thrash.py``) cost ``a + b*C'`` on ``[C, limit)``, as ``step_time`` says."""
    model = _model(config)
    context = num_seqs * context_per_seq
    base = StepBatch(
        prefill_tokens=chunk,
        prefill_attention_pairs=float(chunk * chunk_context + chunk * (chunk + 1) / 2),
        prefill_context_tokens=chunk_context,
        num_prefill_seqs=1,
        num_decode_seqs=num_seqs,
        decode_context_tokens=context,
    )
    a, b, limit = model.batch_line(base)
    assert limit > context
    for point in probe_points(context, limit, num_seqs):
        step_s = model.step_time(replace(base, decode_context_tokens=point)).total_s
        assert a + b * point == pytest.approx(step_s, rel=LINE_RTOL)


def test_window_range_by_hand() -> None:
    """Windows of 100 and 1,000 tokens at 4 sequences saturate at 400 and 4,000 context
    tokens: between them the line holds; full attention (None, 0) never bends it."""
    from inferplan.perf.batch import window_range

    assert window_range([100, None, 1000, 0], 4, 1000) == (400.0, 4000.0)
    assert window_range([100, 1000], 4, 100) == (0.0, 400.0)
    assert window_range([None], 4, 10**6) == (0.0, float("inf"))
