"""How a GEMM's per-rank shape limits the tensor cores it can keep busy (SM occupancy).

A GEMM kernel gives each CTA one output tile (cuBLAS / CUTLASS: 128 x 128 or 128 x 256 on
Hopper and Blackwell) and the part runs one CTA per SM at a time, so a GEMM whose output has
fewer tiles than the part has SMs leaves SMs idle, and one of a few waves idles part of its
last wave (NVIDIA, "Matrix Multiplication Background User's Guide", DU-09799-001, 2023:
section 2.3 for cuBLAS's tile sizes, 3.1 tile quantization, 3.2 wave quantization). Tensor
parallelism shrinks every rank's matrices: the column-parallel projections (q/k/v, gate/up)
keep ``N / tp`` output columns and the row-parallel ones (o, down) ``K / tp`` of the
reduction, so a decode batch of a few hundred to a few thousand rows gives a TP8 rank's GEMMs
a fraction of a TP1 GEMM's tiles, while a prefill step of thousands of tokens still fills the
part many times over.

The model: the rows at half of ``gemm_compute`` grow as the rank's operator narrows,

    half_rows = gemm_half_tokens + gemm_half_outputs / width,   width = W_rank / hidden

where ``W_rank`` is the operator's parameter count on one rank, summed over its GEMMs
(``attn_proj``: q/k/v and o; ``mlp``: gate/up and down). ``width`` is a column-parallel
matrix's output columns (``N / tp`` over a ``hidden``-deep reduction) but a row-parallel one's
reduction depth (o, down: ``K / tp`` deep, ``hidden`` output columns), and the operator's sum
mixes the two. Compute-bound, ``2 W (rows + half_rows) / peak`` is the plain ramp's time plus
``2 * hidden * gemm_half_outputs / (peak x gemm_compute)`` once per operator and layer (not
per GEMM: ``attn_proj``'s GEMMs share one tail, and so do ``mlp``'s), whatever the rows and the
TP: the time of ``gemm_half_outputs`` outputs over a ``hidden``-deep reduction, the idle tail of
a last wave. Before turning it on, charge it per GEMM with that GEMM's own shape (column-
parallel: ``N / tp`` outputs over ``hidden``; row-parallel: ``hidden`` outputs over ``K / tp``,
a tail of ``2 * (K / tp) * gemm_half_outputs / (peak x gemm_compute)``) and refit
``gemm_half_outputs``, which now stands for one tail per operator. Of the order of half a wave
of output tiles,
SMs x tile area / 2 (132 x 128 x 128 / 2 = 1.1 M on H100); the fit bounds it by one wave of the
largest tile on the part with the most SMs. It adds a share of a step that grows with TP (the
rank's GEMM time falls as ``1 / tp``, the tail does not) and with fewer rows (decode, not
prefill). It applies to the TP-sharded linear layers (attention projections, dense MLP,
shared experts, the vocabulary-parallel LM head); the replicated router and the routed experts
(``moe_gemm``, their own ramp) keep ``gemm_half_tokens``. ``gemm_half_outputs`` 0 (the
default) is the ramp without it, exactly. Off in every bundled family file: cross-validated on
the ``trtllm-bench`` rows it improved the median and worsened the p90 (``docs/validation.md``,
``trtp90``, 2026-12-02).
"""

from __future__ import annotations

from inferplan.perf.efficiency import Efficiency

# Operators whose weights tensor parallelism splits across the ranks.
SHARDED_GEMMS = frozenset({"attn_proj", "mlp", "shared_experts", "lm_head"})


def half_rows(eff: Efficiency, name: str, params: float, hidden: int) -> float:
    """GEMM rows at which ``name``'s achieved compute is half of ``gemm_compute``."""
    if eff.gemm_half_outputs <= 0 or name not in SHARDED_GEMMS or params <= 0:
        return eff.gemm_half_tokens
    width = params / hidden
    return eff.gemm_half_tokens + eff.gemm_half_outputs / width
