"""TensorRT-LLM served by ``trtllm-serve``: its runtime where it differs from ``trtllm-bench``.

Both run the PyTorch backend (the default since 1.0), but with different settings, and the
bundle's GPU constants are fitted to ``trtllm-bench`` (``scripts/fit_published.py``). What a
``trtllm-serve`` run (GPUStack's ``vllm bench serve`` rows of TensorRT-LLM 1.0 and 1.2rc1)
gets instead, from TensorRT-LLM's ``tensorrt_llm/commands/serve.py`` ``get_llm_args`` and
``tensorrt_llm/llmapi/llm_args.py`` (``notes/engines.md`` sec. 3):

- **Limits and memory**: the LLM API's ``max_batch_size`` 2048 and ``max_num_tokens`` 8192
  (``specs/engines.py``), not ``trtllm-bench``'s heuristic from the dataset
  (``plan/trtllm_bench.py``); ``free_gpu_memory_fraction`` 0.9 unless the command sets it.
  The KV manager sizes every layer at ``max_seq_len`` unless ``kv_cache_config``
  ``max_attention_window`` lists per-layer windows (``_torch/pyexecutor/resource_manager.py``
  ``KVCacheManager``: ``[max_seq_len]`` when it is None; ``_util.py`` builds a variable-window
  pool only from a user's list), and no GPUStack command sets it: gpt-oss's 18 windowed layers
  hold every token of a sequence, as in ``trtllm-bench``'s closed form, and GUARANTEED_NO_EVICT
  reserves a request's prompt + ``max_tokens`` in each (``engine/session.py`` gives
  ``--engine trtllm`` the full-length pool; the attention kernels still apply the window).
- **Chunked prefill** off (``enable_chunked_prefill`` False) unless the command turns it on
  (``chunked_prefill``: ``engine/schedulers.py`` ``TrtllmChunkedScheduler``); without it a
  prompt longer than ``max_num_tokens`` is refused.
- **CUDA graphs** for decode-only batches of ``1..32, 64, 128`` without padding
  (``DecodeCudaGraphConfig``: ``max_batch_size`` 128 when neither it nor ``batch_sizes`` is
  given, ``enable_padding`` False; ``perf/cudagraph.py``), where ``trtllm-bench`` pads up to
  its ``max_batch_size``: other decode batches, and every step with a context, launch each
  layer's kernels from Python (``eager_layer_overhead_s`` per layer). TensorRT-LLM's own
  account: CUDA graphs matter "particularly on the PyTorch flow, because the python host code
  normally executes slower than C++" (22 % end to end on DeepSeek-R1 throughput, tech blog 3,
  NVIDIA/TensorRT-LLM#5796); SGLang measured Llama-3-8B decode at batch 1 at 7.06 ms with
  graphs and 9.28 ms without (sgl-project/sglang#1401), a launch-bound step of about 290 us
  per layer. The step model adds them to the step, as for every engine (``perf/roofline.py``
  ``_overhead``); letting the GPU's work hide them (asynchronous launches) was tried and the
  rows chose adding them (``docs/validation.md``).
- **Streaming**: every request in flight gets a response object on every step, serialised to
  the OpenAI server's process, which detokenises it and writes an SSE chunk. That host work per
  sequence and step is what ``trtllm-bench`` (no streaming) does not pay. The overlap scheduler
  (on by default: ``disable_overlap_scheduler`` False) runs step n's host work while the GPU
  runs step n + 1, so the host cost hides behind the GPU's as far as that lasts
  (``Efficiency.host_overlap`` 1, ``perf/overlap.py``): a step takes ``max(GPU, host)``.
- **Kernels**: the BF16 kernels are ``trtllm-bench``'s; block-scaled FP8 checkpoints (Qwen3
  FP8, DeepSeek-R1), MXFP4 experts on Hopper and MLA run kernels whose speed no Hopper
  ``trtllm-bench`` row of the bundle measures on these releases, so those classes get a GEMM
  compute factor in (0, 1] (``perf/engine_kernels.py`` ``scale_kernels``), one value for the
  three (the fit script says why).

The host costs (per step, per sequence and step, per layer of an eager step) and the kernel
factors of the checkpoint formats no ``trtllm-bench`` row covers (``perf/engine_kernels.py``
classes) are in ``data/trtllm_serve.yaml``, fitted by ``scripts/fit_trtllm_serve.py`` to these
rows with cross-validation grouped by configuration; missing keys keep the release's constants
(and factor 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import yaml

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.engine_kernels import KERNEL_CLASSES, plan_kernel_class, scale_kernels
from inferplan.perf.fp8_gemm import with_bf16_bound
from inferplan.plan.published import PublishedRow

HOST_FIELDS = ("step_overhead_s", "per_seq_overhead_s", "eager_layer_overhead_s")


@dataclass(frozen=True)
class ServeConstants:
    """``trtllm-serve``'s fitted constants: host seconds by ``HOST_FIELDS`` name, and GEMM
    compute factors in (0, 1] by kernel class."""

    host_s: dict[str, float]
    kernels: dict[str, float]


def parse_serve_constants(data: object, source: str) -> ServeConstants:
    """The file's ``host`` and ``kernels`` mappings; a bad file is one error naming the key."""
    data = data or {}
    if not isinstance(data, dict) or not set(data) <= {"host", "kernels"}:
        raise InferplanError(f"{source}: expected mappings 'host' and 'kernels'")
    host = {str(k): float(v) for k, v in (data.get("host") or {}).items()}
    kernels = {str(k): float(v) for k, v in (data.get("kernels") or {}).items()}
    if not set(host) <= set(HOST_FIELDS) or any(not 0.0 <= v <= 1.0 for v in host.values()):
        raise InferplanError(f"{source}: host: keys among {', '.join(HOST_FIELDS)}, 0-1 s")
    if not set(kernels) <= set(KERNEL_CLASSES) or any(not 0 < v <= 1 for v in kernels.values()):
        raise InferplanError(f"{source}: kernels: keys among {', '.join(KERNEL_CLASSES)}, (0, 1]")
    return ServeConstants(host, kernels)


