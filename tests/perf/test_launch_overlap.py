"""An eager step's kernel launches beside the overlap scheduler (``RooflineModel.launches_overlap``,
TensorRT-LLM's ``trtllm-serve``): the executor thread launches a step's kernels and does its
per-sequence host work while the GPU runs the step before, so an eager step takes
``max(GPU, host + launches)``, not ``max(GPU, host) + launches``."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.perf.batch import StepBatch
from inferplan.perf.cudagraph import TRTLLM_GRAPH_SIZES, CudaGraphs
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.step_seconds import StepSeconds

from .perf_helpers import roofline

EAGER_S, PER_SEQ_S = 300e-6, 200e-6


def _model(*, overlap: bool, host: bool = True) -> RooflineModel:
    """Llama-3.1-8B on one H100 with trtllm-serve-like host costs (or none: the GPU alone)."""
    base = roofline("Llama-3.1-8B", "h100")
    eff = replace(
        base.eff,
        step_overhead_s=0.0,
        per_seq_overhead_s=PER_SEQ_S if host else 0.0,
        eager_layer_overhead_s=EAGER_S if host else 0.0,
        layer_overhead_s=0.0,
        host_overlap=1.0,
    )
    model = RooflineModel(base.spec, base.gpu, base.par, base.formats, base.kv, eff)
    model.graphs = CudaGraphs(TRTLLM_GRAPH_SIZES, pads=False)
    model.launches_overlap = overlap
    return model


def _decode(num: int) -> StepBatch:
    return StepBatch(num_decode_seqs=num, decode_context_tokens=num * 1000)


@pytest.mark.parametrize("num", [33, 100, 200])
def test_an_eager_step_takes_the_longer_of_gpu_and_host_plus_launches(num: int) -> None:
    """By hand: 32 layers x 300 us = 9.6 ms of launches plus 200 us per sequence, against the
    GPU's own time; added (the old rule) the launches come on top of ``max(GPU, host)``."""
    gpu_s = _model(overlap=True, host=False).step_time(_decode(num)).total_s
    launches_s, host_s = 32 * EAGER_S, num * PER_SEQ_S
    overlapped = _model(overlap=True).step_time(_decode(num)).total_s
    added = _model(overlap=False).step_time(_decode(num)).total_s
    assert overlapped == pytest.approx(max(gpu_s, host_s + launches_s), rel=1e-12)
    assert added == pytest.approx(max(gpu_s, host_s) + launches_s, rel=1e-12)


def test_a_graphed_step_is_unchanged() -> None:
    batch = _decode(32)  # a captured size: no launches from Python
    assert (
        _model(overlap=True).step_time(batch).total_s
        == _model(overlap=False).step_time(batch).total_s
    )


def test_a_large_prefill_hides_its_launches() -> None:
    """A context step of 8,192 tokens runs far longer on the GPU than its launches take."""
    batch = StepBatch(prefill_tokens=8192, prefill_attention_pairs=8192 * 4096, num_prefill_seqs=8)
    gpu_s = _model(overlap=True, host=False).step_time(batch).total_s
    assert gpu_s > 32 * EAGER_S + 8 * PER_SEQ_S
    assert _model(overlap=True).step_time(batch).total_s == pytest.approx(gpu_s, rel=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num=st.integers(1, 400), contexts=st.lists(st.integers(1, 100_000), min_size=2, max_size=3))
def test_step_seconds_and_decode_lines_see_the_launches(num: int, contexts: list[int]) -> None:
    """The engine's cached plans and closed-form decode lines time the same step."""
    model = _model(overlap=True)
    seconds = StepSeconds(model)
    for context in contexts:
        batch = StepBatch(num_decode_seqs=num, decode_context_tokens=context)
        total_s = model.step_time(batch).total_s
        assert seconds(batch) == total_s
        a, b, limit = model.decode_line(num, context)
        assert context < limit
        assert a + b * context == pytest.approx(total_s, rel=1e-9)


def test_a_change_of_launches_overlap_is_seen() -> None:
    model = _model(overlap=False)
    seconds = StepSeconds(model)
    batch = _decode(33)  # the GPU's step outlasts the host work: launches partly hide
    before = seconds(batch)
    model.launches_overlap = True
    assert seconds(batch) == model.step_time(batch).total_s < before
