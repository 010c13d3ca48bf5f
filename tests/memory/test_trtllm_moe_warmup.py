"""TensorRT-LLM's warm-up peak under its KV rule: a routed-expert layer's fused-MoE workspace
on the tokens of every attention-DP rank (memory/plan.py ``trtllm_moe_workspace_bytes``), by
hand for Qwen3-30B-A3B (hidden 2,048, expert width 768, top-8, 32 heads of 128, 4 KV heads,
vocabulary 151,936)."""

import pytest

from inferplan.memory.plan import (
    MemoryConfig,
    activation_peak_bytes,
    plan_memory,
    trtllm_moe_workspace_bytes,
)
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import GIB, load_gpu
from inferplan.specs.parallel import Parallelism

TOKENS, SEQS = 8192, 256
TRTLLM = MemoryConfig(
    kv_cache_free_gpu_mem_fraction=0.9, max_num_batched_tokens=TOKENS, max_num_seqs=SEQS
)
VLLM = MemoryConfig(max_num_batched_tokens=TOKENS, max_num_seqs=SEQS)
DEP4 = Parallelism(tp=1, dp=4, enable_expert_parallel=True)  # attention DP4, experts EP4
TP1 = Parallelism()

# Per gathered row: 8 copies x (2 x 2,048 + 6 x 768) bytes + 3 x 2 x 2,048 = 81,920 bytes.
ROW_BYTES = 8 * (2 * 2048 + 6 * 768) + 3 * 2 * 2048
STREAM = TOKENS * 2 * (2 * 2048)  # the residual stream and hidden state, BF16
SAMPLER = 2 * 4 * SEQS * 151_936  # vLLM's sampler estimate, kept for every engine


def test_workspace_counts_every_attention_dp_rank_tokens() -> None:
    spec = load_model("Qwen3-30B-A3B")
    assert trtllm_moe_workspace_bytes(spec, DEP4, TRTLLM) == 4 * TOKENS * ROW_BYTES == 2.5 * GIB
    assert trtllm_moe_workspace_bytes(spec, TP1, TRTLLM) == TOKENS * ROW_BYTES
    assert trtllm_moe_workspace_bytes(load_model("Llama-3.1-8B"), DEP4, TRTLLM) == 0.0


def test_trtllm_warmup_peak_is_the_stream_plus_the_moe_workspace() -> None:
    spec = load_model("Qwen3-30B-A3B")
    dep4 = activation_peak_bytes(spec, DEP4, TRTLLM)
    assert dep4 == STREAM + 4 * TOKENS * ROW_BYTES + SAMPLER
    assert activation_peak_bytes(spec, TP1, TRTLLM) == STREAM + TOKENS * ROW_BYTES + SAMPLER


def test_vllm_profile_keeps_its_fused_moe_cache_term() -> None:
    """vLLM's rule is unchanged: the widest intermediate per token, top-8 copies of an expert's
    3 x 768 / EP4 gate-up-down slice plus the hidden state, on one rank's tokens."""
    spec = load_model("Qwen3-30B-A3B")
    widest = 8 * (3 * 768 // 4 + 2048)
    assert activation_peak_bytes(spec, DEP4, VLLM) == TOKENS * 2 * (2 * 2048 + widest) + SAMPLER


def test_the_kv_pool_loses_the_gathered_workspace() -> None:
    """Each DEP4 rank's pool is 0.9 of what the weights, this peak and the reserves leave."""
    spec, gpu = load_model("Qwen3-30B-A3B"), load_gpu("h100")
    stage = plan_memory(spec, gpu, DEP4, TRTLLM).worst_stage
    used = stage.weights.total_bytes + STREAM + 4 * TOKENS * ROW_BYTES + SAMPLER
    assert stage.kv_bytes == pytest.approx(0.9 * (gpu.memory_bytes - used - 1.0 * GIB), rel=1e-12)
