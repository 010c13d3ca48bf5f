"""Launch commands for a chosen replica configuration, with each engine's own flag names.

vLLM (``vllm serve``, 0.11 flags), TensorRT-LLM (``trtllm-serve`` with the PyTorch backend:
``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_batch_size``, ``--max_num_tokens``,
``--kv_cache_free_gpu_memory_fraction``), SGLang (``python -m sglang.launch_server``:
``--tp-size``, ``--pp-size``, ``--ep-size``, ``--max-running-requests``,
``--chunked-prefill-size``, ``--context-length``, ``--mem-fraction-static``). Each engine's
memory flag carries the value its memory plan used (``plan/bounds.py`` ``memory_fraction``).
One command per replica; with several replicas,
the same command runs on each replica's GPUs behind a load balancer (the ``router``). Weight
formats other than bf16/fp16/fp8 need a checkpoint already quantized that way (AWQ/GPTQ for
int4, a W8A8 one for int8, an MXFP4/NVFP4 one for the fp4 formats): the command says so.
"""

from __future__ import annotations

from inferplan.plan.bounds import memory_fraction
from inferplan.plan.space import ReplicaConfig

_ONLINE_FORMATS = {"bf16": None, "fp16": None, "fp8": "fp8"}


def launch_command(
    model: str, cfg: ReplicaConfig, max_model_len: int, fraction: float | None
) -> str:
    utilization = memory_fraction(cfg, fraction)
    if cfg.engine == "trtllm":
        return _trtllm(model, cfg, max_model_len, utilization)
    if cfg.engine == "sglang":
        return _sglang(model, cfg, max_model_len, utilization)
    return _vllm(model, cfg, max_model_len, utilization)


def _checkpoint_note(cfg: ReplicaConfig) -> str:
    if cfg.quantization in _ONLINE_FORMATS:
        return ""
    return f"  # needs a {cfg.quantization}-quantized checkpoint of the model"


def _precision_flags(cfg: ReplicaConfig) -> list[str]:
    """``--dtype``, ``--quantization`` and ``--kv-cache-dtype``: vLLM and SGLang spell them
    alike."""
    flags = []
    if cfg.quantization in ("bf16", "fp16"):
        flags.append(f"--dtype {'bfloat16' if cfg.quantization == 'bf16' else 'float16'}")
    elif _ONLINE_FORMATS.get(cfg.quantization):
        flags.append(f"--quantization {cfg.quantization}")
    if cfg.kv_cache_dtype != "auto":
        flags.append(f"--kv-cache-dtype {cfg.kv_cache_dtype}")
    return flags


def _vllm(model: str, cfg: ReplicaConfig, max_model_len: int, utilization: float) -> str:
    parts = [
        f"vllm serve {model}",
        f"--tensor-parallel-size {cfg.tp}",
        f"--pipeline-parallel-size {cfg.pp}",
    ]
    if cfg.ep:
        parts.append("--enable-expert-parallel")
    parts += _precision_flags(cfg)
    parts += [
        f"--max-num-seqs {cfg.max_num_seqs}",
        f"--max-num-batched-tokens {cfg.max_num_batched_tokens}",
        f"--max-model-len {max_model_len}",
        f"--gpu-memory-utilization {utilization}",
    ]
    return " ".join(parts) + _checkpoint_note(cfg)


def _trtllm(model: str, cfg: ReplicaConfig, max_model_len: int, utilization: float) -> str:
    parts = [
        f"trtllm-serve {model} --backend pytorch",
        f"--tp_size {cfg.tp}",
        f"--pp_size {cfg.pp}",
    ]
    if cfg.ep:
        parts.append(f"--ep_size {cfg.tp}")
    parts += [
        f"--max_batch_size {cfg.max_num_seqs}",
        f"--max_num_tokens {cfg.max_num_batched_tokens}",
        f"--max_seq_len {max_model_len}",
        f"--kv_cache_free_gpu_memory_fraction {utilization}",
    ]
    note = _checkpoint_note(cfg)
    if not note and cfg.quantization == "fp8":
        note = "  # fp8: an FP8 (ModelOpt) checkpoint of the model"
    return " ".join(parts) + note


def _sglang(model: str, cfg: ReplicaConfig, max_model_len: int, fraction: float) -> str:
    parts = [
        f"python -m sglang.launch_server --model-path {model}",
        f"--tp-size {cfg.tp}",
        f"--pp-size {cfg.pp}",
    ]
    if cfg.ep:
        parts.append(f"--ep-size {cfg.tp}")
    parts += _precision_flags(cfg)
    parts += [
        f"--max-running-requests {cfg.max_num_seqs}",
        f"--chunked-prefill-size {cfg.max_num_batched_tokens}",
        f"--context-length {max_model_len}",
        f"--mem-fraction-static {fraction}",
    ]
    return " ".join(parts) + _checkpoint_note(cfg)
