"""Prefix caching (vLLM v1): hand-computed hits, LRU eviction, and the engine's accounting."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool
from inferplan.memory.prefixcache import PrefixCache
from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload

BLOCK = 16


def test_freed_blocks_keep_hashes_and_are_evicted_least_recent_first_tail_first() -> None:
    pool = BlockPool(4, BLOCK, FULL_ATTENTION)
    cache = PrefixCache(((10, 11), (20,), (10, 11, 12), (20,)), entry_blocks=1)
    pool.cache = cache
    pool.free -= 2  # request 0 computes its two prompt blocks
    cache.register(0, 2)
    pool.free -= 1  # request 1 its one
    cache.register(1, 1)
    pool.free += 2 - cache.release(0)  # freed first, tail block first: LRU [11, 10]
    pool.free += 1 - cache.release(1)  # LRU [11, 10, 20]
    assert (pool.free, cache.lru_blocks) == (4, 3)
    assert cache.lookup(2, 3) == (2, 0)  # both of request 0's blocks still hit
    pool.free -= 2  # a new sequence needs two blocks: one free, one evicted (the LRU's 11)
    assert list(cache.lru) == [10, 20]
    assert cache.lookup(2, 3) == (1, 0)
    pool.free -= 1  # then 10
    assert cache.lookup(2, 3) == (0, 0)
    assert cache.lookup(3, 1) == (1, 0)
    assert pool.free == 1 and cache.lru_blocks == 1
    cache.check()


def test_shared_blocks_are_reference_counted() -> None:
    pool = BlockPool(10, BLOCK, FULL_ATTENTION)
    cache = PrefixCache(((1, 2, 3), (1, 2, 4)), entry_blocks=1)
    pool.cache = cache
    pool.free -= 3
    cache.register(0, 3)
    assert cache.lookup(1, 3) == (2, 2)  # two blocks request 0 maps
    assert cache.acquire(1, 2) == 0  # nothing taken from the free pool
    assert cache.shared_blocks == 2
    assert cache.release(0) == 2  # request 1 still maps 1 and 2
    assert list(cache.lru) == [3]
    assert cache.release(1) == 0
    assert list(cache.lru) == [3, 2, 1] and cache.shared_blocks == 0
    assert all(count == 0 for count in cache.refs.values())
    cache.check()


def _two_requests(
    second_prompt: int, second_hashes: tuple[int, ...], caching: bool, exact: bool = False
) -> tuple[SimulationResult, StepTimeModel]:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    model = build_step_model(plan)
    wl = Workload(
        arrival_s=np.array([0.0, 10.0]),
        input_tokens=np.array([5 * BLOCK + 5, second_prompt], dtype=np.int64),
        output_tokens=np.array([2, 2], dtype=np.int64),
        class_ids=np.zeros(2, dtype=np.int64),
        prefix_hashes=((1, 2, 3, 4, 5, 6), second_hashes),
        prefix_block_tokens=BLOCK,
    )
    sched = SchedulerConfig(
        max_num_batched_tokens=2048,
        max_num_seqs=8,
        block_size=BLOCK,
        num_blocks=64,
        enable_prefix_caching=caching,
    )
    checks: list[Replica] = []

    def check(replica: Replica) -> None:
        replica.check_invariants()
        checks.append(replica)

    res = Simulation(wl, SimulationConfig(sched, 4096, exact=exact), model).run(check=check)
    assert checks
    return res, model


@pytest.mark.parametrize("exact", [False, True])
def test_second_request_computes_only_what_is_not_cached(exact: bool) -> None:
    """Request 1 shares request 0's first 3 full blocks: it computes its other 20 tokens, as a
    prefill chunk of 20 after 48 cached tokens."""
    res, model = _two_requests(3 * BLOCK + 20, (1, 2, 3, 9, 10), caching=True, exact=exact)
    rec = res.records
    assert rec.cached_tokens is not None and rec.prefix_queried_tokens is not None
    assert rec.cached_tokens.tolist() == [0, 48]
    assert rec.prefix_queried_tokens.tolist() == [5 * BLOCK + 5, 68]
    prefill = StepBatch(
        prefill_tokens=20,
        prefill_attention_pairs=20 * 48 + 20 * 21 / 2,
        prefill_context_tokens=48,
        num_prefill_seqs=1,
    )
    ttft = rec.first_token_s[1] - rec.dispatch_s[1]
    assert ttft == pytest.approx(model.step_time(prefill).total_s, rel=1e-12)
    off, _ = _two_requests(3 * BLOCK + 20, (1, 2, 3, 9, 10), caching=False)
    assert off.records.cached_tokens is None
    assert off.records.first_token_s[1] - off.records.dispatch_s[1] > ttft


def test_a_fully_cached_prompt_still_computes_its_last_block() -> None:
    """vLLM recomputes at least one token: 4 cached full blocks hit only 3 (48 tokens)."""
    res, _ = _two_requests(4 * BLOCK, (1, 2, 3, 4), caching=True)
    assert res.records.cached_tokens is not None
    assert res.records.cached_tokens.tolist() == [0, 48]
