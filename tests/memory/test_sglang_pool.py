"""SGLang keeps windowed layers at full length in its KV pool (``disable_hybrid_swa_memory``,
forced on for gpt-oss and Gemma), so a sequence costs every layer's KV for all its tokens there,
where vLLM's hybrid manager frees what falls out of the window."""

from __future__ import annotations

from dataclasses import replace

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.session import ServingOptions, simulation_config
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool, pool_layout
from inferplan.memory.plan import MemoryPlan, sequence_bytes
from inferplan.memory.sglang_pool import full_length_pool


def _plan(model: str, gpu: str) -> MemoryPlan:
    return build_memory_plan(model, gpu, 1, 1, False, None, "auto", None, 0.9, None, None, None)


def test_gpt_oss_120b_pool_by_hand() -> None:
    """gpt-oss-120b: 36 layers (18 windowed), 8 KV heads x 64 dims, BF16: 36 x 2 x 8 x 64 x 2
    = 73,728 bytes a token in every layer, a block of 16 tokens 1,179,648 bytes."""
    plan = _plan("gpt-oss-120b", "a100")
    layout = full_length_pool(plan)
    assert layout is not None
    assert layout.groups == FULL_ATTENTION
    assert layout.block_bytes == 73_728 * 16
    assert layout.num_blocks == int(plan.worst_stage.kv_bytes // (73_728 * 16))


def test_a_sequence_costs_twice_the_hybrid_pools_blocks() -> None:
    """A 4,096-token sequence: all 256 blocks of every layer in SGLang's pool; in the hybrid
    pool the 18 windowed layers hold 9 blocks (window 128 = 8, + 1), so it costs (256 + 9) / 2
    full-layer blocks: SGLang admits about half as many such sequences."""
    plan = _plan("gpt-oss-120b", "a100")
    full = full_length_pool(plan)
    hybrid = pool_layout(plan)
    assert full is not None
    sglang_pool = BlockPool(full.num_blocks, 16, full.groups)
    hybrid_pool = BlockPool(hybrid.num_blocks, 16, hybrid.groups)
    sglang_bytes = sglang_pool.blocks_for_one(4096) * full.block_bytes
    hybrid_bytes = hybrid_pool.blocks_for_one(4096) * hybrid.block_bytes
    assert sglang_bytes == 256 * 73_728 * 16
    assert hybrid_bytes == (256 + 9) * 73_728 * 16 // 2


def test_simulation_config_gives_sglang_the_full_pool_only() -> None:
    plan = _plan("gpt-oss-20b", "h100")
    sglang = simulation_config(plan, ServingOptions(engine="sglang")).scheduler
    vllm = simulation_config(plan, ServingOptions(engine="vllm")).scheduler
    assert sglang.kv_groups == FULL_ATTENTION
    assert vllm.kv_groups == pool_layout(plan).groups != FULL_ATTENTION
    # the same bytes, cut into full-length blocks: half as many as the hybrid pool's units
    assert sglang.num_blocks * sglang.kv_block_bytes <= plan.worst_stage.kv_bytes
    assert sglang.num_blocks == vllm.num_blocks // 2


def test_every_windowed_model_gets_it_and_a_windowless_one_keeps_its_pool() -> None:
    """SGLang 0.5 builds its hybrid SWA pool for no model by default: Mistral's window (4,096)
    is not read by its class, so its pool is full-length as well; Llama has no window."""
    mistral = _plan("Mistral-7B-v0.1", "h100")
    llama = _plan("Llama-3.1-8B", "h100")
    assert pool_layout(mistral).groups != FULL_ATTENTION
    layout = full_length_pool(mistral)
    assert layout is not None and layout.groups == FULL_ATTENTION
    assert full_length_pool(llama) is None
    sglang = simulation_config(llama, ServingOptions(engine="sglang")).scheduler
    assert (sglang.kv_groups, sglang.num_blocks) == (FULL_ATTENTION, pool_layout(llama).num_blocks)


def test_the_memory_plan_counts_sequences_in_sglangs_pool() -> None:
    """``inferplan memory --engine sglang`` counts the sequences the simulator's pool holds (a
    4,096-token one takes 4,096 of its tokens), and says it does not fit where no sequence of
    the default 131,072 tokens does; under another engine's rule the 18 windowed layers of a
    sequence hold their window (128 tokens) and the block being filled, at block size 1."""
    args = ("gpt-oss-120b", "h100", 1, 1, False, None, "auto", None, 0.9, None, None, None)
    sglang = build_memory_plan(*args, "sglang")
    full = full_length_pool(sglang)
    assert full is not None
    tokens = full.num_blocks * sglang.config.block_size
    for context, seqs in sglang.max_concurrent_seqs.items():
        assert seqs == tokens // context, context
    assert tokens < 131_072 and not sglang.fits
    # the same stage under another engine's rule: the windowed layers hold 128 + 1 tokens
    stage, kv, par = sglang.worst_stage, sglang.kv_format, sglang.parallelism
    hybrid = replace(sglang.config, mem_fraction_static=None)
    at_full = sequence_bytes(stage, 4096, sglang.spec, par, sglang.config, kv)
    windowed = sequence_bytes(stage, 4096, sglang.spec, par, hybrid, kv)
    assert at_full == 73_728 * 4096
    assert windowed == 73_728 / 2 * (4096 + 129)


def test_the_memory_plan_counts_sequences_in_tensorrt_llms_full_length_pool() -> None:
    """``--engine trtllm`` simulates the full-length pool (``engine/session.py``: TensorRT-LLM's
    KV manager without ``max_attention_window``), so ``inferplan memory --engine trtllm`` counts
    the sequences that pool holds (gpt-oss-120b, one H100: 182,016 tokens, 44 of 4,096, not the
    85 the windowed layers at their window would give)."""
    args = ("gpt-oss-120b", "h100", 1, 1, False, None, "auto", None, 0.9, None, None, None)
    trtllm = build_memory_plan(*args, "trtllm")
    pool = simulation_config(trtllm, ServingOptions(engine="trtllm")).scheduler
    assert pool.kv_groups == FULL_ATTENTION
    tokens = pool.num_blocks * pool.block_size
    for context, seqs in trtllm.max_concurrent_seqs.items():
        assert seqs == tokens // context, context
    assert trtllm.max_concurrent_seqs[4096] == 182_016 // 4096 == 44