@cache
def bundled_serve_constants() -> ServeConstants:
    path = resources.files("inferplan.plan").joinpath("data/trtllm_serve.yaml")
    return parse_serve_constants(yaml.safe_load(path.read_text()), "trtllm_serve.yaml")


def is_trtllm_serve(row: PublishedRow) -> bool:
    """Whether ``row`` was measured against ``trtllm-serve`` (an HTTP benchmark of a
    TensorRT-LLM release without Triton in front)."""
    return (
        row.engine == "tensorrt-llm"
        and row.settings.get("bench", "").startswith("vllm bench serve")
        and not row.settings.get("frontend", "").startswith("Triton")
    )


def chunked_prefill(row: PublishedRow) -> bool:
    """Whether ``row``'s TensorRT-LLM run turned chunked context on (off by default)."""
    return row.engine == "tensorrt-llm" and row.settings.get("enable_chunked_prefill") == "true"


def with_overlap_scheduler(eff: Efficiency) -> Efficiency:
    """``eff`` as TensorRT-LLM's overlap scheduler runs it: the host's per-step and
    per-sequence work hides behind the GPU's (``host_overlap`` 1)."""
    return replace(eff, host_overlap=1.0)


def serve_efficiency(
    release: Efficiency, plan: MemoryPlan, constants: ServeConstants | None = None
) -> Efficiency:
    """The PyTorch backend's release constants (``release``) as ``trtllm-serve`` runs ``plan``:
    its host costs and its kernel factor (``constants``; None: the bundled file), behind the
    overlap scheduler."""
    constants = constants or bundled_serve_constants()
    kernel = plan_kernel_class(plan)
    eff = scale_kernels(
        replace(release, **constants.host_s), constants.kernels.get(kernel, 1.0), kernel
    )
    # its BF16 GEMMs no faster than its FP8 ones (perf/fp8_gemm.py)
    eff = with_bf16_bound(eff, plan, kernel, constants.kernels.get("fp8", 1.0))
    return with_overlap_scheduler(eff)
