"""vLLM's FP8 kernel classes: Marlin W8A16 on Ampere, block-scaled FP8 at the BF16 rate on
Hopper (perf/vllm_fp8.py)."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import bundled_kernels, plan_kernel_class, scale_kernels
from inferplan.perf.vllm_fp8 import fp8_kernel_class, with_block_fp8_rate
from inferplan.perf.vllm_moe import vllm_kernel_class
from inferplan.plan.served import served_efficiency

from .perf_helpers import tp_plan as _plan


def _vllm_class(plan: MemoryPlan) -> str:
    return vllm_kernel_class(plan, plan_kernel_class(plan))


def test_fp8_without_fp8_tensor_cores_is_marlin() -> None:
    assert _vllm_class(_plan("Qwen3-14B", "a100_sxm_80gb", 1, "fp8")) == "marlin"
    assert _vllm_class(_plan("Qwen3-14B", "h100_sxm_80gb", 1, "fp8")) == "fp8"
    assert _vllm_class(_plan("Qwen3-14B", "l40s", 1, "fp8")) == "fp8"  # Ada has FP8
    assert _vllm_class(_plan("Qwen3-14B", "a100_sxm_80gb", 1)) == "bf16"
    # DeepSeek stays its own class (MLA), on either part.
    assert _vllm_class(_plan("DeepSeek-R1", "h200_sxm_141gb", 8)) == "mla"
    assert fp8_kernel_class(_plan("Qwen3-14B", "a100_sxm_80gb", 1, "fp8"), "mxfp4") == "mxfp4"


def test_block_fp8_gemms_are_charged_at_the_bf16_peak() -> None:
    plan = _plan("DeepSeek-R1", "h200_sxm_141gb", 8)
    eff = efficiency_for(plan.gpu)
    slow = with_block_fp8_rate(eff, plan, "mla")
    # H200: 989.4 dense BF16 TFLOP/s against 1,978.9 FP8: the GEMM fraction halves, so FP8
    # GEMMs reach the BF16 peak times the family's fraction, no more.
    assert slow.gemm_compute == pytest.approx(eff.gemm_compute * 989.4 / 1978.9)
    assert slow.gemm_compute * plan.gpu.peak("fp8") == pytest.approx(
        eff.gemm_compute * plan.gpu.peak("bf16")
    )
    assert slow.attention_compute == eff.attention_compute
    assert slow.memory_bandwidth == eff.memory_bandwidth
    # Other classes, and a part without FP8 tensor cores, are unchanged.
    assert with_block_fp8_rate(eff, plan, "fp8") is eff
    a100 = _plan("Qwen3-14B", "a100_sxm_80gb", 1, "fp8")
    assert with_block_fp8_rate(efficiency_for(a100.gpu), a100, "mla").gemm_compute == (
        efficiency_for(a100.gpu).gemm_compute
    )


def test_vllm_runs_deepseek_at_its_factor_of_the_bf16_rate_and_other_engines_do_not() -> None:
    plan = _plan("DeepSeek-R1", "h200_sxm_141gb", 8)
    family = efficiency_for(plan.gpu)
    factor = bundled_kernels()["vllm-v1"]["mla"]
    vllm = served_efficiency(family, plan, "vllm")
    assert vllm.gemm_compute == pytest.approx(family.gemm_compute * factor * 989.4 / 1978.9)
    assert vllm.gemm_compute * plan.gpu.peak("fp8") <= family.gemm_compute * plan.gpu.peak("bf16")
    # SGLang's FP8 kernels keep their own (FP8-peak) reference.
    sglang = served_efficiency(family, plan, "sglang")
    expected = scale_kernels(family, bundled_kernels()["sglang"]["mla"], "mla", "sglang")
    assert sglang.gemm_compute == pytest.approx(expected.gemm_compute)


def test_marlin_has_its_own_factor_and_hoppers_fp8_is_not_marlins() -> None:
    factors = bundled_kernels()["vllm-v1"]
    assert "marlin" in factors and 0.0 < factors["marlin"] <= 1.0
    a100 = _plan("Qwen3-14B", "a100_sxm_80gb", 1, "fp8")
    family = efficiency_for(a100.gpu)
    eff = served_efficiency(family, a100, "vllm")
    assert eff.gemm_compute == pytest.approx(family.gemm_compute * factors["marlin"])
    assert eff.attention_compute == family.attention_compute
