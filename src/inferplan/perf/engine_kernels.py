"""Per-engine GPU kernel efficiency by kernel class: what the family constants do not see.

The GPU family's fractions (``data/efficiency/<family>.yaml``) are fitted to TensorRT-LLM's
``trtllm-bench`` rows, so they describe TensorRT-LLM's kernels. vLLM and SGLang run other
kernels for the same checkpoint: FP8 block-scaled GEMMs (CUTLASS/DeepGEMM/Triton), MXFP4
experts (Triton/Marlin on Hopper and Ampere, which dequantise in the kernel), and MLA attention
with FP8 MoE (FlashMLA/FlashInfer plus fused-MoE Triton kernels). A factor per engine class x
kernel class scales the run's GEMM compute fraction (and, for MLA, attention compute): the
compute-bound prefill. Decode's weight and KV streaming keep the family's, since the published
runs' decode steps (TPOT on long outputs) are within 10 % while their prefill (TTFT, ITL p99)
is 2-3x slow. FP8 and MXFP4 change the GEMM kernels only; attention runs the same
FlashAttention/FlashInfer kernels in BF16 whatever the weights. It lies in (0, 1]:
an engine's kernels reach at most what the roofline allows, and a BF16 dense model is the
reference the family constants already describe.

The factors (``data/engine_kernels.yaml``) are fitted by ``scripts/fit_frontend.py`` to the
served latency rows with cross-validation grouped by configuration. A class without a factor
runs at 1 where the engine class has no factors at all (TensorRT-LLM's kernels are the
reference) and for ``bf16`` (the family constants' own kernels); a non-BF16 class an engine has
no factor for takes the geometric mean of the engine's fitted factors (``unseen_factor``): its
other quantized and MLA kernels are the best evidence of how its kernels compare with
TensorRT-LLM's, not TensorRT-LLM's own (vLLM's fitted 0.3-0.75 against 1).

MLA's attention: the ``mla`` factor scales attention compute too, except for the engine classes
in ``MLA_FLASH_PREFILL``. vLLM v1 (0.10-0.11) runs MLA two ways (``vllm/v1/attention/backends/
mla/common.py`` ``MLACommonImpl``): decode in the absorbed form on the latent cache (FlashMLA on
Hopper), prefill on K and V decompressed by ``kv_b_proj`` through ``flash_attn_varlen_func``
(FlashAttention 3 on Hopper, which takes MLA's 192/128 head dims without padding V; earlier
context chunks gathered, decompressed and merged with ``merge_attn_states``). Its prefill
attention is thus the same FlashAttention kernel as any other model's, which the family's
``attention_compute`` describes; what vLLM runs differently for DeepSeek is its FP8 GEMMs (the
factor on ``gemm_compute``). Charging the factor on attention too made the long prompts'
chunks (quadratic attention) 3x slow: DeepSeek-R1 on 8 H200, ``32000/100``, TTFT +48 %.

``marlin`` is vLLM's FP8 checkpoint on a part without FP8 tensor cores (A100: Marlin W8A16),
and vLLM's ``mla`` factor is relative to the BF16 peak, its block-scaled FP8 GEMMs' reach
(``perf/vllm_fp8.py``).

``experts`` is vLLM's and SGLang's BF16 MoE class (``perf/vllm_moe.py``, ``perf/sglang_moe.py``:
their routed experts in a Triton fused-MoE kernel, their dense GEMMs in cuBLAS): its factor
scales the experts' grouped-GEMM fraction (``moe_gemm``) only, and where an engine has none it
is 1, as ``bf16``'s.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency
from inferplan.specs.model import ModelSpec

KERNEL_CLASSES = ("bf16", "fp8", "mxfp4", "mla", "experts", "marlin")
# Engine classes whose MLA prefill attention is FlashAttention on decompressed K/V, so the
# ``mla`` factor leaves attention compute alone (module docstring).
MLA_FLASH_PREFILL = ("vllm-v1",)
# Classes that run the family's own BF16 kernels where an engine has no factor for them.
REFERENCE_CLASSES = ("bf16", "experts")


def kernel_class(spec: ModelSpec, weight_formats: tuple[str, ...]) -> str:
    """The run's kernel class: ``mla`` for MLA models (DeepSeek: MLA with FP8 MoE), else
    ``mxfp4`` or ``fp8`` where the linear layers or experts are stored so, else ``bf16``."""
    if any(g.attention.kind == "mla" for g in spec.layers):
        return "mla"
    for name in ("mxfp4", "fp8"):
        if name in weight_formats:
            return name
    return "bf16"


def parse_kernels(data: object, source: str) -> dict[str, dict[str, float]]:
    """``{engine class: {kernel class: factor}}``; a bad file is one error naming the key."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InferplanError(f"{source}: expected a mapping of engine classes")
    out: dict[str, dict[str, float]] = {}
    for name, factors in data.items():
        if not isinstance(factors, dict) or not set(factors) <= set(KERNEL_CLASSES):
            raise InferplanError(
                f"{source}: {name}: keys must be among {', '.join(KERNEL_CLASSES)}"
            )
        values = {str(k): float(v) for k, v in factors.items()}
        if any(not 0.0 < v <= 1.0 for v in values.values()):
            raise InferplanError(f"{source}: {name}: factors must lie in (0, 1]")
        out[str(name)] = values
    return out


