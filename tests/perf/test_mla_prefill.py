"""vLLM v1 runs MLA prefill in FlashAttention: its ``mla`` factor leaves attention compute alone
(perf/engine_kernels.py ``MLA_FLASH_PREFILL``)."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import bundled_kernels, scale_kernels, with_engine_kernels
from inferplan.perf.factory import build_step_model
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


def test_vllm_mla_factor_scales_gemms_not_attention_sglang_both() -> None:
    eff = efficiency_for(load_gpu("h200_sxm_141gb"))
    vllm = scale_kernels(eff, 0.3, "mla", "vllm-v1")
    assert vllm.gemm_compute == pytest.approx(eff.gemm_compute * 0.3)
    assert vllm.attention_compute == eff.attention_compute
    sglang = scale_kernels(eff, 0.3, "mla", "sglang")
    assert sglang.attention_compute == pytest.approx(eff.attention_compute * 0.3)
    assert scale_kernels(eff, 0.3, "mla").attention_compute == sglang.attention_compute
    # fp8 never touched attention, whichever engine.
    assert scale_kernels(eff, 0.3, "fp8", "sglang").attention_compute == eff.attention_compute


def test_a_long_context_chunk_of_deepseek_is_faster_under_vllm_than_sglang() -> None:
    """Same factor, same chunk: 8,192 prompt tokens after 16,000 cached, where attention is most
    of the step. Only the attention term differs, so vLLM's step is shorter, and a prefill of
    short prompts (attention negligible) is about the same."""
    gpu = load_gpu("h200_sxm_141gb")
    plan = plan_memory(
        load_model("DeepSeek-R1"), gpu, Parallelism(tp=8), MemoryConfig(max_model_len=32768)
    )
    family = efficiency_for(gpu)
    long = StepBatch(
        prefill_tokens=8192,
        prefill_attention_pairs=chunk_attention_pairs(8192, 16000),
        prefill_context_tokens=16000,
        num_prefill_seqs=1,
    )
    short = StepBatch(
        prefill_tokens=8192,
        prefill_attention_pairs=64 * chunk_attention_pairs(128, 0),
        num_prefill_seqs=64,
    )
    times = {}
    for engine in ("vllm-v1", "sglang"):
        step = build_step_model(plan, efficiency=scale_kernels(family, 0.3, "mla", engine))
        times[engine] = (step.step_time(long).total_s, step.step_time(short).total_s)
    assert times["vllm-v1"][0] < 0.65 * times["sglang"][0]
    assert times["vllm-v1"][1] == pytest.approx(times["sglang"][1], rel=0.02)


def test_with_engine_kernels_passes_the_engine_class() -> None:
    eff = efficiency_for(load_gpu("h200_sxm_141gb"))
    assert with_engine_kernels(eff, "vllm-v1", "mla").attention_compute == eff.attention_compute
    assert with_engine_kernels(eff, "sglang", "mla").attention_compute < eff.attention_compute


def test_vllm_mla_and_marlin_classes_have_their_own_factors() -> None:
    """DeepSeek-R1's block-scaled FP8 GEMMs (against the BF16 peak) and the A100 runs' Marlin
    W8A16 are fitted apart (perf/vllm_fp8.py); vLLM's fp8 class (FP8 tensor cores) has no row,
    so no fitted factor (it takes the others' geometric mean)."""
    factors = bundled_kernels()["vllm-v1"]
    assert "mla" in factors and "marlin" in factors
    assert "fp8" not in factors
