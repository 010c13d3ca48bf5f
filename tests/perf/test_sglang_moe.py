"""SGLang's routed experts: the ``experts`` kernel class and its fused-MoE configs
(perf/sglang_moe.py)."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import bundled_kernels, plan_kernel_class
from inferplan.perf.sglang_moe import (
    config_key,
    is_untuned,
    sglang_kernel_class,
    with_sglang_moe_configs,
)
from inferplan.plan.served import served_efficiency
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism

from .perf_helpers import tp_plan as _plan


def _class(plan: MemoryPlan) -> str:
    return sglang_kernel_class(plan, plan_kernel_class(plan))


def test_bf16_moe_is_the_experts_class_and_the_others_keep_theirs() -> None:
    assert _class(_plan("GLM-4.5-Air", "a100_sxm_80gb", 4)) == "experts"
    assert _class(_plan("Qwen3-235B-A22B", "h100_sxm_80gb", 8)) == "experts"
    assert _class(_plan("Qwen3-14B", "h100_sxm_80gb", 1)) == "bf16"  # dense: the reference
    assert _class(_plan("Qwen3-235B-A22B", "h200_sxm_141gb", 8, "fp8")) == "fp8"
    assert _class(_plan("DeepSeek-R1", "h200_sxm_141gb", 8)) == "mla"


def test_sglang_runs_its_bf16_experts_at_its_factor_and_nothing_else_moves() -> None:
    experts = bundled_kernels()["sglang"]["experts"]
    assert experts == 0.3  # perf/data: fitted on the grid 1 .. 0.3 (docs/validation.md sglang5)
    moe = _plan("Qwen3-235B-A22B", "h100_sxm_80gb", 8)  # E=128,N=192: a tuned BF16 config
    family = efficiency_for(moe.gpu)
    eff = served_efficiency(family, moe, "sglang")
    assert eff.moe_gemm == pytest.approx(family.moe_gemm * 0.3)
    assert eff.gemm_compute == family.gemm_compute  # dense layers: cuBLAS, the family's
    assert eff.attention_compute == family.attention_compute
    assert eff.memory_bandwidth == family.memory_bandwidth  # decode's streaming untouched
    dense = _plan("Qwen3-14B", "h100_sxm_80gb", 1)
    dense_eff = served_efficiency(efficiency_for(dense.gpu), dense, "sglang")
    assert dense_eff.moe_gemm == efficiency_for(dense.gpu).moe_gemm
    assert dense_eff.gemm_compute == efficiency_for(dense.gpu).gemm_compute


def _ep_plan(model: str, gpu: str, tp: int, dp: int, quantization: str | None = None) -> MemoryPlan:
    """Expert parallelism over ``tp`` x ``dp`` GPUs (``dp`` > 1: DP attention, as
    ``plan/published_runs.py`` models SGLang's ``--enable-dp-attention``)."""
    par = Parallelism(tp=tp, dp=dp, enable_expert_parallel=True)
    return plan_memory(
        load_model(model),
        load_gpu(gpu),
        par,
        MemoryConfig(quantization=quantization, max_model_len=4096),
    )


def test_the_config_sglang_looks_up_and_whether_it_ships() -> None:
    h100, h200, a100 = "NVIDIA_H100_80GB_HBM3", "NVIDIA_H200", "NVIDIA_A100-SXM4-80GB"
    # GLM-4.6 (160 experts of 1,536): FP8 at TP8 on H100, E=160,N=192 per-channel: not shipped.
    glm_h100 = _plan("GLM-4.6", "h100_sxm_80gb", 8, "fp8")
    assert config_key(glm_h100) == (h100, 160, 192, "fp8")
    assert is_untuned(glm_h100)
    glm_h200 = _plan("GLM-4.6", "h200_sxm_141gb", 4, "fp8")  # E=160,N=384 on H200: shipped
    assert config_key(glm_h200) == (h200, 160, 384, "fp8")
    assert not is_untuned(glm_h200)
    assert is_untuned(_plan("GLM-4.6", "h200_sxm_141gb", 8))  # BF16 E=160,N=192: FP8 file only
    # DeepSeek-R1's own FP8 checkpoint: 128 x 128 blocks; 256 experts of 2,048 at TP8.
    r1 = _plan("DeepSeek-R1", "h200_sxm_141gb", 8)
    assert config_key(r1) == (h200, 256, 256, "fp8_block")
    assert not is_untuned(r1)
    # DP attention: SGLang keeps the experts tensor-parallel over the group (no --ep-size).
    assert config_key(_ep_plan("DeepSeek-R1", "h200_sxm_141gb", 1, 8)) == (
        h200,
        256,
        256,
        "fp8_block",
    )
    # Expert parallelism alone: a rank's share of the experts, each whole (GLM-4.5-Air, EP4).
    air_ep = _ep_plan("GLM-4.5-Air", "a100_sxm_80gb", 4, 1)
    assert config_key(air_ep) == (a100, 32, 1408, "bf16")
    assert is_untuned(air_ep)
    # Qwen3-235B-A22B BF16 at TP8 (128 experts of 1,536): H100 ships E=128,N=192, A100 not.
    assert config_key(_plan("Qwen3-235B-A22B", "h100_sxm_80gb", 8)) == (h100, 128, 192, "bf16")
    assert not is_untuned(_plan("Qwen3-235B-A22B", "h100_sxm_80gb", 8))
    assert is_untuned(_plan("Qwen3-235B-A22B", "a100_sxm_80gb", 8))
    # Not the Triton runner's: MXFP4 experts, and no experts at all.
    assert config_key(_plan("gpt-oss-120b", "h100_sxm_80gb", 1)) is None
    assert config_key(_plan("Qwen3-14B", "h100_sxm_80gb", 1)) is None


def test_an_untuned_shape_halves_the_experts_rate_and_nothing_else() -> None:
    plan = _plan("GLM-4.6", "h100_sxm_80gb", 8, "fp8")
    family = efficiency_for(plan.gpu)
    untuned = with_sglang_moe_configs(family, plan)
    assert untuned.moe_gemm == pytest.approx(family.moe_gemm * 0.5)
    assert untuned.gemm_compute == family.gemm_compute
    assert untuned.memory_bandwidth == family.memory_bandwidth
    tuned = _plan("GLM-4.6", "h200_sxm_141gb", 4, "fp8")
    assert with_sglang_moe_configs(efficiency_for(tuned.gpu), tuned) == efficiency_for(tuned.gpu)
    # served_efficiency: SGLang's FP8 class factor, then the halving; vLLM's listing is its own.
    fp8 = bundled_kernels()["sglang"]["fp8"]
    sglang = served_efficiency(family, plan, "sglang")
    assert sglang.gemm_compute == pytest.approx(family.gemm_compute * fp8)
    assert sglang.moe_gemm == pytest.approx(family.moe_gemm * 0.5)
    vllm = served_efficiency(family, plan, "vllm")  # vLLM halves BF16 experts only
    assert vllm.moe_gemm == family.moe_gemm