@cache
def bundled_kernels() -> dict[str, dict[str, float]]:
    text = resources.files("inferplan.perf").joinpath("data/engine_kernels.yaml").read_text()
    return parse_kernels(yaml.safe_load(text), "engine_kernels.yaml")


def scale_kernels(
    eff: Efficiency, factor: float, kernel: str = "bf16", engine_class: str | None = None
) -> Efficiency:
    """``eff`` with its GEMM compute fraction times ``factor`` (the weight format's kernels:
    prefill), and its attention compute too for ``mla`` (MLA's own attention kernels) unless
    ``engine_class`` runs MLA prefill in FlashAttention (``MLA_FLASH_PREFILL``); for
    ``experts`` its routed experts' grouped-GEMM fraction alone. Weight and KV streaming
    (decode) keep the family's."""
    if factor == 1.0:
        return eff
    if kernel == "experts":
        return replace(eff, moe_gemm=eff.moe_gemm * factor)
    scales_attention = kernel == "mla" and engine_class not in MLA_FLASH_PREFILL
    attention = eff.attention_compute * (factor if scales_attention else 1.0)
    return replace(eff, gemm_compute=eff.gemm_compute * factor, attention_compute=attention)


def unseen_factor(factors: dict[str, float]) -> float:
    """The factor of a non-BF16 kernel class an engine has no fitted factor for: the
    geometric mean of its fitted ones (1 where it has none), ``experts`` aside (its factor is
    on the routed experts alone)."""
    values = [v for k, v in factors.items() if v > 0 and k != "experts"]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def engine_factor(factors: dict[str, float], kernel: str) -> float:
    """``kernel``'s factor from an engine class's fitted ``factors`` (module docstring)."""
    if kernel in factors:
        return factors[kernel]
    return 1.0 if kernel in REFERENCE_CLASSES else unseen_factor(factors)


def with_engine_kernels(eff: Efficiency, engine_class: str | None, kernel: str) -> Efficiency:
    """``eff`` with the engine class's factor for ``kernel`` (``engine_factor``)."""
    factors = bundled_kernels().get(engine_class, {}) if engine_class else {}
    return scale_kernels(eff, engine_factor(factors, kernel), kernel, engine_class)


def plan_kernel_class(plan: MemoryPlan) -> str:
    """``kernel_class`` of a memory plan's model and weight formats."""
    formats = plan.weight_formats
    return kernel_class(plan.spec, (formats.linear.name, formats.experts.name))
