"""vLLM v1's attention kernels on Ampere and Ada: FlashAttention-2, one query tile per decode row
in a mixed step; the Triton unified-attention kernel, whose programs re-load K and V.

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

**Models with attention sinks (gpt-oss) run vLLM's Triton unified attention on sm8x**
(``TRITON_ATTN``: FA2 has no sinks). Its prefill kernel (``vllm/attention/ops/
triton_unified_attention.py`` ``kernel_unified_attention_2d``, vLLM 0.10-0.11) launches one
program per (query block, KV head); a program holds ``BLOCK_M`` rows, ``BLOCK_Q = BLOCK_M /
group`` query tokens times the KV head's ``group`` query heads, with ``BLOCK_M = 16`` unless the
group is larger (then its next power of two), and walks the K and V tiles of its whole causal
span (sliding-window layers: their window, vllm-project/vllm#24390), loading each tile itself.
So every ``BLOCK_Q`` query tokens load the span's K and V again: per loaded byte a program
does ``4 x BLOCK_M x head_dim`` FLOPs over ``2 x head_dim x kv_bytes`` bytes, ``2 x BLOCK_M /
kv_bytes`` FLOP/byte, 16 for gpt-oss (64 query heads on 8 KV heads, BF16 KV), where FA2's
128-row prefill tile reaches 128 and A100's attention rates balance at ~112. The model charges
the prefill attention's FLOPs no faster than those loads at the family's KV-read rate
(``attention_memory`` of HBM): A100 16 x 2,039 GB/s x 0.7495 = 24.5 TFLOP/s, 0.078 of the BF16
peak where FA2 runs 0.55. That is the bound with no L2 reuse between the programs of one KV
head (a 32k-token span's K and V, 8 MB a KV head, fit A100's 40 MB L2, so some loads hit it):
on GPUStack's gpt-oss-20b `32000/100` runs it is 31 % too slow where the FA2 rate was 51 %
too fast (docs/validation.md ``vllm8``). The L2's share needs its bandwidth, which the sheet
does not have. Decode rows stay memory-bound (``group`` FLOP/byte, 8 for gpt-oss).
"""

from __future__ import annotations

from dataclasses import replace

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency
from inferplan.specs.kv import kv_heads_per_rank

# FA2's split-KV kernel's query tile (rows), every head dimension (module docstring).
FA2_SPLITKV_TILE_ROWS = 64.0
# Architectures whose vLLM FLASH_ATTN backend is FA2 (sm80, sm86, sm89).
FA2_ARCHITECTURES = ("ampere", "ada_lovelace")
# vLLM's Triton unified attention: its smallest program tile (rows: query tokens x query heads).
TRITON_MIN_TILE_ROWS = 16


def runs_fa2_varlen(plan: MemoryPlan) -> bool:
    """Whether vLLM runs ``plan``'s attention in FA2's paged varlen kernel: an sm8x part, a KV
    cache in the model's 16-bit type (FA2 reads no FP8 KV: vLLM picks another backend for
    ``--kv-cache-dtype fp8``) and softmax GQA attention without sinks in every layer that has
    attention."""
    if plan.gpu.architecture not in FA2_ARCHITECTURES or plan.kv_format.bytes_per_value != 2:
        return False
    kinds = [g.attention for g in plan.spec.layer_groups if g.attention.kind != "none"]
    return bool(kinds) and all(a.kind == "gqa" and not a.has_sinks for a in kinds)


def runs_triton_unified(plan: MemoryPlan) -> bool:
    """Whether vLLM runs ``plan``'s attention in its Triton unified-attention kernel: an sm8x
    part and a GQA layer with attention sinks (FA2 has none: ``TRITON_ATTN``, gpt-oss)."""
    if plan.gpu.architecture not in FA2_ARCHITECTURES:
        return False
    kinds = [g.attention for g in plan.spec.layer_groups if g.attention.kind != "none"]
    return any(a.kind == "gqa" and a.has_sinks for a in kinds)


def triton_tile_rows(group: int) -> int:
    """``BLOCK_M`` of vLLM's Triton unified attention for ``group`` query heads per KV head:
    16 rows, or the group's next power of two where it is larger (``unified_attention``)."""
    return max(TRITON_MIN_TILE_ROWS, 1 << max(0, group - 1).bit_length())


def query_group(plan: MemoryPlan) -> int:
    """The largest number of query heads that share a KV head on one TP rank, over ``plan``'s
    GQA layers."""
    tp = plan.parallelism.tp
    groups = [
        max(1, g.attention.num_heads // tp) // kv_heads_per_rank(g.attention, tp)
        for g in plan.spec.layer_groups
        if g.attention.kind == "gqa"
    ]
    return max(groups, default=1)


def with_triton_attention(eff: Efficiency, plan: MemoryPlan) -> Efficiency:
    """``eff`` with attention compute no faster than the Triton kernel's loads allow: each
    program (``triton_tile_rows`` rows of one KV head) loads the K and V of its whole causal
    span, ``2 x BLOCK_M / kv_bytes`` FLOPs per byte, at the family's KV-read rate (module
    docstring)."""
    rows = triton_tile_rows(query_group(plan))
    per_byte = 2.0 * rows / plan.kv_format.bytes_per_value
    loads = plan.gpu.memory_bandwidth_bytes_s * eff.attention_memory
    cap = per_byte * loads / (plan.gpu.peak("bf16") * plan.gpu.attention_prefill_speedup)
    return replace(eff, attention_compute=min(eff.attention_compute, cap))


def with_vllm_attention(eff: Efficiency, plan: MemoryPlan) -> Efficiency:
    """``eff`` with FA2's 64-row tile per decode query in mixed steps where vLLM runs FA2
    (``runs_fa2_varlen``), the Triton kernel's load-bound rate where it runs that
    (``runs_triton_unified``); otherwise unchanged."""
    if runs_triton_unified(plan):
        return with_triton_attention(eff, plan)
    if not runs_fa2_varlen(plan):
        return eff
    return replace(eff, mixed_decode_rows=FA2_SPLITKV_TILE_ROWS)
