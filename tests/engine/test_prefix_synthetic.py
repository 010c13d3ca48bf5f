"""Prefix caching on synthetic shared prefixes (``--random-prefix-len``, ``--prefix-groups``):
fast mode == exact mode with invariants after every step, over block sizes that regroup the
16-token hashes (``regroup_hashes``), small pools (eviction, preemption) and data parallelism;
and hand-checked hit counts."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.cluster.disagg import DisaggResult, Pool, simulate_disaggregated
from inferplan.cluster.kv_transfer import KvLink
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool, KvGroup, pool_layout
from inferplan.memory.plan import MemoryPlan
from inferplan.memory.prefixcache import windowed_prefix_cache
from inferplan.metrics.records import RequestStatus
from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload, build_workload
from inferplan.workload.prefixes import with_shared_prefix

from .session_workload import conversation_workload


@cache
def _plan() -> MemoryPlan:
    return build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )


@cache
def _model() -> StepTimeModel:
    return build_step_model(_plan())


def _config(
    wl: Workload,
    block_size: int,
    spare_blocks: int,
    budget: int,
    dp: int,
    *,
    exact: bool,
    groups: tuple[KvGroup, ...] = FULL_ATTENTION,
) -> SimulationConfig:
    longest = int((wl.input_tokens + wl.output_tokens).max())
    need = BlockPool(1, block_size, groups).blocks_for_one(longest)
    sched = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=64,
        block_size=block_size,
        num_blocks=need + 2 + spare_blocks,
        kv_groups=groups,
        enable_prefix_caching=True,
    )
    return SimulationConfig(sched, longest, data_parallel_size=dp, exact=exact)


def _run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    return Simulation(wl, cfg, _model()).run(check=lambda replica: replica.check_invariants())


def _assert_same(f: SimulationResult, e: SimulationResult) -> None:
    assert f.num_steps == e.num_steps
    a, b = f.records, e.records
    for name in ("status", "num_preemptions", "recomputed_tokens", "cached_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(
            getattr(a, name), getattr(b, name), rtol=1e-9, equal_nan=True, err_msg=name
        )


# A full group beside a windowed one 3 times its size holding at most 4 blocks (Gemma-3-like),
# and two windows of different widths.
WINDOWED = (KvGroup(1), KvGroup(3, max_blocks=4))
TWO_WINDOWS = (KvGroup(2), KvGroup(1, max_blocks=3), KvGroup(1, max_blocks=9))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kv_groups=st.sampled_from([FULL_ATTENTION, FULL_ATTENTION, WINDOWED, TWO_WINDOWS]),
    block_size=st.sampled_from([1, 8, 16, 32, 64]),
    prefix=st.integers(1, 300),
    groups=st.integers(1, 4),
    spare=st.integers(0, 80),
    budget=st.sampled_from([64, 256, 2048]),
    dp=st.sampled_from([1, 1, 2]),
    rate=st.sampled_from([5.0, 50.0, math.inf]),
    seed=st.integers(0, 1000),
)
def test_fast_equals_exact_on_synthetic_prefixes(
    kv_groups: tuple[KvGroup, ...],
    block_size: int,
    prefix: int,
    groups: int,
    spare: int,
    budget: int,
    dp: int,
    rate: float,
    seed: int,
) -> None:
    base = build_workload(
        "random",
        num_prompts=40,
        random_input_len=60,
        random_output_len=40,
        random_range_ratio=0.9,
        request_rate=rate,
        seed=seed,
    )
    wl = with_shared_prefix(base, prefix, groups, seed)
    fast = _run(wl, _config(wl, block_size, spare, budget, dp, exact=False, groups=kv_groups))
    exact = _run(wl, _config(wl, block_size, spare, budget, dp, exact=True, groups=kv_groups))
    _assert_same(fast, exact)


@pytest.mark.parametrize("block_size", [16, 32])
def test_sequential_requests_hit_the_whole_shared_prefix(block_size: int) -> None:
    """One request at a time, plenty of KV: every request after the first hits the prefix's
    full KV blocks (hash blocks of 16 tokens regrouped into 32-token blocks: 1,000 // 32)."""
    base = build_workload(
        "random", num_prompts=10, random_input_len=100, random_output_len=4, request_rate=0.5
    )
    wl = with_shared_prefix(base, 1000)
    res = _run(wl, _config(wl, block_size, 4000, 8192, 1, exact=False))
    cached = res.records.cached_tokens
    assert cached is not None
    expected = (1000 // block_size) * block_size
    assert cached[0] == 0 and np.all(cached[1:] == expected)


def test_prefix_caching_shortens_ttft_and_off_is_unchanged() -> None:
    base = build_workload(
        "random", num_prompts=30, random_input_len=200, random_output_len=20, request_rate=2.0
    )
    wl = with_shared_prefix(base, 1500)
    on = _run(wl, _config(wl, 16, 4000, 8192, 1, exact=False))
    cfg_off = _config(wl, 16, 4000, 8192, 1, exact=False)
    off_sched = replace(cfg_off.scheduler, enable_prefix_caching=False)
    off = _run(wl, SimulationConfig(off_sched, cfg_off.max_model_len))
    assert off.records.cached_tokens is None
    ttft_on = on.records.first_token_s - on.records.arrival_s
    ttft_off = off.records.first_token_s - off.records.arrival_s
    assert ttft_on[0] == pytest.approx(ttft_off[0])  # the first request has nothing to hit
    assert np.all(ttft_on[1:] < 0.5 * ttft_off[1:])  # 1,488 of 1,700 tokens come from cache


# --- prefix caching under --disaggregate (cluster/disagg.py) --------------------------------


def _disagg(
    wl: Workload,
    spare: int,
    budget: int,
    dp: int,
    *,
    exact: bool,
    decode_caching: bool = True,
    decode_spare: int | None = None,
) -> DisaggResult:
    kvb = _plan().kv_bytes_per_token
    prefill = Pool("prefill", _config(wl, 16, spare, budget, dp, exact=exact), _model())
    d_cfg = _config(
        wl, 16, spare + 40 if decode_spare is None else decode_spare, budget, 1, exact=exact
    )
    d_sched = replace(d_cfg.scheduler, enable_prefix_caching=decode_caching)
    decode = Pool("decode", SimulationConfig(d_sched, d_cfg.max_model_len, exact=exact), _model())
    return simulate_disaggregated(wl, prefill, decode, KvLink(50e9, 0.0), lambda t: t * kvb)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.integers(1, 300),
    groups=st.integers(1, 3),
    spare=st.integers(0, 60),
    budget=st.sampled_from([64, 2048]),
    dp=st.sampled_from([1, 2]),
    seed=st.integers(0, 1000),
    decode_caching=st.booleans(),
    decode_spare=st.sampled_from([0, 5, 40]),
)
def test_disaggregated_pools_cache_and_fast_equals_exact(
    prefix: int,
    groups: int,
    spare: int,
    budget: int,
    dp: int,
    seed: int,
    decode_caching: bool,
    decode_spare: int,
) -> None:
    base = build_workload(
        "random",
        num_prompts=30,
        random_input_len=60,
        random_output_len=30,
        random_range_ratio=0.9,
        request_rate=20.0,
        seed=seed,
    )
    wl = with_shared_prefix(base, prefix, groups, seed)
    fast, exact = (
        _disagg(wl, spare, budget, dp, exact=e, decode_caching=decode_caching, decode_spare=ds)
        for e, ds in ((False, decode_spare), (True, decode_spare))
    )
    _assert_same(fast.prefill, exact.prefill)
    _assert_same(fast.decode, exact.decode)
    np.testing.assert_allclose(fast.records.finish_s, exact.records.finish_s, rtol=1e-9)
    # The combined records carry the prefill pool's hits; the decode pool has its own.
    assert exact.records.cached_tokens is not None
    assert exact.prefill.records.cached_tokens is not None
    assert (exact.decode.records.cached_tokens is not None) == decode_caching
    assert exact.records.cached_tokens.sum() == exact.prefill.records.cached_tokens.sum()
    completed = exact.records.status == int(RequestStatus.COMPLETED)
    assert completed.sum() + (exact.records.status == int(RequestStatus.REJECTED)).sum() == (
        wl.num_requests
    )
    # The link still ships every transferred prompt's whole KV.
    moved = exact.decode.records.input_tokens.sum() * _plan().kv_bytes_per_token
    assert exact.link.summary(1.0)["bytes"] == pytest.approx(moved)


def test_disaggregated_hit_shortens_only_the_prefill() -> None:
    """Two requests far apart with a 1,024-token shared prefix: the second's prefill computes
    its 100 own tokens attending to 1,024 cached ones; both ship 1,124 tokens of KV."""
    wl = with_shared_prefix(
        build_workload("random", num_prompts=2, random_input_len=100, random_output_len=3), 1024
    )
    wl = replace(wl, arrival_s=np.array([0.0, 100.0]))
    res = _disagg(wl, 400, 8192, 1, exact=True)
    p = res.prefill.records
    assert p.cached_tokens is not None and p.cached_tokens.tolist() == [0, 1024]
    step = _model().step_time
    full = step(StepBatch(1124, 1124 * 1125 / 2, 0, 1, 0, 0)).total_s
    rest = step(StepBatch(100, 100 * 1024 + 100 * 101 / 2, 1024, 1, 0, 0)).total_s
    prefill_s = p.first_token_s - p.arrival_s
    assert prefill_s.tolist() == pytest.approx([full, rest], rel=1e-12)
    assert res.link.summary(1.0)["bytes"] == pytest.approx(2 * 1124 * _plan().kv_bytes_per_token)


@pytest.mark.parametrize("exact", [False, True])
def test_decode_pool_shares_the_received_prefix_it_caches(exact: bool) -> None:
    """vLLM's NIXL decode side: two requests with a 1,024-token shared prefix (64 blocks of 16)
    and 100 own tokens each reach the decode replica one wire time apart. The second finds the
    prefix in the replica's cache (the first request's received prompt, still mapped by it), so
    its admission maps those 64 blocks and allocates only ceil(1,125 / 16) - 64 = 7. The link
    still ships both whole prompts (the upper bound, module doc of ``disagg.py``)."""
    wl = with_shared_prefix(
        build_workload("random", num_prompts=2, random_input_len=100, random_output_len=40), 1024
    )
    wl = replace(wl, arrival_s=np.array([0.0, 0.0]))
    on = _disagg(wl, 400, 8192, 1, exact=exact)
    off = _disagg(wl, 400, 8192, 1, exact=exact, decode_caching=False)
    d = on.decode.records
    assert d.cached_tokens is not None and d.cached_tokens.tolist() == [0, 1024]
    assert d.prefix_queried_tokens is not None and d.prefix_queried_tokens.tolist() == [1124] * 2
    assert off.decode.records.cached_tokens is None

    def peak_blocks(res: DisaggResult) -> int:
        usage = res.decode.traces[0].summary()
        assert usage is not None
        return round(usage.max * res.decode.traces[0].total_blocks)

    # Each request ends with 1,124 + 40 - 1 = 1,163 tokens of KV, ceil(1,163 / 16) = 73 blocks,
    # 64 of them shared with caching. The fast mode's usage gauge is sampled at events, so its
    # peak is at the second admission, where each holds ceil(1,125 / 16) = 71 blocks.
    per_request = 73 if exact else 71
    assert peak_blocks(off) == 2 * per_request
    assert peak_blocks(on) == per_request + (per_request - 64)
    assert on.link.summary(1.0)["bytes"] == off.link.summary(1.0)["bytes"]


# --- sliding-window pools (memory/prefixcache.py, windowed parts) ---------------------------


def test_windowed_pool_hits_need_the_last_window() -> None:
    """Gemma-3-like pool (a windowed group of 3 blocks, window (4 - 1) * 16 = 48 tokens, so a
    hit needs the windowed parts of its last ceil(47 / 16) = 3 entries). Sequential requests,
    plenty of KV: every later request hits the whole 256-token prefix, as with full attention.
    Then the windowed parts of the prefix's last entries are evicted by hand: the hit falls to
    the longest prefix that ends 3 cached windowed parts."""
    base = build_workload(
        "random", num_prompts=6, random_input_len=40, random_output_len=3, request_rate=0.5
    )
    wl = with_shared_prefix(base, 256)
    res = _run(wl, _config(wl, 16, 4000, 8192, 1, exact=False, groups=WINDOWED))
    cached = res.records.cached_tokens
    assert cached is not None and cached.tolist() == [0, 256, 256, 256, 256, 256]

    cache = windowed_prefix_cache(((0, 1, 2, 3, 4, 5, 6, 7),), 16, 16, WINDOWED)
    assert cache is not None and cache.window_entries == 3
    assert (cache.entry_blocks, cache.window_entry_blocks) == (1, 3)
    cache.register(0, 8)
    cache.release(0)
    assert cache.lookup(0, 8)[0] == 8
    del cache.lru[-1 - 6]  # the windowed part of entry 6 is gone: entries 3-5 end a window
    cache.lru_blocks -= 3
    assert cache.lookup(0, 8)[0] == 6
    del cache.lru[-1 - 1]  # and entry 1's: entries 3-5 still end a window
    cache.lru_blocks -= 3
    assert cache.lookup(0, 8)[0] == 6
    del cache.lru[-1 - 4]  # no run of 3 after entry 1; entry 0 alone starts the prompt
    cache.lru_blocks -= 3
    assert cache.lookup(0, 8)[0] == 1
    cache.check()


def test_windowed_only_pool_does_not_cache() -> None:
    assert windowed_prefix_cache(((1, 2),), 16, 16, (KvGroup(2, max_blocks=5),)) is None


@pytest.mark.parametrize("model", ["gemma-3-27b-it", "gpt-oss-20b"])
def test_bundled_sliding_window_models_hit_and_fast_equals_exact(model: str) -> None:
    plan = build_memory_plan(model, "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None)
    step_model = build_step_model(plan)
    layout = pool_layout(plan)
    assert layout.groups != FULL_ATTENTION  # a hybrid pool
    base = build_workload(
        "random", num_prompts=40, random_input_len=300, random_output_len=50, request_rate=8.0
    )
    wl = with_shared_prefix(base, 2000, num_groups=2)
    results = []
    for exact in (False, True):
        sched = SchedulerConfig(
            max_num_batched_tokens=2048,
            max_num_seqs=64,
            block_size=16,
            num_blocks=layout.num_blocks,
            kv_groups=layout.groups,
            enable_prefix_caching=True,
        )
        sim = Simulation(wl, SimulationConfig(sched, 4096, exact=exact), step_model)
        results.append(sim.run(check=lambda replica: replica.check_invariants()))
    _assert_same(*results)
    cached = results[0].records.cached_tokens
    # A hit is at most the prefix's 125 full blocks (2,000 tokens); most requests get all of it.
    assert cached is not None and cached.max() == 2000
    assert np.count_nonzero(cached == 2000) >= 30


@pytest.mark.parametrize("groups", [WINDOWED, TWO_WINDOWS])
def test_windowed_pool_hits_are_whole_kv_blocks_of_the_prefix(
    groups: tuple[KvGroup, ...],
) -> None:
    """Sequential requests: the hit is the prefix's full 16-token blocks, whatever the full
    groups' pool cost per block (2 for TWO_WINDOWS)."""
    base = build_workload(
        "random", num_prompts=5, random_input_len=100, random_output_len=3, request_rate=0.5
    )
    wl = with_shared_prefix(base, 1000)
    res = _run(wl, _config(wl, 16, 4000, 8192, 1, exact=False, groups=groups))
    cached = res.records.cached_tokens
    assert cached is not None and cached.tolist() == [0, 992, 992, 992, 992]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kv_groups=st.sampled_from([FULL_ATTENTION, WINDOWED]),
    block_size=st.sampled_from([8, 16, 32]),
    spare=st.integers(0, 60),
    num_sessions=st.integers(1, 6),
    seed=st.integers(0, 1000),
    cover_output=st.booleans(),
)
def test_fast_equals_exact_on_conversation_sessions(
    kv_groups: tuple[KvGroup, ...],
    block_size: int,
    spare: int,
    num_sessions: int,
    seed: int,
    cover_output: bool,
) -> None:
    """Multi-turn sessions (``session_hashes``): each turn's prompt is the previous turn's
    context plus a new message; turns of a session arrive in order, sessions interleave. With
    ``cover_output`` (as a session trace gives) generated blocks are cached too, preempted
    requests hit their own generated blocks on resume."""
    wl = conversation_workload(seed, num_sessions, cover_output)
    fast = _run(wl, _config(wl, block_size, spare, 256, 1, exact=False, groups=kv_groups))
    exact = _run(wl, _config(wl, block_size, spare, 256, 1, exact=True, groups=kv_groups))
    _assert_same(fast, exact)
