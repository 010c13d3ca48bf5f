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


def test_a_kernel_floor_set_later_is_seen() -> None:
    """A shape compiled into a plan under one kernel floor is timed again under another (the
    served engines set theirs after the model is built)."""
    model = roofline("Llama-3.1-8B", "h200")
    fresh = RooflineModel(model.spec, model.gpu, model.par, model.formats, model.kv, model.eff)
    seconds = StepSeconds(fresh)
    batch = mixed_batch([], 9, 1000)
    before = seconds(batch)  # a decode-only shape: planned at once
    fresh.set_kernel_floor(1e-3)  # every operator's launches at least 1 ms
    after = seconds(batch)
    assert after == fresh.step_time(batch).total_s
    assert after > before + 0.01


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


# Models (dense GQA, MoE, MLA + MoE, sliding-window MoE with sinks, sliding/global interleave,
# linear attention, DSA's indexer, chunked local attention), GPUs and engine settings: pipeline
# and DP attention, TensorRT-LLM's hidden host work, vLLM's FA2 query tiles on Ampere,
# an engine's CUDA graph sizes, speculative verify rows.
DIRECT_VARIANTS = [
    ("Llama-3.1-8B", "h200", {}, {}),
    ("Llama-3.1-70B", "a100", {"tp": 2, "pp": 2}, {"mixed_decode_rows": 64.0}),
    ("Qwen3-30B-A3B", "b200", {"tp": 2, "zipf": 1.2}, {}),
    ("DeepSeek-V3", "h200", {"tp": 8, "dp": 8, "ep": True}, {}),
    ("DeepSeek-V3.2", "h200", {"tp": 8}, {}),
    ("gpt-oss-120b", "h100", {"pp": 2}, {"host_overlap": 0.6, "step_overhead_s": 0.003}),
    ("gemma-3-27b-it", "mi300x", {}, {}),
    ("Qwen3-Next-80B-A3B-Thinking", "h200", {"tp": 4}, {}),
    ("Llama-4-Scout-17B-16E-Instruct", "h200", {"tp": 2}, {"host_overlap": 1.0}),
]


@pytest.mark.parametrize(("name", "gpu", "kwargs", "eff"), DIRECT_VARIANTS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(chunk, min_size=1, max_size=8),
    num_decode=st.integers(0, 600),
    contexts=st.lists(st.integers(1, 140_000), min_size=1, max_size=3),
    drafts=st.sampled_from([0, 0, 2]),
    graphs=st.booleans(),
)
def test_new_prefill_chunks_are_timed_without_a_plan_to_the_same_float(
    name: str,
    gpu: str,
    kwargs: dict[str, object],
    eff: dict[str, float],
    chunks: list[tuple[int, int]],
    num_decode: int,
    contexts: list[int],
    drafts: int,
    graphs: bool,
) -> None:
    """A step with prefill chunks never met before is timed straight from its pieces (no plan
    kept); met again, its shape gets a plan. Both give ``step_time``'s float, bit for bit."""
    base = roofline(name, gpu, **kwargs)
    model = RooflineModel(
        base.spec, base.gpu, base.par, base.formats, base.kv, replace(base.eff, **eff)
    )
    if graphs:
        model.graphs = CudaGraphs((1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    for context in contexts:
        batch = mixed_batch(chunks, num_decode, context, drafts)
        verify = replace(batch, num_draft_tokens=0)  # StepSeconds adds its own draft rows
        expected = model.step_time(batch).total_s
        seconds = StepSeconds(model, num_draft_tokens=drafts)
        assert seconds(verify) == expected  # new chunks: no plan
        assert not seconds._plans
        assert seconds(verify) == expected  # met again: a plan
        assert len(seconds._plans) == 1
        assert seconds(verify) == expected  # the plan, cached
