"""Per-engine kernel factors by kernel class (perf/engine_kernels.py)."""

from __future__ import annotations

import pytest

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import (
    bundled_kernels,
    parse_kernels,
    plan_kernel_class,
    scale_kernels,
)
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


def _class(model: str, quantization: str | None = None, tp: int = 1) -> str:
    plan = plan_memory(
        load_model(model),
        load_gpu("h200_sxm_141gb"),
        Parallelism(tp=tp),
        MemoryConfig(quantization=quantization, max_model_len=4096),
    )
    return plan_kernel_class(plan)


def test_kernel_classes_follow_attention_and_weight_formats() -> None:
    assert _class("Qwen3-14B") == "bf16"
    assert _class("Qwen3-14B", "fp8") == "fp8"
    assert _class("gpt-oss-20b") == "mxfp4"
    assert _class("DeepSeek-R1", tp=8) == "mla"


def test_a_factor_scales_gemm_compute_and_mla_attention_not_streaming() -> None:
    eff = efficiency_for(load_gpu("h100_sxm_80gb"))
    slow = scale_kernels(eff, 0.5, "fp8")
    assert slow.gemm_compute == pytest.approx(eff.gemm_compute * 0.5)
    assert slow.attention_compute == eff.attention_compute
    assert slow.memory_bandwidth == eff.memory_bandwidth
    assert slow.attention_memory == eff.attention_memory
    mla = scale_kernels(eff, 0.5, "mla")
    assert mla.attention_compute == pytest.approx(eff.attention_compute * 0.5)
    assert scale_kernels(eff, 1.0, "mla") is eff


def test_factors_lie_in_0_1_and_the_bundled_file_obeys() -> None:
    with pytest.raises(InferplanError, match=r"\(0, 1\]"):
        parse_kernels({"vllm-v1": {"fp8": 1.2}}, "k.yaml")
    with pytest.raises(InferplanError, match="keys must be among"):
        parse_kernels({"vllm-v1": {"int4": 0.5}}, "k.yaml")
    for factors in bundled_kernels().values():
        assert all(0.0 < v <= 1.0 for v in factors.values())
