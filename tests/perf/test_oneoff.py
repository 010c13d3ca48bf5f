"""A one-off prefill shape timed from cached terms (``perf/oneoff.py``, ``perf/oneoff_tokens.py``)
gives ``step_time``'s float bit for bit over a run of steps that share token counts, decode
counts and LM head rows, follows a kernel floor set after its terms were cached, and is taken
only for the models whose pieces it writes out."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan import native
from inferplan.perf.cudagraph import CudaGraphs
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.step_seconds import StepSeconds

from .perf_helpers import mixed_batch, roofline

# Dense GQA; dense at TP2 x PP2 with hidden host work (all-reduces, pipeline sends, overlap);
# MoE (its token pieces cached, not written out); MLA + MoE with DP attention and EP.
VARIANTS = [
    ("Llama-3.1-8B", "h200", {}, {}),
    ("Llama-3.1-70B", "h200", {"tp": 2, "pp": 2}, {"host_overlap": 0.6, "step_overhead_s": 0.003}),
    ("Qwen3-30B-A3B", "b200", {"tp": 2, "zipf": 1.2}, {}),
    ("DeepSeek-V3", "h200", {"tp": 8, "dp": 8, "ep": True}, {}),
]

chunk = st.tuples(st.sampled_from([1, 7, 512, 3000]), st.sampled_from([0, 16, 4096, 100_000]))
step = st.tuples(
    st.lists(chunk, min_size=1, max_size=4),
    st.sampled_from([0, 1, 3, 64, 255]),
    st.integers(1, 60_000),
)


def _model(name: str, gpu: str, kwargs: dict[str, object], eff: dict[str, float]) -> RooflineModel:
    base = roofline(name, gpu, **kwargs)
    return RooflineModel(
        base.spec, base.gpu, base.par, base.formats, base.kv, replace(base.eff, **eff)
    )


@pytest.mark.parametrize(("name", "gpu", "kwargs", "eff"), VARIANTS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=12), drafts=st.sampled_from([0, 2]))
def test_a_run_of_one_off_steps_is_timed_to_the_same_floats(
    name: str,
    gpu: str,
    kwargs: dict[str, object],
    eff: dict[str, float],
    steps: list[tuple[list[tuple[int, int]], int, int]],
    drafts: int,
) -> None:
    """One ``StepSeconds`` over many steps (its cached terms reused across them, the graphs
    of a served engine set: its kernel floor binds): every step equals ``step_time``, and
    every first sight of a shape took the one-off path."""
    model = _model(name, gpu, kwargs, eff)
    model.graphs = CudaGraphs((1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    seconds = StepSeconds(model, num_draft_tokens=drafts)
    assert seconds._oneoff is not None
    timed = seconds._oneoff.seconds
    taken: list[tuple[float, ...]] = []

    def counted(*fields: float) -> float:
        taken.append(fields)
        return timed(*fields)  # type: ignore[arg-type]

    counting = native.mode != "compiled"  # a compiled class's method cannot be patched
    if counting:
        seconds._oneoff.seconds = counted  # type: ignore[method-assign,assignment]
    shapes = set()
    for chunks, num_decode, context in steps:
        batch = mixed_batch(chunks, num_decode, context, drafts)
        verify = replace(batch, num_draft_tokens=0)  # StepSeconds adds its own draft rows
        assert seconds(verify) == model.step_time(batch).total_s
        shape = (batch.prefill_tokens, batch.prefill_attention_pairs, batch.num_prefill_seqs)
        shapes.add((*shape, batch.prefill_context_tokens, num_decode))
    if counting:
        assert len(taken) == len(shapes)  # first sights only: a shape met again has a plan


def test_a_kernel_floor_set_later_is_followed() -> None:
    """Terms cached under one floor are not used under another: the same token count, decode
    count and LM head rows after ``set_kernel_floor`` give the new ``step_time``."""
    model = _model("Llama-3.1-8B", "h200", {}, {})
    seconds = StepSeconds(model)
    first = mixed_batch([(40, 0)], 3, 2000)
    assert seconds(first) == model.step_time(first).total_s
    model.set_kernel_floor(2e-4)  # above every operator of a 43-token step: all floored
    again = mixed_batch([(40, 16)], 3, 2000)  # a new shape, the same counts
    floored = model.step_time(again).total_s
    assert seconds(again) == floored
    model.set_kernel_floor(0.0)
    third = mixed_batch([(40, 32)], 3, 2000)
    assert seconds(third) == model.step_time(third).total_s < floored


@pytest.mark.parametrize(
    ("name", "kwargs", "eff", "taken", "dense"),
    [
        ("Llama-3.1-8B", {}, {}, True, True),
        ("Qwen3-30B-A3B", {"tp": 2}, {}, True, False),
        ("DeepSeek-V3", {"tp": 8}, {}, True, False),
        ("Llama-3.1-70B", {"tp": 2}, {"mixed_decode_rows": 64.0}, False, True),  # FA2's tiles
        ("gpt-oss-120b", {}, {}, False, False),  # sliding windows
        ("gemma-3-27b-it", {}, {}, False, True),
        ("DeepSeek-V3.2", {"tp": 8}, {}, False, False),  # DSA's indexer
        ("Qwen3-Next-80B-A3B-Thinking", {"tp": 4}, {}, False, False),  # linear attention
        ("Llama-4-Scout-17B-16E-Instruct", {"tp": 2}, {}, False, False),  # local chunks
    ],
)
def test_which_models_are_timed_from_cached_terms(
    name: str, kwargs: dict[str, object], eff: dict[str, float], taken: bool, dense: bool
) -> None:
    model = _model(name, "h200", kwargs, eff)
    seconds = StepSeconds(model)
    assert (seconds._oneoff is not None) == taken
    if seconds._oneoff is not None:
        assert (seconds._oneoff._closed is not None) == dense
