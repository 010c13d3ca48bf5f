"""``StepSeconds`` returns ``step_time(batch).total_s`` bit for bit, from a fresh plan and from a
cached one at another context, for every architecture the roofline distinguishes and for
pipeline, DP-attention and CUDA-graph variants and with host work hidden behind the GPU's
(``host_overlap``, TensorRT-LLM's PyTorch executor); a change of the engine's graphs is seen."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.perf.batch import StepBatch, StepTime
from inferplan.perf.cudagraph import CudaGraphs
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.step_seconds import StepSeconds

from .perf_helpers import MODELS, mixed_batch, roofline

VARIANTS = [
    *[(name, {}) for name in MODELS],
    ("Llama-3.1-70B", {"tp": 2, "pp": 2}),
    ("Llama-3.1-8B", {"pp": 4, "cuda_graphs": False}),
    ("DeepSeek-V3", {"tp": 8, "dp": 8, "ep": True}),
    ("Qwen3-30B-A3B", {"tp": 2, "zipf": 1.2}),
]


chunk = st.tuples(st.integers(1, 9000), st.sampled_from([0, 0, 16, 4096, 100_000]))


@pytest.mark.parametrize(("name", "kwargs"), VARIANTS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(chunk, max_size=3),
    num_decode=st.integers(0, 600),
    contexts=st.lists(st.integers(1, 140_000), min_size=2, max_size=4),
)
def test_step_seconds_equal_step_time_bit_for_bit(
    name: str,
    kwargs: dict[str, object],
    chunks: list[tuple[int, int]],
    num_decode: int,
    contexts: list[int],
) -> None:
    model: RooflineModel = roofline(name, "h200", **kwargs)
    seconds = StepSeconds(model)
    if not chunks and not num_decode:
        num_decode = 1
    for context in contexts:  # the first compiles the plan, the rest reuse it
        batch = mixed_batch(chunks, num_decode, context)
        assert seconds(batch) == model.step_time(batch).total_s


def test_a_new_set_of_cuda_graphs_is_seen() -> None:
    model = roofline("Llama-3.1-8B", "h200")
    fresh = RooflineModel(
        model.spec, model.gpu, model.par, model.formats, model.kv, model.eff
    )  # own instance: the shared one must keep its graphs
    seconds = StepSeconds(fresh)
    batch = mixed_batch([], 9, 1000)
    before = seconds(batch)
    fresh.graphs = CudaGraphs((1, 2, 4, 8, 16, 32))  # 9 sequences replay the 16 graph
    after = seconds(batch)
    assert after == fresh.step_time(batch).total_s
    assert after > before


def test_other_models_are_asked_every_step() -> None:
    """A model that is not the roofline (a measured table) gets no plan: it is asked."""
    inner = roofline("Llama-3.1-8B", "h200")
    asked: list[StepBatch] = []

    class Counting:
        def step_time(self, batch: StepBatch) -> StepTime:
            asked.append(batch)
            return inner.step_time(batch)

        def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
            return inner.decode_line(num_seqs, context_tokens)

    seconds = StepSeconds(Counting())
    batch = mixed_batch([(512, 0)], 7, 900)
    assert seconds(batch) == seconds(batch) == inner.step_time(batch).total_s
    assert asked == [batch, batch]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(chunk, max_size=3),
    num_decode=st.integers(0, 600),
    contexts=st.lists(st.integers(1, 140_000), min_size=2, max_size=4),
    overlap=st.sampled_from([0.15, 1.0]),
)
def test_hidden_host_work_is_in_the_plans(
    chunks: list[tuple[int, int]], num_decode: int, contexts: list[int], overlap: float
) -> None:
    """With ``host_overlap`` > 0 (``simulate --engine trtllm``) a plan's seconds hide the same
    host work as ``step_time``: admission steps are not timed as if nothing overlapped."""
    base = roofline("Llama-3.1-8B", "h200")
    eff = replace(base.eff, host_overlap=overlap, step_overhead_s=0.003)
    model = RooflineModel(base.spec, base.gpu, base.par, base.formats, base.kv, eff)
    seconds = StepSeconds(model)
    if not chunks and not num_decode:
        num_decode = 1
    for context in contexts:
        batch = mixed_batch(chunks, num_decode, context)
        total_s = model.step_time(batch).total_s
        assert seconds(batch) == total_s
        assert (
            total_s
            < RooflineModel(
                base.spec, base.gpu, base.par, base.formats, base.kv, replace(eff, host_overlap=0.0)
            )
            .step_time(batch)
            .total_s
        )


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("gpt-oss-120b", {}), ("gemma-3-27b-it", {}), ("gpt-oss-120b", {"pp": 2})],
)
def test_a_window_that_saturates_gets_its_own_plan(name: str, kwargs: dict[str, object]) -> None:
    """At one shape, contexts on both sides of where a read window saturates (``seqs x
    window``, per micro-batch): each side is timed as ``step_time`` times it."""
    model = roofline(name, "h200", **kwargs)
    seconds = StepSeconds(model)
    window = min(w for w in model.attention_pieces.windows if w is not None)
    for num_decode in (1, 7, 64):
        for context in (window - 1, window, window + 1, 3 * window, window - 1):
            batch = mixed_batch([(300, 16)], num_decode, context)
            assert seconds(batch) == model.step_time(batch).total_s
