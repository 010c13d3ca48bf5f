"""A kernel's shortest time: every launch of a small step takes at least ``floor_s``.

A roofline charges a kernel its bytes over the achieved bandwidth, which tends to zero with the
rows; a launched kernel does not. Inside a CUDA graph each kernel still pays its dependency
wait on the previous one, its ramp (CTAs scheduled, the first DRAM round trip) and its tail
(the last wave, the write-back): a few microseconds on Hopper whatever it reads. A decode step
of a few sequences is mostly such kernels: DeepSeek-R1 at TP8 reads ~3 MB a kernel in most of
its ~25 launches a layer, where the roofline charges ~1 us each.

So each of a layer's operators takes at least its launches times the floor
(``floored``): its memory term is raised to that time where it is below (time is then
``max(compute, memory, kernels x floor_s)``, counted as memory, the bound a small step is
under). The launches are counted from the model's structure, as the engines' model code runs a
layer (vLLM ``model_executor/models/deepseek_v2.py``, ``llama.py``; SGLang alike): ``kernels``.
A large batch's operators are far above their floors and unchanged; the floor does not depend
on the decode context, so a decode stretch's step stays affine in it.
"""

from __future__ import annotations

from inferplan.perf.op import Op
from inferplan.specs.model import AttentionSpec, FfnSpec

# A model built without an engine (``perf/factory.py``): no floor, the plain roofline.
KERNEL_FLOOR_S = 0.0

# The shortest time of one launched kernel of a CUDA-graphed decode step on the catalog's parts:
# a graph node's dependency wait (~1 us between kernels replayed from a graph) plus a small
# kernel's ramp and tail (~2 us). Not fitted: docs/validation.md ``r1x15`` compares 3, 5, 8 us.
SERVED_KERNEL_FLOOR_S = 3e-6

# The launches of a layer's operators, as the engines' model code runs them.


def projection_kernels(att: AttentionSpec) -> int:
    """GEMM launches of a layer's attention projections. MLA: the fused ``q_a``/``kv_a``
    projection, ``q_b`` (absent without a query LoRA), the absorbed ``W_UK`` and ``W_UV``
    batched GEMMs, ``o``; otherwise ``qkv`` and ``o``."""
    if att.kind == "none":
        return 0
    if att.kv_lora_rank:
        return 5 if att.q_lora_rank else 4
    return 2


def elementwise_kernels(att: AttentionSpec) -> int:
    """Elementwise launches of a layer: the two residual RMSNorms, the rotary embedding and
    the KV-cache write; MLA adds the ``q_a`` and ``kv_a`` norms, a QK norm its one kernel."""
    if att.kind == "none":
        return 2
    extra = 2 if att.kv_lora_rank else 0
    return 4 + extra + (1 if att.has_qk_norm else 0)


def ffn_kernels(ffn: FfnSpec, name: str) -> int:
    """Launches of one FFN operator: a gated MLP (dense or shared experts) its two GEMMs and
    the activation; the router its GEMM and its top-k; routed experts the token-to-expert
    alignment, two grouped GEMMs, the activation and the weighted sum."""
    if name == "router":
        return 2
    if name == "experts":
        return 5
    return 3 if ffn.is_gated or name == "mlp" else 2


def floored(op: Op, kernels: int, floor_s: float) -> Op:
    """``op`` with its memory term at least ``kernels x floor_s`` a layer (a new operator;
    ``op`` itself where it is already above, or without a floor)."""
    if floor_s <= 0.0 or kernels <= 0:
        return op
    need = kernels * floor_s * op.bytes_s
    if op.b0 >= need:
        return op
    return Op(op.name, op.f0, op.f1, need, op.b1, op.flops_s, op.bytes_s, op.count, op.per_stage)
