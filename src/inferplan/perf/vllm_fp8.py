"""vLLM's FP8 checkpoints: two kernel classes, each with its own reference rate.

vLLM (0.10, 0.11) runs an FP8 checkpoint with one of two kinds of kernel, by device:

- **Marlin, weight-only (W8A16), where the part has no FP8 tensor cores** (Ampere: A100).
  ``Fp8LinearMethod`` and ``Fp8MoEMethod`` set ``use_marlin`` when the device capability is
  below 8.9 (``vllm/model_executor/layers/quantization/fp8.py``; vllm-project/vllm#5975, "FP8
  Marlin" for Ampere): the weights stay FP8 in memory (decode streams half of BF16's bytes)
  and each tile is dequantised to BF16 in the kernel before BF16 MMA (prefill runs at the
  BF16 peak at most: Marlin is written for a few rows at a time, and at 16,384 rows an
  11008 x 4096 GEMM ran at 0.82x of cuBLAS FP16, IST-DASLab/marlin#21). The roofline already
  charges both (``specs/hardware.py`` ``peak``: FP8 falls back to BF16 on A100), so the class
  (``marlin``) only keeps its kernel factor apart from Hopper's FP8 kernels.
- **Block-scaled W8A8 on Hopper** (DeepSeek-V3/R1's 128 x 128 weight blocks, with 1 x 128
  activation groups quantised before each GEMM: ``W8A8BlockFp8LinearOp`` in CUTLASS or
  Triton, and the Triton fused-MoE kernel with ``block_shape`` for the experts). These do not
  reach the FP8 peak: on H100, DeepSeek-V3's N=2112, K=7168 projection ran at 400-490 TFLOP/s
  (Triton / CUTLASS block FP8) where torch's BF16 GEMM ran at 650-715 TFLOP/s, M 4,096-16,384
  (vllm-project/vllm#23280, September 2025, the kernels of vLLM 0.10.2-0.11). So vLLM's
  block-scaled FP8 GEMMs are charged against the **BF16** peak (``with_block_fp8_rate``: the
  GEMM fraction times the part's BF16 / FP8 peak ratio, 0.5 on Hopper), and the class's fitted
  factor (``mla``: DeepSeek is vLLM's one block-FP8 configuration in the bundle) is relative to
  that, as the ``marlin`` and ``mxfp4`` factors are. Whether DeepGEMM (which does reach
  970-1,550 TFLOP/s on H100/H800, vllm-project/vllm#13917) ran instead is not in the published
  pages; the measured rows say it did not (docs/validation.md ``vllm4``).

Charged on the whole GEMM fraction: the few BF16 GEMMs of such a model (the router, the LM
head) are a small share of its FLOPs.
"""

from __future__ import annotations

from dataclasses import replace

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.engine_kernels import plan_kernel_class

# vLLM's kernel classes whose FP8 GEMMs are block-scaled W8A8 on FP8 tensor cores
# (module docstring): DeepSeek's MLA models, whose checkpoints carry 128 x 128 weight blocks.
BLOCK_FP8_CLASSES = ("mla",)


def has_fp8_tensor_cores(plan: MemoryPlan) -> bool:
    """Whether the plan's part has an FP8 tensor-core peak in the catalog (Ada, Hopper and
    later; not Ampere)."""
    return "fp8" in plan.gpu.peak_flops


def fp8_kernel_class(plan: MemoryPlan, kernel: str) -> str:
    """``marlin`` for an ``fp8`` run on a part without FP8 tensor cores, else ``kernel``."""
    return "marlin" if kernel == "fp8" and not has_fp8_tensor_cores(plan) else kernel


def with_block_fp8_rate(eff: Efficiency, plan: MemoryPlan, kernel: str) -> Efficiency:
    """``eff`` with its GEMM fraction times the part's BF16 / FP8 peak ratio for a vLLM
    block-scaled FP8 class (``BLOCK_FP8_CLASSES``) on FP8 tensor cores; else unchanged."""
    if kernel not in BLOCK_FP8_CLASSES or not has_fp8_tensor_cores(plan):
        return eff
    ratio = min(1.0, plan.gpu.peak("bf16") / plan.gpu.peak("fp8"))
    return replace(eff, gemm_compute=eff.gemm_compute * ratio)


def with_vllm_fp8(eff: Efficiency, plan: MemoryPlan) -> Efficiency:
    """``eff`` as vLLM runs ``plan``'s FP8 GEMMs (``with_block_fp8_rate`` of its class)."""
    return with_block_fp8_rate(eff, plan, plan_kernel_class(plan))
