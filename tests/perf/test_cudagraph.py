"""CUDA-graph capture sizes per engine and the padded decode batch (``perf/cudagraph.py``), and
the step-time model's use of them: hand-computed sizes, padding, eager above the largest."""

from __future__ import annotations

import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.perf.batch import StepBatch
from inferplan.perf.cudagraph import (
    TRTLLM_GRAPH_SIZES,
    CudaGraphs,
    engine_graphs,
    sglang_graph_sizes,
    vllm_graph_sizes,
)
from inferplan.perf.factory import build_step_model
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.engines import sglang_cuda_graph_max_bs
from inferplan.specs.hardware import load_gpu


def test_vllm_sizes_and_padding() -> None:
    sizes = vllm_graph_sizes(1024, 8192)  # H100 serve defaults: max min(2048, 512) = 512
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-1] == 512 and len(sizes) == 3 + 64
    graphs = CudaGraphs(sizes)
    assert graphs.graph_batch(3) == 4
    assert graphs.graph_batch(9) == 16
    assert graphs.graph_batch(257) == 264
    assert graphs.graph_batch(512) == 512
    assert graphs.graph_batch(513) is None  # eager
    assert vllm_graph_sizes(256, 2048)[-1] == 512  # A100: min(2 * 256, 512)
    assert vllm_graph_sizes(128, 100)[-1] == 96  # sizes above the token budget dropped
    newer = vllm_graph_sizes(1024, 8192, version="0.13.0")
    assert 248 in newer and 256 in newer and 264 not in newer and 272 in newer


def test_sglang_sizes_follow_its_max_batch() -> None:
    h100, h200 = load_gpu("h100"), load_gpu("h200")
    assert sglang_cuda_graph_max_bs(h100, 1) == 256
    assert sglang_cuda_graph_max_bs(h100, 8) == 512
    assert sglang_cuda_graph_max_bs(h200, 1) == 256
    sizes = sglang_graph_sizes(512)
    assert sizes[:6] == (1, 2, 4, 8, 12, 16) and sizes[-1] == 512
    graphs = CudaGraphs(sglang_graph_sizes(256))
    assert graphs.graph_batch(13) == 16
    assert graphs.graph_batch(250) == 256
    assert graphs.graph_batch(257) is None
    assert CudaGraphs(sizes).graph_batch(257) == 272  # 256 + 16


def test_trtllm_does_not_pad() -> None:
    graphs = engine_graphs("trtllm", 2048, 8192)
    assert graphs.sizes == TRTLLM_GRAPH_SIZES and graphs.max_batch == 128
    assert graphs.graph_batch(31) == 31
    assert graphs.graph_batch(33) is None  # not captured, no padding: eager
    assert graphs.graph_batch(64) == 64
    assert graphs.graph_batch(129) is None


@pytest.fixture(scope="module")
def model() -> RooflineModel:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    step = build_step_model(plan)
    assert isinstance(step, RooflineModel)
    return step


def test_padded_decode_costs_its_padded_rows_in_the_gemms(model: RooflineModel) -> None:
    plain = model.step_time(StepBatch(num_decode_seqs=257, decode_context_tokens=257_000))
    model.graphs = engine_graphs("vllm", 1024, 8192)
    model.set_kernel_floor(0.0)  # the padding alone, without an engine's kernel floor
    try:
        padded = model.step_time(StepBatch(num_decode_seqs=257, decode_context_tokens=257_000))
        same = model.step_time(StepBatch(num_decode_seqs=264, decode_context_tokens=257_000))
        # 264 rows in the GEMMs either way; the KV read and the per-sequence cost stay 257's.
        assert padded.by_operator_s["mlp"] == pytest.approx(same.by_operator_s["mlp"])
        assert padded.by_operator_s["mlp"] > plain.by_operator_s["mlp"]
        assert padded.by_operator_s["attn_decode"] == plain.by_operator_s["attn_decode"]
        gap = same.by_bound_s["overhead"] - padded.by_bound_s["overhead"]
        assert gap == pytest.approx(7 * model.eff.per_seq_overhead_s)
        # Above the largest graph the step runs eager: one launch cost per layer more.
        model.graphs = CudaGraphs((1, 2, 4, 8))
        eager = model.step_time(StepBatch(num_decode_seqs=9, decode_context_tokens=900))
        graphed = model.step_time(StepBatch(num_decode_seqs=8, decode_context_tokens=900))
        extra = eager.by_bound_s["overhead"] - graphed.by_bound_s["overhead"]
        launch = model.eff.eager_layer_overhead_s * model.stage_layers
        assert extra == pytest.approx(launch + model.eff.per_seq_overhead_s)
    finally:
        model.graphs = None
