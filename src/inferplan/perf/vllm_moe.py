"""vLLM's BF16 routed experts: its Triton fused-MoE kernel, tuned per shape or not.

vLLM (0.10, 0.11) runs a BF16 MoE checkpoint's routed experts in its Triton ``fused_moe`` kernel,
not in the CUTLASS grouped GEMMs of TensorRT-LLM that the GPU family's ``moe_gemm`` fraction is
fitted to (``perf/efficiency.py``), while its dense GEMMs run in cuBLAS as TensorRT-LLM's do. So
a vLLM BF16 MoE run is its own kernel class, ``experts`` (``vllm_kernel_class``): its factor
scales the routed experts' grouped-GEMM fraction only (``perf/engine_kernels.py``
``scale_kernels``), fitted by ``scripts/fit_frontend.py`` as the other classes are; at most 1,
and the tuned kernel's best is about half the dense peak (vllm-project/vllm#24700: Mixtral's
E=8, N=7168 config on H100, 541 GFLOP of 1,536 tokens' expert GEMMs in 1.12 ms).

The kernel's tile sizes come from a JSON file per shape and device
(``fused_moe.py`` ``try_get_optimal_moe_config``: ``E, _, N = w2_shape``, the experts a rank
holds and one expert's intermediate width on it); without one it takes
``get_default_config()`` and logs "Using default MoE config. Performance might be
sub-optimal!". The default of those releases (``BLOCK_SIZE_K`` 32, ``num_warps`` and
``num_stages`` unset, one tile size for every batch) is up to 2x slower than the defaults vLLM
chose later from its tuned files, at large batches of many-expert models
(vllm-project/vllm#34846, H100 kernel benchmarks of old, new and tuned configs), and a tuned file
is up to 1.93x faster than those newer defaults (#54500, E=192, N=192 on H20; #35457: 20-24 %
on E=128, N=96 on H200). ``UNTUNED_EXPERTS`` is the first of these: the default config at half
the tuned kernel's rate, the bound the first citation sets, not fitted. Which shapes have a file:
``data/vllm_fused_moe_configs.yaml`` (its header says where the names come from).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.vllm_fp8 import fp8_kernel_class
from inferplan.specs.model import FfnSpec

# Half the tuned kernel's rate (module docstring: vllm-project/vllm#34846's "up to 2x").
UNTUNED_EXPERTS = 0.5

# The catalog's GPUs as torch names them, spaces made underscores (vLLM's file names).
VLLM_DEVICE_NAMES = {
    "a100_sxm_80gb": "NVIDIA_A100-SXM4-80GB",
    "h100_sxm_80gb": "NVIDIA_H100_80GB_HBM3",
    "h200_sxm_141gb": "NVIDIA_H200",
    "b200_hgx": "NVIDIA_B200",
    "gb200_per_gpu": "NVIDIA_GB200",
    "l40s": "NVIDIA_L40S",
}


@cache
def tuned_shapes() -> dict[str, frozenset[tuple[int, int]]]:
    """``{vLLM device name: {(E, N)}}`` of the bundled BF16 fused-MoE configs."""
    path = resources.files("inferplan.perf").joinpath("data/vllm_fused_moe_configs.yaml")
    data = yaml.safe_load(path.read_text()) or {}
    return {str(k): frozenset((int(e), int(n)) for e, n in v) for k, v in data.items()}


def routed_ffn(plan: MemoryPlan) -> FfnSpec | None:
    """The routed experts' FFN shape of the plan's model (its first MoE layer), or None."""
    return next((g.ffn for g in plan.spec.layers if g.ffn.kind == "moe"), None)


def expert_shape(ffn: FfnSpec, tp: int, ep: int) -> tuple[int, int]:
    """``(E, N)`` as vLLM looks the config up: the experts on one rank (all of them, sliced
    ``tp`` ways, without expert parallelism) and one expert's intermediate width there."""
    if ep > 1:
        return -(-ffn.num_experts // ep), ffn.intermediate_size
    return ffn.num_experts, ffn.intermediate_size // tp


def is_untuned(plan: MemoryPlan) -> bool:
    """Whether a BF16 MoE run of ``plan`` falls back to vLLM's default fused-MoE config: its
    device has a bundled listing and the rank's shape is not in it."""
    ffn = routed_ffn(plan)
    device = VLLM_DEVICE_NAMES.get(plan.gpu.key)
    if ffn is None or device is None or device not in tuned_shapes():
        return False
    par = plan.parallelism
    return expert_shape(ffn, par.tp, par.ep) not in tuned_shapes()[device]


def vllm_kernel_class(plan: MemoryPlan, kernel: str) -> str:
    """vLLM's kernel class of a run whose engine-agnostic class is ``kernel``
    (``perf/engine_kernels.py`` ``kernel_class``): ``experts`` for a BF16 model with routed
    experts, ``marlin`` for FP8 weights on a part without FP8 tensor cores
    (``perf/vllm_fp8.py``), else ``kernel``."""
    if kernel == "bf16" and routed_ffn(plan) is not None:
        return "experts"
    return fp8_kernel_class(plan, kernel)


def with_fused_moe_configs(eff: Efficiency, plan: MemoryPlan) -> Efficiency:
    """``eff`` as vLLM runs ``plan``: a BF16 MoE run without a tuned fused-MoE config has its
    routed experts at ``UNTUNED_EXPERTS`` of their rate; any other run is unchanged."""
    if plan.weight_formats.experts.name not in ("bf16", "fp16") or not is_untuned(plan):
        return eff
    return replace(eff, moe_gemm=eff.moe_gemm * UNTUNED_EXPERTS)
