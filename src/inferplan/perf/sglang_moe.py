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

Not modelled: which (E, N) shapes SGLang ships a tuned config for
(``fused_moe_triton/configs/``); vLLM's untuned-shape penalty (``UNTUNED_EXPERTS``) reads vLLM's
own listing and is not applied to SGLang.
"""

from __future__ import annotations

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.vllm_moe import routed_ffn


def sglang_kernel_class(plan: MemoryPlan, kernel: str) -> str:
    """SGLang's kernel class of a run whose engine-agnostic class is ``kernel``
    (``perf/engine_kernels.py`` ``kernel_class``): ``experts`` for a BF16 model with routed
    experts, else ``kernel``."""
    if kernel == "bf16" and routed_ffn(plan) is not None:
        return "experts"
    return kernel
