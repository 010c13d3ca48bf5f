"""vLLM's BF16 routed experts: their own kernel class, and untuned fused-MoE configs
(perf/vllm_moe.py, perf/engine_kernels.py)."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import (
    bundled_kernels,
    engine_factor,
    plan_kernel_class,
    scale_kernels,
    unseen_factor,
)
from inferplan.perf.vllm_moe import (
    UNTUNED_EXPERTS,
    expert_shape,
    is_untuned,
    routed_ffn,
    vllm_kernel_class,
    with_fused_moe_configs,
)
from inferplan.plan.served import served_efficiency
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


def _plan(
    model: str, gpu: str, tp: int, quantization: str | None = None, ep: bool = False
) -> MemoryPlan:
    return plan_memory(
        load_model(model),
        load_gpu(gpu),
        Parallelism(tp=tp, enable_expert_parallel=ep),
        MemoryConfig(quantization=quantization, max_model_len=4096),
    )


def _shape(plan: MemoryPlan) -> tuple[int, int]:
    ffn = routed_ffn(plan)
    assert ffn is not None
    return expert_shape(ffn, plan.parallelism.tp, plan.parallelism.ep)


def test_the_config_shape_is_the_ranks_experts_and_their_sliced_width() -> None:
    # GLM-4.6: 160 experts of width 1536; TP8 slices each to 192, EP8 gives each rank 20 whole.
    assert _shape(_plan("GLM-4.6", "h200_sxm_141gb", 8)) == (160, 192)
    assert _shape(_plan("GLM-4.6", "h200_sxm_141gb", 8, ep=True)) == (20, 1536)
    # Qwen3-235B-A22B: 128 experts of width 1536, TP8 -> 192 (vLLM ships this file for H100).
    assert _shape(_plan("Qwen3-235B-A22B", "h100_sxm_80gb", 8)) == (128, 192)


def test_untuned_means_a_listed_device_without_the_shape() -> None:
    assert is_untuned(_plan("GLM-4.6", "h200_sxm_141gb", 8))  # E=160,N=192: no H200 file
    assert is_untuned(_plan("GLM-4.5-Air", "a100_sxm_80gb", 4))  # E=128,N=352: none on A100
    assert not is_untuned(_plan("Qwen3-235B-A22B", "h100_sxm_80gb", 8))  # E=128,N=192 ships
    assert not is_untuned(_plan("Qwen3-235B-A22B", "h200_sxm_141gb", 8))  # E=128,N=192 on H200
    assert not is_untuned(_plan("GLM-4.6", "rtx4090", 8))  # a device without a listing
    assert not is_untuned(_plan("Qwen3-14B", "h200_sxm_141gb", 1))  # dense: nothing to look up


def test_bf16_moe_is_vllms_experts_class_and_other_classes_keep_theirs() -> None:
    moe = _plan("GLM-4.6", "h200_sxm_141gb", 8)
    assert vllm_kernel_class(moe, plan_kernel_class(moe)) == "experts"
    dense = _plan("Qwen3-14B", "h200_sxm_141gb", 1)
    assert vllm_kernel_class(dense, plan_kernel_class(dense)) == "bf16"
    fp8 = _plan("Qwen3-235B-A22B", "h200_sxm_141gb", 8, "fp8")
    assert vllm_kernel_class(fp8, plan_kernel_class(fp8)) == "fp8"


def test_the_experts_factor_scales_the_grouped_gemms_only() -> None:
    eff = efficiency_for(load_gpu("h200_sxm_141gb"))
    slow = scale_kernels(eff, 0.5, "experts")
    assert slow.moe_gemm == pytest.approx(eff.moe_gemm * 0.5)
    assert slow.gemm_compute == eff.gemm_compute
    assert slow.attention_compute == eff.attention_compute
    # Where an engine has no factor, 1 (as BF16); it does not enter the unseen-class prior.
    assert engine_factor({"fp8": 0.4}, "experts") == 1.0
    assert unseen_factor({"fp8": 0.4, "experts": 0.1}) == pytest.approx(0.4)


def test_an_untuned_bf16_run_has_its_experts_at_half_rate() -> None:
    assert UNTUNED_EXPERTS == 0.5
    eff = efficiency_for(load_gpu("h200_sxm_141gb"))
    untuned = with_fused_moe_configs(eff, _plan("GLM-4.6", "h200_sxm_141gb", 8))
    assert untuned.moe_gemm == pytest.approx(eff.moe_gemm / 2)
    assert untuned.gemm_compute == eff.gemm_compute
    tuned = _plan("Qwen3-235B-A22B", "h200_sxm_141gb", 8)  # E=128,N=192 ships for H200
    assert with_fused_moe_configs(eff, tuned) is eff
    fp8 = _plan("Qwen3-235B-A22B", "h200_sxm_141gb", 4, "fp8")  # not BF16 experts
    assert with_fused_moe_configs(eff, fp8) is eff


def test_served_efficiency_applies_it_to_vllm_only() -> None:
    plan = _plan("GLM-4.6", "h200_sxm_141gb", 8)
    family = efficiency_for(plan.gpu)
    vllm = served_efficiency(family, plan, "vllm")
    sglang = served_efficiency(family, plan, "sglang")
    # SGLang: its own experts factor (perf/sglang_moe.py), without vLLM's untuned halving.
    sglang_experts = bundled_kernels()["sglang"]["experts"]
    assert sglang.moe_gemm == pytest.approx(family.moe_gemm * sglang_experts)
    # vLLM: the experts class's bundled factor, then half for the untuned E=160,N=192 shape.
    experts = bundled_kernels()["vllm-v1"]["experts"]
    assert vllm.moe_gemm == pytest.approx(family.moe_gemm * experts * 0.5)
    assert vllm.gemm_compute == family.gemm_compute  # dense GEMMs stay cuBLAS's
