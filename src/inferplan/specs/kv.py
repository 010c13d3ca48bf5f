"""KV-cache bytes: per token per layer, per sequence, and per device under tensor parallelism.

- GQA/MHA/MQA layers store K and V: ``2 * num_kv_heads * head_dim`` values per token.
- MLA layers (DeepSeek-V3/R1, Kimi-K2) store one compressed latent plus the decoupled RoPE key:
  ``kv_lora_rank + qk_rope_head_dim`` values per token (576 for DeepSeek-V3), as vLLM's MLA
  backends cache it; the latent is not split by TP, every rank holds all of it.
- Sliding-window layers hold at most ``window_tokens`` tokens of a sequence.
- Linear-attention layers (Qwen3-Next Gated DeltaNet) hold a fixed state per sequence, not KV
  per token: the causal-conv state ``(2*Kd + Vd) * (conv_kernel - 1)`` plus the recurrent state
  ``num_value_heads * key_head_dim * value_head_dim``, kept in the model dtype (vLLM's default
  ``mamba_ssm_cache_dtype=auto``), split across TP ranks by heads. Nemotron-H's Mamba-2 mixers
  read the same way (``specs/hybrid.py``); its config asks for an fp32 SSM state, which then
  takes 4 bytes a value (the conv state stays in the model dtype).
- Layers without a mixer (Nemotron-H MLP/MoE blocks) hold nothing.
- Under TP a GQA layer's KV heads are split across ranks; when TP exceeds the KV heads, each rank
  keeps one head (replicated ``tp / num_kv_heads`` times), as vLLM does.
"""

from __future__ import annotations

from inferplan.specs.dtypes import NumberFormat
from inferplan.specs.model import AttentionSpec, ModelSpec


def kv_heads_per_rank(att: AttentionSpec, tp: int) -> int:
    return max(1, att.num_kv_heads // tp)


def kv_values_per_token(att: AttentionSpec, tp: int = 1) -> int:
    """KV values one token adds to one layer on one TP rank."""
    if att.kind in ("linear", "none"):
        return 0
    if att.kind == "mla":
        return att.kv_lora_rank + att.qk_rope_head_dim
    return 2 * kv_heads_per_rank(att, tp) * att.head_dim


def linear_state_values(att: AttentionSpec, tp: int = 1) -> int:
    """Fixed per-sequence state of one linear-attention layer on one TP rank."""
    if att.kind != "linear":
        return 0
    key_dim = att.linear_num_key_heads * att.linear_key_head_dim
    value_dim = att.linear_num_value_heads * att.linear_value_head_dim
    conv = (2 * key_dim + value_dim) * (att.conv_kernel_size - 1)
    recurrent = att.linear_num_value_heads * att.linear_key_head_dim * att.linear_value_head_dim
    return (conv + recurrent) // tp


def linear_state_bytes(att: AttentionSpec, tp: int, model_bytes_per_value: float) -> float:
    """Bytes of one sequence's fixed state in one linear-attention layer on one TP rank."""
    if att.kind != "linear":
        return 0.0
    total = linear_state_values(att, tp)
    if not att.has_fp32_state:
        return total * model_bytes_per_value
    recurrent = (
        att.linear_num_value_heads * att.linear_key_head_dim * att.linear_value_head_dim // tp
    )
    return (total - recurrent) * model_bytes_per_value + recurrent * 4.0


def kv_bytes_per_token(spec: ModelSpec, kv: NumberFormat, *, tp: int = 1) -> float:
    """One token of one sequence, summed over every layer, on one TP rank (``tp=1``: the model)."""
    return sum(kv_values_per_token(g.attention, tp) * g.num_layers for g in spec.layer_groups) * (
        kv.bytes_per_value
    )


def sequence_kv_bytes(
    layers: tuple[tuple[AttentionSpec, int], ...],
    context_tokens: int,
    kv: NumberFormat,
    state_bytes_per_value: float,
    *,
    tp: int,
    block_tokens: int = 1,
) -> float:
    """KV bytes one sequence of ``context_tokens`` holds on one rank over ``layers`` (attention,
    count) pairs, rounded up to whole blocks; sliding layers hold at most their window plus the
    block being filled."""
    total = 0.0
    for att, count in layers:
        if att.kind == "linear":
            total += linear_state_bytes(att, tp, state_bytes_per_value) * count
            continue
        if att.kind == "none":
            continue
        tokens = context_tokens
        if att.window_tokens is not None:
            tokens = min(tokens, att.window_tokens + block_tokens)
        tokens = -(-tokens // block_tokens) * block_tokens
        total += kv_values_per_token(att, tp) * kv.bytes_per_value * tokens * count
    return total
