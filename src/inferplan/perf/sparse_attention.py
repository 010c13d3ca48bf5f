"""DeepSeek sparse attention (DSA) on one device: the lightning indexer's operator and the
sparse MLA core's pairs (``specs/sparse.py`` has the layer's shape and its sources).

- **Indexer.** Every query token scores every earlier token: ``2 * index_heads * index_dim``
  FLOPs a (query, key) pair in FP8 (DeepSeek's ``fp8_index``, SGLang's DeepGEMM
  ``fp8_mqa_logits``), at the part's FP8 peak times the attention fraction; it reads each
  token's cached FP8 index key once a step and writes and reads one fp32 score a pair for the
  top-k selection. Its projections are replicated, so its heads are not split by tensor
  parallelism. In decode both terms are affine in the context, as the dense KV read is.
- **Core, decode.** MLA in its absorbed form reads only the ``index_topk`` selected latents of
  a sequence: a read window of ``index_topk`` tokens (``read_window``), saturated where the
  context is longer, as a sliding window's is (``attention_ops._decode_op``).
- **Core, prefill.** SGLang's NSA backend (``models/deepseek_v2.py``
  ``handle_attention_nsa``, 0.5.5) runs a prefill whose longest sequence fits in
  ``index_topk`` as dense MHA (top-k selects everything; MHA has the fewer FLOPs) and a longer
  one as sparse MLA in the absorbed form: ``min(causal pairs, tokens * index_topk)`` pairs at
  the decode's per-pair FLOPs, no up-projection of the cached latents. The step's aggregate
  batch knows the mean length of its sequences, not the longest: the mean decides here.
"""

from __future__ import annotations

from inferplan.perf.op import Op
from inferplan.specs.chunked import attention_span
from inferplan.specs.model import AttentionSpec
from inferplan.specs.sparse import IndexerSpec

SCORE_BYTES = 4.0  # one fp32 index score a (query, key) pair, written then read by top-k


def read_window(att: AttentionSpec) -> int | None:
    """The most tokens of a sequence one decode step's attention reads: a sliding window or
    half a local-attention chunk (``specs.chunked.attention_span``), the indexer's top-k,
    whichever is smaller, or None (the whole context)."""
    spans = [attention_span(att), None if att.indexer is None else att.indexer.topk]
    known = [s for s in spans if s is not None]
    return min(known) if known else None


def pair_flops(indexer: IndexerSpec) -> float:
    """The indexer's FLOPs for one (query, key) pair."""
    return 2.0 * indexer.num_heads * indexer.head_dim


def indexer_prefill_op(
    indexer: IndexerSpec, count: int, pairs: float, tokens: float, rates: tuple[float, float]
) -> Op:
    """The indexer over a prefill's ``pairs`` causal pairs whose chunks read ``tokens`` keys
    (their cached prefixes and themselves); ``rates``: (FP8 FLOP/s, bytes/s)."""
    flops = pair_flops(indexer) * pairs
    read = indexer.key_bytes_per_token * tokens + 2 * SCORE_BYTES * pairs
    return Op("attn_indexer", flops, 0.0, read, 0.0, rates[0], rates[1], count)


def indexer_decode_op(
    indexer: IndexerSpec, count: int, queries: float, dpa: int, rates: tuple[float, float]
) -> Op:
    """The indexer of the decode rows: each of the ``queries`` rows per sequence scores the
    sequence's whole context (affine in the micro-batch's context; this rank holds 1/dpa);
    ``rates``: (FP8 FLOP/s, bytes/s)."""
    per_ctx_flops = pair_flops(indexer) * queries / dpa
    per_ctx_bytes = (indexer.key_bytes_per_token + 2 * SCORE_BYTES * queries) / dpa
    return Op("attn_indexer", 0.0, per_ctx_flops, 0.0, per_ctx_bytes, rates[0], rates[1], count)


def is_sparse_prefill(indexer: IndexerSpec, tokens: float, seqs: float) -> bool:
    """Whether SGLang runs the prefill's core sparse: its sequences' mean length (cached
    prefix and chunk, ``tokens`` over ``seqs``) exceeds the indexer's top-k."""
    return seqs > 0 and tokens > seqs * indexer.topk
