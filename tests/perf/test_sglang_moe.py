"""SGLang's BF16 routed experts: the ``experts`` kernel class (perf/sglang_moe.py)."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import bundled_kernels, plan_kernel_class
from inferplan.perf.fp8_gemm import bf16_bound
from inferplan.perf.sglang_moe import sglang_kernel_class
from inferplan.plan.served import served_efficiency

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
    moe = _plan("GLM-4.5-Air", "a100_sxm_80gb", 4)
    family = efficiency_for(moe.gpu)
    eff = served_efficiency(family, moe, "sglang")
    assert eff.moe_gemm == pytest.approx(family.moe_gemm * 0.3)
    assert eff.gemm_compute == family.gemm_compute  # dense layers: cuBLAS, the family's
    assert eff.attention_compute == family.attention_compute
    assert eff.memory_bandwidth == family.memory_bandwidth  # decode's streaming untouched
    dense = _plan("Qwen3-14B", "h100_sxm_80gb", 1)
    dense_eff = served_efficiency(efficiency_for(dense.gpu), dense, "sglang")
    assert dense_eff.moe_gemm == efficiency_for(dense.gpu).moe_gemm
    # dense BF16 on Hopper: no faster than SGLang's FP8 GEMMs (perf/fp8_gemm.py)
    bound = bf16_bound(dense, "bf16", bundled_kernels()["sglang"]["fp8"])
    assert dense_eff.gemm_compute == pytest.approx(efficiency_for(dense.gpu).gemm_compute * bound)


def test_mxfp4_has_its_own_factor_apart_from_fp8_and_mla() -> None:
    # docs/validation.md sglang6: gpt-oss's MXFP4 experts run OpenAI's triton_kernels, not an
    # FP8 GEMM, so the fit gives the class its own factor (0.3) beside FP8/MLA's (0.4).
    factors = bundled_kernels()["sglang"]
    assert (factors["fp8"], factors["mla"], factors["mxfp4"]) == (0.4, 0.4, 0.3)
    gpt_oss = _plan("gpt-oss-20b", "h100_sxm_80gb", 1)
    assert _class(gpt_oss) == "mxfp4"
    family = efficiency_for(gpt_oss.gpu)
    eff = served_efficiency(family, gpt_oss, "sglang")
    assert eff.gemm_compute == pytest.approx(family.gemm_compute * 0.3)
    glm_fp8 = _plan("GLM-4.6", "h200_sxm_141gb", 4, "fp8")
    assert _class(glm_fp8) == "fp8"
    fp8 = served_efficiency(efficiency_for(glm_fp8.gpu), glm_fp8, "sglang")
    assert fp8.gemm_compute == pytest.approx(efficiency_for(glm_fp8.gpu).gemm_compute * 0.4)
