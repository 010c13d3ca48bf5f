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

from dataclasses import dataclass

from inferplan.plan.bounds import memory_fraction
from inferplan.plan.space import ReplicaConfig

_ONLINE_FORMATS = {"bf16": None, "fp16": None, "fp8": "fp8"}


@dataclass(frozen=True)
class _Spelling:
    """One engine's command and flag names, in the order the command gives them."""

    command: str  # with ``{model}``
    tp: str
    pp: str
    ep: str  # with ``{tp}`` where the flag takes the EP size
    has_precision_flags: bool  # vLLM's and SGLang's ``_precision_flags``
    max_num_seqs: str
    max_num_batched_tokens: str
    max_model_len: str
    memory: str  # the memory flag, with ``memory_fraction``'s value
    fp8_note: str = ""  # where an FP8 checkpoint is needed for --quantization fp8


_ENGINES = {
    "vllm": _Spelling(
        "vllm serve {model}",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--enable-expert-parallel",
        True,
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-model-len",
        "--gpu-memory-utilization",
    ),
    "trtllm": _Spelling(
        "trtllm-serve {model} --backend pytorch",
        "--tp_size",
        "--pp_size",
        "--ep_size {tp}",
        False,
        "--max_batch_size",
        "--max_num_tokens",
        "--max_seq_len",
        "--kv_cache_free_gpu_memory_fraction",
        fp8_note="  # fp8: an FP8 (ModelOpt) checkpoint of the model",
    ),
    "sglang": _Spelling(
        "python -m sglang.launch_server --model-path {model}",
        "--tp-size",
        "--pp-size",
        "--ep-size {tp}",
        True,
        "--max-running-requests",
        "--chunked-prefill-size",
        "--context-length",
        "--mem-fraction-static",
    ),
}


def launch_command(
    model: str, cfg: ReplicaConfig, max_model_len: int, fraction: float | None
) -> str:
    """The engine's command (vLLM's for an engine it does not name) for ``cfg``."""
    names = _ENGINES.get(cfg.engine, _ENGINES["vllm"])
    parts = [names.command.format(model=model), f"{names.tp} {cfg.tp}", f"{names.pp} {cfg.pp}"]
    if cfg.ep:
        parts.append(names.ep.format(tp=cfg.tp))
    if names.has_precision_flags:
        parts += _precision_flags(cfg)
    parts += [
        f"{names.max_num_seqs} {cfg.max_num_seqs}",
        f"{names.max_num_batched_tokens} {cfg.max_num_batched_tokens}",
        f"{names.max_model_len} {max_model_len}",
        f"{names.memory} {memory_fraction(cfg, fraction)}",
    ]
    note = _checkpoint_note(cfg)
    if not note and cfg.quantization == "fp8":
        note = names.fp8_note
    return " ".join(parts) + note


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
