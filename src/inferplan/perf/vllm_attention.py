"""vLLM v1's attention kernel on Ampere and Ada: FlashAttention-2, one query tile per decode row
in a mixed step.

**Which kernel.** vLLM v1 (0.10, 0.11) runs softmax attention with its ``FLASH_ATTN`` backend
by default on CUDA, in the FlashAttention version the device supports: FA3 needs sm90 (Hopper),
so sm80/sm86/sm89 (A100, A10, L40S) run **FA2** (``vllm/attention/utils/fa_utils.py``
``get_flash_attn_version``). Models with attention sinks (gpt-oss) take the Triton backend on
these parts instead (FA2 has no sinks; ``vllm/platforms/cuda.py``), and MLA models their own
backends, so neither is charged here.

**What a mixed step costs.** The backend calls ``flash_attn_varlen_func`` once over the whole
batch, decode rows and prefill chunks together, with the paged KV cache's block table
(``vllm/v1/attention/backends/flash_attn.py``). In vLLM's FlashAttention fork
(github.com/vllm-project/flash-attention, ``csrc/flash_attn/flash_api.cpp`` ``mha_varlen_fwd``):

- a paged KV cache always runs the split-KV kernel (``run_mha_fwd(params, stream, paged_KV)``
  forces it), whose query tile is **64 rows** for every head dimension ("kBlockM = 64 only
  for the splitKV kernels", ``set_params_splitkv``; ``run_mha_fwd_splitkv_dispatch``);
- the grid is (query tiles of each sequence) x (sequences) x (query heads). Only when the whole
  batch is decode (``max_seqlen_q == 1``) and the layer has no sliding window are a KV head's
  query heads folded into one tile (``seqlenq_ngroups_swapped``). In a step that carries a
  prefill chunk (or a speculative verify, ``max_seqlen_q = 1 + k``, or in a sliding-window
  layer at every step), each decode sequence gets, for **each query head**, a tile of 64 rows
  of which one (``1 + k``) is real,
  and the tile's matrix multiplies run over its whole context: ``4 x 64 x head_dim`` FLOPs per
  context token and query head, 64 times the real row's.

The model keeps the decode term's bytes at one read per KV head (whether the other query
heads' tiles re-read it from HBM or hit L2 depends on the grid order: a re-read per query head
was tried and is too slow on A100, docs/validation.md ``vllm7``); its FLOPs change, and on
A100 they decide: per context token and layer a Qwen3-14B decode row (40 query heads, 8 KV
heads, head_dim 128) runs 4 x 64 x 128 x 40 = 1.3 MFLOP against 4 KB of K and V, 320
FLOP/byte, where A100's attention rates (312 TFLOP/s x 0.55 over 2.04 TB/s x 0.75) balance at
about 112. A pure-decode step (the swapped
path) runs ``4 x 64 x head_dim`` per KV head, 64 FLOP/byte: still memory-bound, not charged.
Hopper's FA3 packs a KV head's query heads into its tile in varlen batches too (pack-GQA), 128
rows per KV head: 128 FLOP/byte against H100's ~270, memory-bound, so Hopper keeps 1.

No constant is fitted: the rows are the kernel's tile; the FLOPs run at the family's
``attention_compute`` (the same kernel's rate on prefill tiles).
"""

from __future__ import annotations

from dataclasses import replace

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency

# FA2's split-KV kernel's query tile (rows), every head dimension (module docstring).
FA2_SPLITKV_TILE_ROWS = 64.0
# Architectures whose vLLM FLASH_ATTN backend is FA2 (sm80, sm86, sm89).
FA2_ARCHITECTURES = ("ampere", "ada_lovelace")


def runs_fa2_varlen(plan: MemoryPlan) -> bool:
    """Whether vLLM runs ``plan``'s attention in FA2's paged varlen kernel: an sm8x part, a KV
    cache in the model's 16-bit type (FA2 reads no FP8 KV: vLLM picks another backend for
    ``--kv-cache-dtype fp8``) and softmax GQA attention without sinks in every layer that has
    attention."""
    if plan.gpu.architecture not in FA2_ARCHITECTURES or plan.kv_format.bytes_per_value != 2:
        return False
    kinds = [g.attention for g in plan.spec.layer_groups if g.attention.kind != "none"]
    return bool(kinds) and all(a.kind == "gqa" and not a.has_sinks for a in kinds)


def with_vllm_attention(eff: Efficiency, plan: MemoryPlan) -> Efficiency:
    """``eff`` with FA2's 64-row tile per decode query in mixed steps where vLLM runs FA2
    (``runs_fa2_varlen``); otherwise unchanged."""
    if not runs_fa2_varlen(plan):
        return eff
    return replace(eff, mixed_decode_rows=FA2_SPLITKV_TILE_ROWS)
