"""The attention core's operators on one device: prefill pairs, decode KV reads, linear state.

``attention_ops`` is what ``RooflineModel`` runs per layer group; its FLOPs and bytes are the
formulas of ``docs/modeling.md`` (causal prefill pairs, MLA absorbed for decode (at the FP8
rate over an FP8 cache) and expanded for prefill, sliding windows and Llama 4's chunks
(``specs/chunked.py``) capping what is read, a linear-attention layer's whole state read and
written each step). Decode terms stay affine in the replica's context, so a pure-decode stretch
keeps its closed form.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from inferplan.perf.batch import StepBatch
from inferplan.perf.op import ACT_BYTES, Op
from inferplan.perf.sparse_attention import (
    indexer_decode_op,
    indexer_prefill_op,
    is_sparse_prefill,
    read_window,
)
from inferplan.specs.chunked import attention_span
from inferplan.specs.kv import kv_heads_per_rank, linear_state_bytes
from inferplan.specs.model import AttentionSpec


@dataclass(frozen=True)
class AttentionRates:
    """What one device sustains for attention: its FLOP/s and bytes/s (efficiency applied)."""

    compute: float
    memory: float
    fp8_compute: float = 0.0  # FP8 FLOP/s (DSA's indexer); 0: ``compute``
    # Query rows a decode sequence's query occupies per head in a step with a prefill chunk
    # (``Efficiency.mixed_decode_rows``; ``perf/vllm_attention.py``): its KV is read once, but
    # the kernel's matrix multiplies run that many rows. 1: the real rows.
    mixed_decode_rows: float = 1.0


class _Shares(NamedTuple):
    """One device's part of the batch: a micro-batch's share, and with DP attention a rank's.
    (A named tuple: built on every new step shape, where a frozen dataclass's field-by-field
    ``__init__`` costs several times as much.)"""

    prefill: float
    decode_seqs: float
    pairs: float
    cached: float
    prefill_seqs: float
    share: int


def attention_ops(
    att: AttentionSpec,
    count: int,
    batch: StepBatch,
    shape: tuple[int, int, int],
    kv_bytes: float,
    rates: AttentionRates,
    parts: str = "both",
) -> list[Op]:
    """Attention operators for ``count`` layers of ``att``; ``shape`` is (tp, micro-batches,
    attention-DP ranks), ``kv_bytes`` the KV cache's bytes per value. ``parts``: "prefill" or
    "decode" builds the operators of the batch with only its prefill chunks or only its
    decoding sequences (the other side counted as none; ``perf/attention_pieces.py``'s split)."""
    if att.kind == "none":
        return []
    tp, m, dpa = shape
    share = m * dpa
    prefill = 1.0 if parts != "decode" else 0.0  # the other side counted as none
    decode = 1.0 if parts != "prefill" else 0.0
    s = _Shares(
        batch.prefill_tokens / share * prefill,
        batch.num_decode_seqs / share * decode,
        batch.prefill_attention_pairs / share * prefill,
        batch.prefill_context_tokens / share * prefill,
        batch.num_prefill_seqs / share * prefill,
        share,
    )
    if att.kind == "linear":
        return [_linear_op(att, count, s, tp, rates)]
    heads = att.num_heads / tp
    if att.kind == "mla":
        latent = att.kv_lora_rank + att.qk_rope_head_dim
        token_bytes = latent * kv_bytes
        nope = att.head_dim - att.qk_rope_head_dim
        pair_flops = heads * (2 * att.head_dim + 2 * att.v_head_dim)
        up_flops = 2 * s.cached * att.kv_lora_rank * heads * (nope + att.v_head_dim)
        decode_flops = heads * (2 * latent + 2 * att.kv_lora_rank)
    else:
        token_bytes = 2 * kv_heads_per_rank(att, tp) * att.head_dim * kv_bytes
        pair_flops = 4 * heads * att.head_dim
        up_flops = 0.0
        decode_flops = pair_flops
    pairs, cached = s.pairs, s.cached
    span = attention_span(att)
    if span is not None:
        pairs = min(pairs, s.prefill * span)
        # a window reads its last ``window`` tokens, a chunked layer at most one chunk
        reach = att.window_tokens if att.window_tokens is not None else att.chunk_tokens
        cached = min(cached, s.prefill_seqs * (reach or span))
    io = 2 * heads * att.head_dim * ACT_BYTES
    ops = []
    if att.indexer is not None:
        ops.extend(_indexer_ops(att, count, s, dpa, batch, rates))
        if s.prefill and is_sparse_prefill(att.indexer, s.cached + s.prefill, s.prefill_seqs):
            pair_flops, up_flops = decode_flops, 0.0
            pairs = min(pairs, s.prefill * att.indexer.topk)
    if s.prefill:
        flops = pair_flops * pairs + up_flops
        read = token_bytes * (cached + s.prefill) + io * s.prefill
        ops.append(Op("attn_prefill", flops, 0.0, read, 0.0, rates.compute, rates.memory, count))
    if s.decode_seqs:
        decode_rates = rates
        # Absorbed MLA decode is compute bound (128 query heads share each latent token). Over
        # an FP8 cache TensorRT-LLM's MLA generation kernels (trtllm-gen on Blackwell, XQA on
        # Hopper) take FP8 queries and run both matrix multiplies on FP8 tensor cores.
        if att.kind == "mla" and kv_bytes <= 1 and rates.fp8_compute:
            decode_rates = replace(rates, compute=rates.fp8_compute)
        per_token = (token_bytes, decode_flops, io)
        ops.append(_decode_op(att, count, batch, s, per_token, dpa, decode_rates))
    return ops


def _indexer_ops(
    att: AttentionSpec, count: int, s: _Shares, dpa: int, batch: StepBatch, rates: AttentionRates
) -> list[Op]:
    """DSA's lightning indexer over the prefill chunks and the decode rows
    (``perf/sparse_attention.py``)."""
    assert att.indexer is not None
    fp8 = (rates.fp8_compute or rates.compute, rates.memory)
    ops = []
    if s.prefill:
        tokens = s.cached + s.prefill
        ops.append(indexer_prefill_op(att.indexer, count, s.pairs, tokens, fp8))
    if s.decode_seqs:
        q = 1 + batch.num_draft_tokens
        ops.append(indexer_decode_op(att.indexer, count, q, dpa, fp8))
    return ops


def _linear_op(att: AttentionSpec, count: int, s: _Shares, tp: int, rates: AttentionRates) -> Op:
    heads = att.linear_num_value_heads / tp
    per_token = 6 * heads * att.linear_key_head_dim * att.linear_value_head_dim
    # Every step reads and writes each sequence's whole state (fp32 SSM state where the config
    # asks for it).
    state = linear_state_bytes(att, tp, ACT_BYTES)
    seqs = s.decode_seqs + s.prefill_seqs
    flops = per_token * (s.prefill + s.decode_seqs)
    return Op("attn_linear", flops, 0.0, 2 * state * seqs, 0.0, rates.compute, rates.memory, count)


def _decode_op(
    att: AttentionSpec,
    count: int,
    batch: StepBatch,
    s: _Shares,
    per_token: tuple[float, float, float],
    dpa: int,
    rates: AttentionRates,
) -> Op:
    """The decode rows' KV reads: capped by a saturated sliding window, else affine in the
    context (evaluated at the micro-batch's context: this rank reads 1/dpa of it).

    Where the kernel gives a decode query a whole tile (``rates.mixed_decode_rows``, FA2), it
    folds a KV head's query heads into one tile only when every sequence of the step has one
    query row and the layer has no window (FA2's ``seqlenq_ngroups_swapped``): a step with a
    prefill chunk, a speculative verify (``q > 1``) or a sliding-window layer runs the tile's
    rows for each query head."""
    token_bytes, decode_flops, io = per_token
    n, window = s.decode_seqs, read_window(att)
    context = batch.decode_context_tokens / s.share
    # Speculative verify (``perf/speculative.py``): ``q`` queries per sequence read its KV once;
    # query ``j`` also attends to the ``j`` draft tokens before it.
    q = 1 + batch.num_draft_tokens
    drafts = decode_flops * n * (q - 1) * q / 2
    rows: float = q
    if rates.mixed_decode_rows > q and (s.prefill or q > 1 or att.window_tokens is not None):
        rows = rates.mixed_decode_rows  # a whole query tile per decode sequence (_tiled)
    if window is not None and context >= n * window:
        flops = decode_flops * n * window * rows + drafts
        read = token_bytes * (n * window + n * q) + io * n * q
        return Op("attn_decode", flops, 0.0, read, 0.0, rates.compute, rates.memory, count)
    read = token_bytes * n * q + io * n * q
    per_ctx = (decode_flops * rows / dpa, token_bytes / dpa)
    return Op(
        "attn_decode", drafts, per_ctx[0], read, per_ctx[1], rates.compute, rates.memory, count
    )
