"""TensorRT-LLM runs measured against ``trtllm-serve`` (plan/trtllm_serve.py): which rows, their
chunked context, and the constants they run with."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inferplan.engine.session import ServingOptions, simulate, simulation_config
from inferplan.errors import InferplanError
from inferplan.memory.blockpool import FULL_ATTENTION
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import bundled_efficiency
from inferplan.perf.factory import build_step_model
from inferplan.plan.published import PublishedRow, bundled_published
from inferplan.plan.published_runs import memory_plan, predict_run, run_setup
from inferplan.plan.trtllm_serve import (
    ServeConstants,
    chunked_prefill,
    is_trtllm_serve,
    parse_serve_constants,
    serve_efficiency,
)
from inferplan.workload.request import Workload


def _runs(case_suffix: str) -> list[PublishedRow]:
    return [r for r in bundled_published() if r.case_id.endswith(case_suffix)]


def test_only_gpustack_tensorrt_llm_rows_are_trtllm_serve() -> None:
    rows = bundled_published()
    serve = [r for r in rows if is_trtllm_serve(r)]
    assert serve and all(r.case_id.startswith("gpustack") for r in serve)
    assert {r.engine for r in serve} == {"tensorrt-llm"}
    triton = [r for r in rows if r.settings.get("frontend", "").startswith("Triton")]
    bench = [r for r in rows if r.engine == "tensorrt-llm" and not r.settings.get("bench")]
    assert triton and bench
    assert not any(is_trtllm_serve(r) for r in triton + bench)


def test_a_chunked_run_longer_than_max_num_tokens_is_simulated() -> None:
    """Qwen3-32B on one A100 at 32000/100 with ``enable_chunked_prefill=true``: 32,000-token
    prompts exceed ``max_num_tokens`` 8192, so without chunked context every request would be
    refused; chunked, the run completes at about the published 0.05 requests/s."""
    run = [r for r in _runs("14595d") if r.input_len == 32000]
    assert run and chunked_prefill(run[0])
    predicted = predict_run(run, None, quick=True)
    assert predicted["request_throughput"] is not None
    assert 0.02 < predicted["request_throughput"] < 0.1
    off = {"enable_chunked_prefill": "false"}
    unchunked = [replace(r, settings={**r.settings, **off}) for r in run]
    with pytest.raises(InferplanError, match="no request completed"):
        predict_run(unchunked, None, quick=True)


def test_serve_constants_replace_host_costs_behind_the_overlap_scheduler() -> None:
    """Host costs come from the file, hidden behind the GPU (``host_overlap`` 1); the kernel
    factor scales GEMM compute of its own class only (FP8 here, not a BF16 run)."""
    fp8 = memory_plan(run_setup(next(r for r in _runs("096f96"))))
    bf16 = memory_plan(run_setup(next(r for r in _runs("c32ed3"))))
    release = bundled_efficiency("hopper")
    constants = ServeConstants({"per_seq_overhead_s": 1e-4}, {"fp8": 0.5})
    eff = serve_efficiency(release, fp8, constants)
    assert eff.per_seq_overhead_s == 1e-4 and eff.host_overlap == 1.0
    assert eff.gemm_compute == pytest.approx(release.gemm_compute * 0.5)
    assert eff.step_overhead_s == release.step_overhead_s  # not in the file: the release's
    assert serve_efficiency(release, bf16, constants).gemm_compute == release.gemm_compute


def test_bad_serve_constants_are_one_error_naming_the_key() -> None:
    with pytest.raises(InferplanError, match="host"):
        parse_serve_constants({"host": {"step_overhead_s": 2.0}}, "f.yaml")
    with pytest.raises(InferplanError, match="kernels"):
        parse_serve_constants({"kernels": {"fp8": 0.0}}, "f.yaml")
    with pytest.raises(InferplanError, match="expected"):
        parse_serve_constants({"other": {}}, "f.yaml")


def test_chunked_context_is_tensorrt_llm_only() -> None:
    with pytest.raises(InferplanError, match="--engine vllm"):
        ServingOptions(engine="vllm", trtllm_chunked_prefill=True)


def test_served_upstream_fp8_checkpoints_keep_their_kv_in_bf16() -> None:
    """``Qwen/Qwen3-32B-FP8`` under ``trtllm-serve`` declares no ``kv_cache_quant_algo``, so
    its KV is BF16 (twice the bytes per token); the perf overview's ModelOpt FP8 checkpoints
    under ``trtllm-bench`` get FP8 KV."""
    served = memory_plan(run_setup(next(r for r in _runs("096f96"))))
    assert served.kv_format.name == "bf16"
    bench = next(
        r
        for r in bundled_published()
        if r.engine == "tensorrt-llm"
        and r.weights_dtype == "fp8"
        and not r.kv_cache_dtype
        and not r.settings.get("bench")
        and not r.settings.get("frontend")
    )
    assert memory_plan(run_setup(bench)).kv_format.name == "fp8"


def _gpt_oss_120b_h100_plan() -> MemoryPlan:
    row = _runs("gpt-oss-120b-h100-tensorrt-llm-e63df6")[0]
    return memory_plan(run_setup(row))


def test_tensorrt_llms_pool_holds_every_gpt_oss_layer_at_full_length() -> None:
    """TensorRT-LLM's KV manager gives every layer ``max_seq_len`` unless
    ``kv_cache_config.max_attention_window`` lists the windows, which ``trtllm-serve``'s
    command does not: gpt-oss-120b's 36 layers x 2 x 8 KV heads x 64 dims x 2 bytes = 73,728
    bytes a token, 32-token blocks, one group; vLLM's hybrid pool keeps the 18 windowed layers
    apart (two groups, half-size units: twice the blocks)."""
    plan = _gpt_oss_120b_h100_plan()
    trtllm = simulation_config(plan, ServingOptions(engine="trtllm")).scheduler
    vllm = simulation_config(plan, ServingOptions(engine="vllm")).scheduler
    assert trtllm.kv_groups == FULL_ATTENTION
    assert trtllm.kv_block_bytes == 73_728 * 32
    assert trtllm.num_blocks == int(plan.worst_stage.kv_bytes // (73_728 * 32))
    assert vllm.kv_groups != FULL_ATTENTION and vllm.num_blocks // 2 == trtllm.num_blocks


def test_guaranteed_no_evict_admits_what_full_length_reservations_hold() -> None:
    """200 requests of 1,000 + 1,000 tokens at t = 0 on gpt-oss-120b, one H100: each reserves
    ceil(2,000 / 32) = 63 full-length blocks, so at most ``num_blocks // 63`` run at once
    (5,688 // 63 = 90); with the windowed layers held to their window, 63 blocks of the full
    layers and at most 5 (128 / 32 + 1) of the windowed ones would admit about twice as many."""
    plan = _gpt_oss_120b_h100_plan()
    blocks = simulation_config(plan, ServingOptions(engine="trtllm")).scheduler.num_blocks
    n = 200
    workload = Workload(
        arrival_s=np.zeros(n),
        input_tokens=np.full(n, 1000, dtype=np.int64),
        output_tokens=np.full(n, 1000, dtype=np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )
    result = simulate(plan, build_step_model(plan), workload, ServingOptions(engine="trtllm"))
    rec = result.records
    starts = np.sort(rec.first_scheduled_s)
    running_at = [np.sum((rec.first_scheduled_s <= t) & (rec.finish_s > t)) for t in starts]
    assert max(running_at) == blocks // 63 == 90
