"""A served engine's BF16 dense GEMMs no faster than its W8A8 FP8 ones on FP8 tensor cores.

vLLM (``Fp8LinearMethod`` / ``W8A8BlockFp8LinearOp``), SGLang (DeepGEMM or ``sgl_kernel``'s
CUTLASS ``fp8_blockwise_scaled_mm`` on sm90) and ``trtllm-serve`` run an FP8 checkpoint's linear
layers on Hopper as FP8 x FP8 MMAs, the activations quantised per token (or per 1 x 128 group:
Qwen3-FP8's 128 x 128 weight blocks) by a memory-bound kernel before each GEMM. The MMA runs
at twice BF16's rate; scaling and promotion cost part of that, never all of it: a large prefill
GEMM is at least as fast in FP8 as in BF16 (on the Qwen3-14B H100 GPUStack page the FP8
ShareGPT wave's TTFT median is 1.24x shorter than BF16's on the same SGLang release,
docs/validation.md ``wave19``).

The engines' ``fp8`` factors (``perf/engine_kernels.py``: SGLang's and ``trtllm-serve``'s 0.4
on the FP8 peak, fitted to their FP8 runs, which they fit) put those runs' GEMMs at 0.8x the
family's BF16 rate, while their BF16 class is the family's reference (1): the model had the
same engine's FP8 prefill step slower than its BF16 one (Qwen3-14B, 8,192 tokens on H100:
477 vs 385 ms). Read as a measurement of the engine's GEMMs, the FP8 factor bounds its BF16
ones: ``bf16_bound`` scales a dense BF16 run's GEMM fraction by ``min(1, f / r)`` (``f`` the
engine's ``fp8`` factor, ``r`` the part's BF16 / FP8 peak ratio, 0.5 on Hopper and
Blackwell), so its BF16 GEMMs reach at most its FP8 ones. No constant is added: the bound is
the fitted FP8 factor's, and it binds only where that factor is below ``r``.

Only the ``bf16`` class (dense BF16 models) on a part with FP8 tensor cores: the ``experts``
class's routed experts run in a fused-MoE kernel with its own factor, and Ampere has no FP8
MMA (FP8 checkpoints run as Marlin W8A16, ``perf/vllm_fp8.py``).
"""

from __future__ import annotations

from dataclasses import replace

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency

# Whether served BF16 dense GEMMs are bounded by the engine's FP8 ones (False: the family's
# rate). On: cross-validated with it (docs/validation.md, "Session 19's merges cross-validated
# together": SGLang latency 18.3 -> 17.5 %, `trtllm-serve` latency 11.6 -> 11.9 %).
BOUND_BF16_BY_FP8 = True


def bf16_bound(plan: MemoryPlan, kernel: str, fp8_factor: float) -> float:
    """The GEMM fraction's multiplier for a ``kernel`` run of an engine whose ``fp8`` factor is
    ``fp8_factor``: ``min(1, fp8_factor / r)`` for ``bf16`` on a part with FP8 tensor cores
    (``r`` its BF16 / FP8 peak ratio), else 1."""
    if not BOUND_BF16_BY_FP8 or kernel != "bf16" or "fp8" not in plan.gpu.peak_flops:
        return 1.0
    ratio = min(1.0, plan.gpu.peak("bf16") / plan.gpu.peak("fp8"))
    return min(1.0, fp8_factor / ratio)


def with_bf16_bound(
    eff: Efficiency, plan: MemoryPlan, kernel: str, fp8_factor: float
) -> Efficiency:
    """``eff`` with its GEMM fraction times ``bf16_bound`` (unchanged where that is 1)."""
    bound = bf16_bound(plan, kernel, fp8_factor)
    return eff if bound == 1.0 else replace(eff, gemm_compute=eff.gemm_compute * bound)
