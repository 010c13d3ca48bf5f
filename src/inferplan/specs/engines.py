"""What each emulated serving engine defaults to (``--engine vllm|sglang|trtllm``).

Figures from the engines' sources as summarised in the project notes (vLLM 0.11.0
``engine/arg_utils.py`` ``_set_default_args``; SGLang 0.5.4 ``server_args.py``; TensorRT-LLM
``llmapi/llm_args.py``):

- vLLM ``serve``: on GPUs with >= 70 GiB whose name is not A100, ``max_num_batched_tokens``
  8192 and ``max_num_seqs`` 1024; otherwise 2048 and 256. Block size 16. ``gpu_memory_utilization``
  0.9 of *total* memory; KV = that budget - weights - profiled activation peak - non-torch memory.
- SGLang: chunked prefill 8192 on 60-160 GiB parts (16384 above, 4096/2048 below), page size 1.
- TensorRT-LLM: ``max_num_tokens`` 8192, ``max_batch_size`` 2048, 32-token blocks, KV = 0.9 of the
  memory left after weights and warm-up.
- vLLM's MXFP4 experts (gpt-oss) before Blackwell run its Marlin MoE kernel, which stores each
  expert padded (``vllm_expert_padding``).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.errors import InferplanError
from inferplan.specs.hardware import CUDA_DRIVER_RESERVE_BYTES, GIB, GpuSpec
from inferplan.specs.model import ModelSpec

ENGINES = ("vllm", "sglang", "trtllm")
TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION = 0.9  # llm_args.py KvCacheConfig.free_gpu_memory_fraction
# NVIDIA parts before Blackwell (no FP4 tensor cores): vLLM dequantises MXFP4 in Marlin.
MARLIN_MXFP4_ARCHITECTURES = ("ampere", "ada_lovelace", "hopper")
MARLIN_MOE_PADDING = (256, 128)  # (hidden, intermediate per rank) multiples


@dataclass(frozen=True)
class EngineDefaults:
    engine: str
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    gpu_memory_utilization: float


def sglang_cuda_graph_max_bs(gpu: GpuSpec, tp: int) -> int:
    """SGLang 0.5.4's default ``cuda_graph_max_bs`` on parts above 35 GiB (``server_args.py``
    ``_handle_gpu_memory_settings``): 32/160 below 60 GiB, 256/512 below 160 GiB (TP < 4 /
    TP >= 4), 512 above."""
    gib = gpu.memory_bytes / GIB
    if gib < 60:
        return 32 if tp < 4 else 160
    if gib < 160:
        return 256 if tp < 4 else 512
    return 512


def sglang_mem_fraction_static(
    gpu: GpuSpec, tp: int, pp: int = 1, dp_attention: int = 1, *, dp_flag: bool = False
) -> float:
    """SGLang 0.5.4's default ``mem_fraction_static`` (``server_args.py``
    ``_handle_gpu_memory_settings``): ``round((M - R) / M, 3)`` with ``M`` the device's MiB and
    ``R = 512 + 1.5 max(chunk, 2048) + 2 cuda_graph_max_bs + 1024 tp pp / 8`` MiB, at least
    10,240 on parts above 60 GiB: 0.835 on an H100 at TP1, 0.907 on an H200. With DP attention
    over ``dp_attention`` ranks of ``tp`` each, SGLang's ``tp_size`` is their product and ``R``
    grows by ``cuda_graph_max_bs x dp x 3`` MiB of padding, ``x 4.5`` above 300 graph rows
    (0.5.3 to 0.5.6.post2 alike): 0.769 on 8 H200 at DP8, where TP8 alone gives 0.897. The
    padding follows the ``--enable-dp-attention`` flag (``dp_flag``), read before
    ``_handle_data_parallelism`` turns it off at ``--dp-size 1``: TP8 with the flag alone
    reserves 512 x 1 x 4.5 MiB more (0.881)."""
    reported = gpu.memory_bytes + (CUDA_DRIVER_RESERVE_BYTES if gpu.vendor == "nvidia" else 0.0)
    memory_mib = reported / 2**20  # SGLang reads nvidia-smi's total
    gib = gpu.memory_bytes / GIB
    chunk = engine_defaults("sglang", gpu).max_num_batched_tokens
    tp *= dp_attention  # SGLang's ``--tp`` spans the DP-attention ranks
    graph_bs = sglang_cuda_graph_max_bs(gpu, tp)
    reserve = 512 + 1.5 * max(chunk, 2048) + 2 * graph_bs + 1024 * tp * pp / 8
    if dp_attention > 1 or dp_flag:
        reserve += graph_bs * dp_attention * (3 + (1.5 if graph_bs > 300 else 0.0))
    if gib > 60:
        reserve = max(reserve, 10240)
    return round((memory_mib - reserve) / memory_mib, 3)


def engine_defaults(engine: str, gpu: GpuSpec) -> EngineDefaults:
    """The defaults ``engine`` picks on ``gpu``."""
    big = gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.key
    memory_gib = gpu.memory_bytes / GIB
    if engine == "vllm":
        return EngineDefaults("vllm", 8192 if big else 2048, 1024 if big else 256, 16, 0.9)
    if engine == "sglang":
        chunk = 16384 if memory_gib >= 160 else 8192 if memory_gib >= 60 else 4096
        return EngineDefaults("sglang", chunk, 4096, 1, 0.9)
    if engine == "trtllm":
        return EngineDefaults("trtllm", 8192, 2048, 32, 0.9)
    raise InferplanError(f"--engine: unknown engine {engine!r}; valid: {', '.join(ENGINES)}")


def vllm_expert_padding(
    spec: ModelSpec, gpu: GpuSpec, quantization: str | None
) -> tuple[int, int] | None:
    """The (hidden, per-rank intermediate) multiples vLLM pads routed MXFP4 experts to, or None.

    Before Blackwell vLLM runs MXFP4 MoE weights (gpt-oss) in its Marlin kernel, which needs
    ``n % 256 == 0`` and ``k % 128 == 0`` per GEMM, so ``Mxfp4MoEMethod.create_weights``
    allocates every expert with the hidden size rounded up to 256 and the per-rank intermediate
    size to 128 (vllm ``model_executor/layers/quantization/mxfp4.py``; Ampere always, Hopper
    where the Triton MoE kernels are not installed). gpt-oss's 2880 x 2880 experts become
    3072 x 2944, 9 % more bytes: gpt-oss-120b loads as 65.97 GiB on one H100
    (vllm-project/vllm#23278's log, Marlin), where its checkpoint holds 60.8 GiB."""
    method = quantization or (spec.quantization.method if spec.quantization else None)
    if method != "mxfp4" or gpu.vendor != "nvidia":
        return None
    if gpu.architecture not in MARLIN_MXFP4_ARCHITECTURES:
        return None
    return MARLIN_MOE_PADDING
