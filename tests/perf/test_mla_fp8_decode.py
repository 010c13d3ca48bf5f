"""MLA decode over an FP8 KV cache runs both of its matrix multiplies at the FP8 tensor-core rate
(``perf/attention_ops.py``); a BF16 cache, a GQA layer and the prefill keep the BF16 rate."""

from __future__ import annotations

import pytest

from inferplan.perf.attention_ops import AttentionRates, attention_ops
from inferplan.perf.batch import StepBatch
from inferplan.specs.catalog import load_model

RATES = AttentionRates(compute=1e15, memory=5e12, fp8_compute=2e15)
BATCH = StepBatch(
    prefill_tokens=1024,
    prefill_attention_pairs=1024 * 1025 / 2,
    num_prefill_seqs=1,
    num_decode_seqs=256,
    decode_context_tokens=256 * 8192,
)


def _ops(model: str, kv_bytes: float) -> dict[str, tuple[float, float]]:
    """Each operator's (FLOP/s, compute seconds at the batch's context) for one layer."""
    att = load_model(model).layer_groups[0].attention
    ops = attention_ops(att, 1, BATCH, (1, 1, 1), kv_bytes, RATES)
    context = BATCH.decode_context_tokens
    return {op.name: (op.flops_s, op.terms(context)[0]) for op in ops}


def test_mla_decode_runs_at_the_fp8_rate_over_an_fp8_cache() -> None:
    fp8, bf16 = _ops("DeepSeek-R1", 1.0), _ops("DeepSeek-R1", 2.0)
    assert fp8["attn_decode"][0] == RATES.fp8_compute
    assert bf16["attn_decode"][0] == RATES.compute
    # Same FLOPs, twice the rate: half the compute time.
    assert fp8["attn_decode"][1] == pytest.approx(bf16["attn_decode"][1] / 2)
    # The prefill (expanded MLA, the context FMHA) keeps the BF16 rate either way.
    assert fp8["attn_prefill"][0] == bf16["attn_prefill"][0] == RATES.compute


def test_mla_decode_is_compute_bound_at_bf16_and_not_memory_bound_over_fp8() -> None:
    """128 query heads read each 576-value latent token: 2 x 128 x (576 + 512) FLOPs per byte
    of an FP8 cache, far above this part's 200 FLOP/byte ridge, so the decode stays compute
    bound; the FP8 rate halves its time."""
    att = load_model("DeepSeek-R1").layer_groups[0].attention
    ops = attention_ops(att, 1, BATCH, (1, 1, 1), 1.0, RATES)
    decode = next(op for op in ops if op.name == "attn_decode")
    compute, memory = decode.terms(BATCH.decode_context_tokens)
    assert compute > memory
    flops = 2 * att.num_heads * (att.kv_lora_rank + att.qk_rope_head_dim + att.kv_lora_rank)
    assert decode.f1 == pytest.approx(flops)


def test_gqa_decode_keeps_the_bf16_rate_over_an_fp8_cache() -> None:
    ops = _ops("Llama-3.1-8B", 1.0)
    assert ops["attn_decode"][0] == RATES.compute
