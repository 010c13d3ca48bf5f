"""The launch commands ``plan`` prints (``plan/launch.py``), golden: each engine's flag
names, their order, the precision flags vLLM and SGLang take and TensorRT-LLM does not, the EP
flag, the checkpoint notes. The strings are 2a52ed2's, before the three builders became one
table (debt20), so a slip in ``_ENGINES`` fails here (review20)."""

from __future__ import annotations

import pytest

from inferplan.plan.launch import launch_command
from inferplan.plan.space import ReplicaConfig

CASES = [
    (
        ("vllm", 8, 1, True, "bf16", "fp8", None),
        "vllm serve org/M",
        [
            "--tensor-parallel-size 8",
            "--pipeline-parallel-size 1",
            "--enable-expert-parallel",
            "--dtype bfloat16",
            "--kv-cache-dtype fp8",
            "--max-num-seqs 256",
            "--max-num-batched-tokens 8192",
            "--max-model-len 32768",
            "--gpu-memory-utilization 0.9",
        ],
        "",
    ),
    (
        ("vllm", 2, 2, False, "fp8", "auto", 0.8),
        "vllm serve org/M",
        [
            "--tensor-parallel-size 2",
            "--pipeline-parallel-size 2",
            "--quantization fp8",
            "--max-num-seqs 256",
            "--max-num-batched-tokens 8192",
            "--max-model-len 32768",
            "--gpu-memory-utilization 0.8",
        ],
        "",
    ),
    (
        ("vllm", 1, 1, False, "nvfp4", "auto", 0.85),
        "vllm serve org/M",
        [
            "--tensor-parallel-size 1",
            "--pipeline-parallel-size 1",
            "--max-num-seqs 256",
            "--max-num-batched-tokens 8192",
            "--max-model-len 32768",
            "--gpu-memory-utilization 0.85",
        ],
        "  # needs a nvfp4-quantized checkpoint of the model",
    ),
    (
        ("trtllm", 8, 1, True, "fp8", "fp8", 0.95),
        "trtllm-serve org/M",
        [
            "--backend pytorch",
            "--tp_size 8",
            "--pp_size 1",
            "--ep_size 8",
            "--max_batch_size 256",
            "--max_num_tokens 8192",
            "--max_seq_len 32768",
            "--kv_cache_free_gpu_memory_fraction 0.95",
        ],
        "  # fp8: an FP8 (ModelOpt) checkpoint of the model",
    ),
    (
        ("trtllm", 4, 3, False, "int4", "auto", None),
        "trtllm-serve org/M",
        [
            "--backend pytorch",
            "--tp_size 4",
            "--pp_size 3",
            "--max_batch_size 256",
            "--max_num_tokens 8192",
            "--max_seq_len 32768",
            "--kv_cache_free_gpu_memory_fraction 0.9",
        ],
        "  # needs a int4-quantized checkpoint of the model",
    ),
    (
        ("trtllm", 1, 1, False, "fp16", "fp8", 0.5),
        "trtllm-serve org/M",
        [
            "--backend pytorch",
            "--tp_size 1",
            "--pp_size 1",
            "--max_batch_size 256",
            "--max_num_tokens 8192",
            "--max_seq_len 32768",
            "--kv_cache_free_gpu_memory_fraction 0.5",
        ],
        "",
    ),
    (
        ("sglang", 8, 1, True, "fp8", "fp8_e5m2", 0.7),
        "python -m sglang.launch_server",
        [
            "--model-path org/M",
            "--tp-size 8",
            "--pp-size 1",
            "--ep-size 8",
            "--quantization fp8",
            "--kv-cache-dtype fp8_e5m2",
            "--max-running-requests 256",
            "--chunked-prefill-size 8192",
            "--context-length 32768",
            "--mem-fraction-static 0.7",
        ],
        "",
    ),
    (
        ("sglang", 2, 1, False, "fp16", "auto", 0.6),
        "python -m sglang.launch_server",
        [
            "--model-path org/M",
            "--tp-size 2",
            "--pp-size 1",
            "--dtype float16",
            "--max-running-requests 256",
            "--chunked-prefill-size 8192",
            "--context-length 32768",
            "--mem-fraction-static 0.6",
        ],
        "",
    ),
    (
        ("sglang", 1, 2, False, "mxfp4", "auto", 0.75),
        "python -m sglang.launch_server",
        [
            "--model-path org/M",
            "--tp-size 1",
            "--pp-size 2",
            "--max-running-requests 256",
            "--chunked-prefill-size 8192",
            "--context-length 32768",
            "--mem-fraction-static 0.75",
        ],
        "  # needs a mxfp4-quantized checkpoint of the model",
    ),
]


@pytest.mark.parametrize(("given", "command", "flags", "note"), CASES)
def test_launch_command_spells_each_engine_as_before(
    given: tuple[str, int, int, bool, str, str, float | None],
    command: str,
    flags: list[str],
    note: str,
) -> None:
    engine, tp, pp, ep, quantization, kv_cache_dtype, fraction = given
    cfg = ReplicaConfig(
        0, "h100", tp, pp, ep, quantization, kv_cache_dtype, engine, 256, 8192, 64, 8
    )
    assert launch_command("org/M", cfg, 32768, fraction) == " ".join([command, *flags]) + note
