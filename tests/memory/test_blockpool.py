"""The block pool per layer kind (issue 9, item 9): sliding-window layers hold at most their
window, so Gemma-3 and gpt-oss serve the contexts the memory plan says fit, and a request that
can never fit is a rejected request in a completed run."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from inferplan.cli import app
from inferplan.cli_flags import build_memory_plan
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool, KvGroup, pool_layout
from inferplan.memory.plan import MemoryPlan
from inferplan.metrics.records import RequestStatus
from inferplan.perf.factory import build_step_model
from inferplan.specs.kv import sequence_kv_bytes
from inferplan.workload import Workload


def _plan(model: str, gpu: str = "h100") -> MemoryPlan:
    return build_memory_plan(model, gpu, 1, 1, False, None, "auto", None, 0.9, None, None, None)


def test_full_attention_pool_is_the_memory_plans_blocks() -> None:
    plan = _plan("Llama-3.1-8B", "h200")
    layout = pool_layout(plan)
    assert layout.groups == FULL_ATTENTION
    assert layout.num_blocks == plan.num_blocks
    assert layout.block_bytes == plan.worst_stage.kv_bytes_per_token * plan.config.block_size


def test_gemma3_groups_by_hand() -> None:
    """Gemma-3-27B: 62 layers, every 6th full, 16 KV heads x 128 dims: 10 full layers (40,960
    values per token) and 52 windowed (212,992) of window 1,024 = 64 blocks + 1 being filled.
    The pool's unit is their gcd, 8,192 values: costs 5 and 26."""
    layout = pool_layout(_plan("gemma-3-27b-it"))
    assert layout.groups == (KvGroup(5), KvGroup(26, max_blocks=65))
    assert layout.block_bytes == 8192 * 2 * 16


def test_pool_agrees_with_the_memory_plan_on_max_length() -> None:
    """The memory plan says one 131,072-token sequence of gemma-3-27b-it fits an H100; the
    pool must hold it too (the bytes it holds are the plan's per-sequence bytes)."""
    plan = _plan("gemma-3-27b-it")
    layout = pool_layout(plan)
    pool = BlockPool(layout.num_blocks, plan.config.block_size, layout.groups)
    held = pool.blocks_for_one(plan.max_model_len)
    assert plan.max_concurrent_seqs[plan.max_model_len] == 1
    assert held <= layout.num_blocks
    stage = plan.worst_stage
    plan_bytes = sequence_kv_bytes(
        stage.layers, plan.max_model_len, plan.kv_format, 2.0, tp=1, block_tokens=16
    )
    assert held * layout.block_bytes == plan_bytes


GROUPS = st.sampled_from(
    [FULL_ATTENTION, (KvGroup(1), KvGroup(3, max_blocks=4)), (KvGroup(2, max_blocks=5),)]
)


@given(groups=GROUPS, block=st.sampled_from([1, 16]), computed=st.integers(0, 400))
def test_crossing_cost_is_the_growth_of_held_blocks(
    groups: tuple[KvGroup, ...], block: int, computed: int
) -> None:
    pool = BlockPool(10**6, block, groups)
    c = np.array([computed], dtype=np.int64)
    assert pool.crossing_cost(c)[0] == pool.blocks_for_one(computed + 1) - (
        pool.blocks_for_one(computed)
    )


@given(groups=GROUPS, block=st.sampled_from([1, 4, 16]), computed=st.integers(0, 200))
def test_next_crossing_costs_hold_over_their_steps(
    groups: tuple[KvGroup, ...], block: int, computed: int
) -> None:
    """Every crossing within the steps the costs hold costs the predicted amount."""
    pool = BlockPool(10**6, block, groups)
    cost, hold = pool.next_crossing_costs(np.array([computed], dtype=np.int64))
    for step in range(hold if hold is not None else 3 * block):
        c = computed + step
        if c % block == 0:
            assert pool.blocks_for_one(c + 1) - pool.blocks_for_one(c) == cost[0]


def test_gemma3_long_prompts_complete() -> None:
    """Regression: the simulator counted full KV in every layer, so a 100k-token prompt that
    the memory plan says fits ended the whole run with exit 2."""
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--model=gemma-3-27b-it",
            "--gpu=h100",
            "--num-prompts=3",
            "--random-input-len=100000",
            "--random-output-len=20",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["completed"] == 3


def test_request_that_can_never_fit_is_rejected() -> None:
    """Regression: a request whose KV exceeds the whole pool stopped the run with an error;
    now it is rejected at arrival and the others complete."""
    plan = _plan("Llama-3.1-8B", "h200")
    sched = SchedulerConfig(
        max_num_batched_tokens=512, max_num_seqs=64, block_size=16, num_blocks=20
    )
    wl = Workload(
        arrival_s=np.array([0.0, 0.1, 0.2]),
        input_tokens=np.array([100, 400, 100]),  # 400 + 50 tokens need 29 blocks
        output_tokens=np.array([50, 50, 221]),  # 100 + 220 KV tokens: exactly 20 blocks
        class_ids=np.zeros(3, dtype=np.int64),
    )
    res = Simulation(wl, SimulationConfig(sched, max_model_len=4096), build_step_model(plan)).run()
    completed, rejected = int(RequestStatus.COMPLETED), int(RequestStatus.REJECTED)
    assert res.records.status.tolist() == [completed, rejected, completed]


def test_a_mamba_state_is_one_fixed_page_set_per_sequence() -> None:
    """Nemotron-3-Nano on one H100: 6 attention layers of 2 KV heads x 128 (3,072 values a
    token, one group) and 23 Mamba-2 states of (4,096 + 2,048) x 3 bf16 conv values plus
    64 x 64 x 128 fp32 SSM values. A sequence holds ceil(state / block bytes) pool blocks from
    its first token, however long it grows; its KV blocks grow as usual."""
    plan = _plan("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    layout = pool_layout(plan)
    block_bytes = 3072 * 2 * 16
    state = 23 * (6144 * 3 * 2 + 64 * 64 * 128 * 4)
    assert layout.block_bytes == block_bytes
    assert layout.groups == (KvGroup(1), KvGroup(-(-state // block_bytes), max_blocks=1))
    pool = BlockPool(layout.num_blocks, plan.config.block_size, layout.groups)
    state_blocks = layout.groups[1].cost
    for tokens in (1, 16, 17, 5000):
        assert pool.blocks_for_one(tokens) == state_blocks + -(-tokens // 16)
    assert pool.crossing_cost(np.array([0, 16, 5])).tolist() == [state_blocks + 1, 1, 0]
    # The memory plan's concurrency counts the same state: the pool admits no more.
    seqs = plan.max_concurrent_seqs[1024]
    assert seqs * pool.blocks_for_one(1024) <= layout.num_blocks
    assert (seqs + 2) * pool.blocks_for_one(1024) > layout.num_blocks
