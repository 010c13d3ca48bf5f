"""TensorRT-LLM runs measured against ``trtllm-serve`` (plan/trtllm_serve.py): which rows, their
chunked context, and the constants they run with."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.engine.session import ServingOptions
from inferplan.errors import InferplanError
from inferplan.perf.efficiency import bundled_efficiency
from inferplan.plan.published import PublishedRow, bundled_published
from inferplan.plan.published_runs import memory_plan, predict_run, run_setup
from inferplan.plan.trtllm_serve import (
    ServeConstants,
    chunked_prefill,
    is_trtllm_serve,
    parse_serve_constants,
    serve_efficiency,
)


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
