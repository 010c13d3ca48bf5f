"""A served engine's BF16 dense GEMMs no faster than its W8A8 FP8 ones on FP8 tensor cores
(perf/fp8_gemm.py)."""

from __future__ import annotations

import pytest

from inferplan.perf import fp8_gemm
from inferplan.perf.batch import StepBatch
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import bundled_kernels
from inferplan.perf.factory import build_step_model
from inferplan.perf.fp8_gemm import bf16_bound, with_bf16_bound
from inferplan.plan.served import served_efficiency
from inferplan.plan.trtllm_serve import bundled_serve_constants, serve_efficiency

from .perf_helpers import tp_plan as _plan


@pytest.fixture(autouse=True)
def _bound_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound as bundled (on); a test that turns it off is undone after it."""
    monkeypatch.setattr(fp8_gemm, "BOUND_BF16_BY_FP8", fp8_gemm.BOUND_BF16_BY_FP8)


def test_the_bound_is_on_in_the_bundle_and_off_gives_the_family_rate() -> None:
    h100 = _plan("Qwen3-14B", "h100_sxm_80gb", 1)
    assert fp8_gemm.BOUND_BF16_BY_FP8
    assert bf16_bound(h100, "bf16", 0.4) < 1.0
    fp8_gemm.BOUND_BF16_BY_FP8 = False  # the fixture restores it
    assert bf16_bound(h100, "bf16", 0.4) == 1.0


def test_the_bound_is_the_fp8_factor_over_the_peak_ratio() -> None:
    h100 = _plan("Qwen3-14B", "h100_sxm_80gb", 1)
    ratio = 989.4 / 1978.9  # H100 SXM dense BF16 / FP8 peaks
    assert bf16_bound(h100, "bf16", 0.4) == pytest.approx(0.4 / ratio)  # 0.8
    assert bf16_bound(h100, "bf16", 0.3) == pytest.approx(0.3 / ratio)
    assert bf16_bound(h100, "bf16", 0.6) == 1.0  # FP8 above the BF16 rate: no bound
    # Only the dense BF16 class, and only on a part with FP8 tensor cores.
    assert bf16_bound(h100, "experts", 0.4) == 1.0
    assert bf16_bound(h100, "fp8", 0.4) == 1.0
    assert bf16_bound(_plan("Qwen3-14B", "a100_sxm_80gb", 1), "bf16", 0.4) == 1.0
    eff = efficiency_for(h100.gpu)
    assert with_bf16_bound(eff, h100, "bf16", 0.6) is eff
    bound = with_bf16_bound(eff, h100, "bf16", 0.4)
    # The BF16 GEMM rate equals the FP8 one the factor gives; nothing else moves.
    assert bound.gemm_compute * h100.gpu.peak("bf16") == pytest.approx(
        0.4 * eff.gemm_compute * h100.gpu.peak("fp8")
    )
    assert bound.memory_bandwidth == eff.memory_bandwidth
    assert bound.attention_compute == eff.attention_compute


def _prefill_s(engine: str, dtype: str) -> float:
    """Qwen3-14B's 8,192-token prefill step (32 prompts of 256) on one H100 as ``engine``
    runs it."""
    batch = StepBatch(
        prefill_tokens=8192, prefill_attention_pairs=32 * 256 * 257 / 2, num_prefill_seqs=32
    )
    plan = _plan("Qwen3-14B", "h100_sxm_80gb", 1, None if dtype == "bf16" else dtype)
    family = efficiency_for(plan.gpu)
    if engine == "trtllm-serve":
        eff = serve_efficiency(served_efficiency(family, plan, "trtllm"), plan)
    else:
        eff = served_efficiency(family, plan, engine)
    return build_step_model(plan, efficiency=eff).step_time(batch).total_s


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm-serve"])
def test_no_served_engine_prefills_slower_in_fp8_than_in_bf16(engine: str) -> None:
    """The wave19 defect: SGLang's and trtllm-serve's 0.4 on the FP8 peak put Qwen3-14B's
    8,192-token FP8 prefill step at 1.24x the BF16 one on H100 (477 vs 385 ms)."""
    assert _prefill_s(engine, "fp8") <= _prefill_s(engine, "bf16") * (1 + 1e-9)


def test_the_engines_bf16_prefill_is_the_fp8_one_where_the_bound_binds() -> None:
    """SGLang's fitted fp8 factor binds (below the peak ratio); vLLM's does not."""
    assert bundled_kernels()["sglang"]["fp8"] < 0.5
    assert bundled_serve_constants().kernels["fp8"] < 0.5
    for engine in ("sglang", "trtllm-serve"):
        assert _prefill_s(engine, "bf16") == pytest.approx(_prefill_s(engine, "fp8"), rel=0.02)
    h100 = _plan("Qwen3-14B", "h100_sxm_80gb", 1)
    vllm = served_efficiency(efficiency_for(h100.gpu), h100, "vllm")
    assert vllm.gemm_compute == efficiency_for(h100.gpu).gemm_compute
