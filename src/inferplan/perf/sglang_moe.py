"""SGLang's BF16 routed experts: its Triton fused-MoE kernel, a kernel class of their own.

SGLang 0.5 runs an unquantized checkpoint's dense layers in ``torch.nn.functional.linear``
(cuBLAS, ``UnquantizedLinearMethod.apply``) and its routed experts through the Triton MoE
runner (``UnquantizedFusedMoEMethod.create_moe_runner``: ``MoeRunner(MoeRunnerBackend.TRITON,
...)``, the ``fused_moe_triton`` kernel; ``sglang/srt/layers/quantization/unquant.py``), the
kernel vLLM's ``fused_moe`` derives from. The GPU family's ``moe_gemm`` fraction is fitted to
TensorRT-LLM's CUTLASS grouped GEMMs (``perf/efficiency.py``), so an SGLang BF16 MoE run is the
``experts`` class, as vLLM's is (``perf/vllm_moe.py``): its factor scales the routed experts'
grouped-GEMM fraction only (``perf/engine_kernels.py`` ``scale_kernels``), at most 1, fitted by
``scripts/fit_frontend.py`` with the other classes. Its dense GEMMs, attention and weight
streaming keep the family's (and BF16 dense models stay the reference, factor 1).

**Tuned or default tiles, by SGLang's own listing.** The Triton kernel takes its tile sizes from
a JSON file per shape, device and weight format (``fused_moe_triton_config.py``
``get_moe_configs``: ``E=<E>,N=<N>,device_name=<device>[,dtype=fp8_w8a8][,block_shape=[128,
128]].json``, ``E, _, N = w2_shape``: the experts a rank holds and one expert's intermediate
width there; the running Triton's folder first, then any other version's file of that name).
Without one it logs "Using default MoE kernel config. Performance might be sub-optimal!" and
runs ``get_default_config()``. The file names SGLang 0.5.4 ships are
``data/sglang_fused_moe_configs.yaml``; a run whose shape is not there has its routed experts'
grouped-GEMM fraction at ``UNTUNED_EXPERTS`` (``perf/vllm_moe.py``: half the tuned kernel's
rate, vLLM's default config of the same kernel; not fitted), for BF16 and for FP8 experts alike
(the Triton runner serves both; MXFP4 experts run other kernels and are left alone). The shape
is SGLang's: under DP attention without ``--ep-size`` (every such bundled run) the experts stay
tensor-parallel over the whole group, ``E`` all of them and ``N`` sliced that many ways,
whatever expert parallelism the step model assumes; with expert parallelism ``E`` is a rank's
share and ``N`` whole. FP8 experts are block-scaled (``fp8_block``) where the checkpoint's own
``quantization_config`` is FP8 (DeepSeek's 128 x 128 weight blocks), per-channel (``fp8``)
where the run quantizes a BF16 checkpoint's spec (GLM-4.6-FP8: SGLang's E=160 FP8 files carry no
block shape).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.vllm_moe import UNTUNED_EXPERTS, VLLM_DEVICE_NAMES, routed_ffn

# Config kinds by the experts' weight format (the listing's third column).
_KINDS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}


def sglang_kernel_class(plan: MemoryPlan, kernel: str) -> str:
    """SGLang's kernel class of a run whose engine-agnostic class is ``kernel``
    (``perf/engine_kernels.py`` ``kernel_class``): ``experts`` for a BF16 model with routed
    experts, else ``kernel``."""
    if kernel == "bf16" and routed_ffn(plan) is not None:
        return "experts"
    return kernel


@cache
def tuned_shapes() -> dict[str, frozenset[tuple[int, int, str]]]:
    """``{device name: {(E, N, kind)}}`` of SGLang's bundled fused-MoE configs."""
    path = resources.files("inferplan.perf").joinpath("data/sglang_fused_moe_configs.yaml")
    data = yaml.safe_load(path.read_text()) or {}
    return {
        str(k): frozenset((int(e), int(n), str(kind)) for e, n, kind in v) for k, v in data.items()
    }


def config_key(plan: MemoryPlan) -> tuple[str, int, int, str] | None:
    """``(device, E, N, kind)`` as SGLang looks the plan's fused-MoE config up (module
    docstring), or None: no routed experts, experts the Triton runner does not serve, or a
    device without a listing."""
    ffn = routed_ffn(plan)
    kind = _KINDS.get(plan.weight_formats.experts.name)
    device = VLLM_DEVICE_NAMES.get(plan.gpu.key)
    if ffn is None or kind is None or device is None or device not in tuned_shapes():
        return None
    native = plan.spec.quantization
    if kind == "fp8" and native is not None and native.method == "fp8":
        kind = "fp8_block"  # the checkpoint's own FP8: DeepSeek's 128 x 128 weight blocks
    par = plan.parallelism
    if par.attention_dp > 1:  # DP attention: experts tensor-parallel over the group
        return device, ffn.num_experts, ffn.intermediate_size // (par.tp * par.dp), kind
    if par.ep > 1:
        return device, -(-ffn.num_experts // par.ep), ffn.intermediate_size, kind
    return device, ffn.num_experts, ffn.intermediate_size // par.tp, kind


def is_untuned(plan: MemoryPlan) -> bool:
    """Whether SGLang runs the plan's routed experts with its default fused-MoE config."""
    key = config_key(plan)
    return key is not None and key[1:] not in tuned_shapes()[key[0]]


def with_sglang_moe_configs(eff: Efficiency, plan: MemoryPlan) -> Efficiency:
    """``eff`` as SGLang runs ``plan``: routed experts without a tuned fused-MoE config at
    ``UNTUNED_EXPERTS`` of their grouped-GEMM rate; any other run unchanged."""
    return replace(eff, moe_gemm=eff.moe_gemm * UNTUNED_EXPERTS) if is_untuned(plan) else eff
