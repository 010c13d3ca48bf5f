"""KV tiers (``engine/offload.py``): hand-computed transfers, backpressure, invariants, and
fast == exact with tiers.

The replica is driven by hand through a small factory (as ``test_replica_scenarios.py`` does);
whole runs check the replica's invariants after every step, which with tiers include the
offload's own (tier blocks are exactly the stored and reloading sequences', no sequence's KV is
in two places, no block is reused before its copy is written).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.prefixcache import PrefixCache
from inferplan.memory.tiers import OffloadConfig, TierSpec
from inferplan.metrics.records import RequestStatus
from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload, arrival_times_s

from .replica_helpers import replica_at_zero

COMPLETED = int(RequestStatus.COMPLETED)
BLOCK_BYTES = 1e6


@cache
def _model() -> StepTimeModel:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return build_step_model(plan)


def _decode_s(contexts: list[int]) -> float:
    batch = StepBatch(num_decode_seqs=len(contexts), decode_context_tokens=sum(contexts))
    return _model().step_time(batch).total_s


def _tiers(*specs: TierSpec, cap: float | None = None, overlaps: bool = True) -> OffloadConfig:
    return OffloadConfig(specs, BLOCK_BYTES, eviction_cap_bytes_s=cap, overlaps_compute=overlaps)


READ_BYTES_S, WRITE_BYTES_S = 40e9, 10e9
HOST = TierSpec("host", 100 * BLOCK_BYTES, READ_BYTES_S, WRITE_BYTES_S)


def _replica(
    prompts: list[int],
    outputs: list[int],
    tiers: OffloadConfig,
    *,
    block_size: int = 4,
    num_blocks: int = 4,
) -> Replica:
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
        block_size=block_size,
        num_blocks=num_blocks,
        kv_block_bytes=BLOCK_BYTES,
        kv_tiers=tiers,
    )
    return replica_at_zero(prompts, outputs, cfg, _model())


def _two_running_at_block_boundary(tiers: OffloadConfig) -> Replica:
    """Block size 4, 4 blocks: two 4-token prompts fill 2 blocks each after 4 decodes; the next
    decode needs a third block each and the pool is empty."""
    replica = _replica([4, 4], [10, 10], tiers)
    replica.add_request(0)
    replica.add_request(1)
    for _ in range(5):
        replica.step()
        replica.check_invariants()
    assert replica.running.num_computed.tolist() == [8, 8]
    assert replica.pool.free == 0
    return replica


# ---- one preempted sequence, by hand ------------------------------------------------------------


@pytest.mark.parametrize("overlaps", [True, False])
def test_preempted_sequence_goes_to_the_tier_and_its_step_waits_for_the_reused_block(
    overlaps: bool,
) -> None:
    replica = _two_running_at_block_boundary(_tiers(HOST, overlaps=overlaps))
    offload = replica.offload
    assert offload is not None
    start = replica.now
    replica.step()  # request 1 is preempted: its 2 blocks of 8 tokens go to host
    replica.check_invariants()
    rec = replica.records
    assert rec.num_preemptions.tolist() == [0, 1]
    assert rec.recomputed_tokens.tolist() == [0, 0]  # kept, not dropped
    assert offload.written_bytes == [2 * BLOCK_BYTES]
    assert offload.stored[1].computed == 8
    write_s = 2 * BLOCK_BYTES / WRITE_BYTES_S  # 0.2 ms
    assert offload.stored[1].landed_s == pytest.approx(start + write_s, rel=1e-12)
    # Request 0 took one of the victim's blocks: the step lasts until that block (the first
    # half of the write) is out, beside the compute (overlap) or after it.
    compute_s = _decode_s([9])
    expected = max(compute_s, write_s / 2) if overlaps else compute_s + write_s / 2
    assert replica.now - start == pytest.approx(expected, rel=1e-12)


def test_reload_waits_off_the_batch_and_restores_the_computed_tokens() -> None:
    replica = _two_running_at_block_boundary(_tiers(HOST))
    offload = replica.offload
    assert offload is not None
    replica.step()
    landed = offload.stored[1].landed_s
    while 0 in replica.running.ids.tolist():  # request 0 runs to its end alone
        replica.step()
        replica.check_invariants()
        assert 1 not in replica.running.ids.tolist()
    admitted = replica.now
    replica.step()  # request 1 is admitted: 3 blocks, its read starts, it waits
    replica.check_invariants()
    assert len(replica.running) == 0 and [x.request_id for x in offload.loading] == [1]
    assert replica.queued == 1  # a reloading request counts as queued (the pools' queue signal)
    read_start = max(admitted, landed)
    ready = read_start + 2 * BLOCK_BYTES / READ_BYTES_S
    assert offload.loading[0].ready_s == pytest.approx(ready, rel=1e-12)
    assert offload.read_bytes == [2 * BLOCK_BYTES]
    assert replica.now == admitted  # nothing ran: the event loop waits for the read
    replica.now = offload.loading[0].ready_s
    replica.step()  # joins with 8 tokens of KV and decodes its 9th
    replica.check_invariants()
    assert replica.running.ids.tolist() == [1]
    assert replica.running.num_computed.tolist() == [9]
    assert offload.reloaded_tokens == 8
    assert offload.used_blocks == [0]


def test_preempted_sequence_is_recomputed_when_moving_it_is_slower() -> None:
    # 2 blocks out at 0.1 GB/s and back take 40 ms; a prefill of 8 tokens far less.
    slow = TierSpec("nvme", 100 * BLOCK_BYTES, read_bytes_s=1e8, write_bytes_s=1e8)
    replica = _two_running_at_block_boundary(_tiers(slow))
    replica.step()
    assert replica.records.recomputed_tokens.tolist() == [0, 8]
    assert replica.offload is not None and replica.offload.num_recompute_cheaper == 1
    assert replica.offload.written_bytes == [0.0]


def test_preempted_sequence_is_recomputed_when_no_tier_has_room() -> None:
    tiny = TierSpec("host", 1 * BLOCK_BYTES, READ_BYTES_S, WRITE_BYTES_S)
    replica = _two_running_at_block_boundary(_tiers(tiny))
    replica.step()
    assert replica.records.recomputed_tokens.tolist() == [0, 8]
    assert replica.offload is not None and replica.offload.num_not_offloaded == 1


def test_fastest_tier_with_room_first() -> None:
    slow = TierSpec("nvme", 100 * BLOCK_BYTES, read_bytes_s=13e9, write_bytes_s=6.6e9)
    full = TierSpec("host", 1 * BLOCK_BYTES, READ_BYTES_S, WRITE_BYTES_S)
    replica = _two_running_at_block_boundary(_tiers(slow, full))
    replica.step()
    offload = replica.offload
    assert offload is not None
    assert offload.written_bytes == [2 * BLOCK_BYTES, 0.0]  # host is faster but too small
    assert offload.stored[1].tier == 0


# ---- the link's arithmetic ----------------------------------------------------------------------


def test_writes_queue_first_come_first_served_and_unsafe_blocks_drain_linearly() -> None:
    # The cap holds writes to 0.5 GB/s; 8000-token sequences are worth moving at that rate.
    replica = _replica([4], [4], _tiers(HOST, cap=5e8))
    offload = replica.offload
    assert offload is not None
    replica.now = 1.0
    assert offload.store(7, computed=8000, blocks=10)
    assert offload.store(8, computed=8000, blocks=2)
    first_end = 1.0 + 10 * BLOCK_BYTES / 5e8  # 20 ms
    assert offload.stored[7].landed_s == pytest.approx(first_end, rel=1e-12)
    assert offload.stored[8].landed_s == pytest.approx(first_end + 2 * BLOCK_BYTES / 5e8)
    assert offload.unsafe_blocks(1.0) == 12
    assert offload.unsafe_blocks(1.01) == pytest.approx(7)  # half of the first write is out
    # 5 blocks handed out of 8 free: wait until only 8 are unsafe (4 of the first 10 written).
    assert offload.write_wait_s(1.0, 8) == pytest.approx(0.4 * (first_end - 1.0), rel=1e-12)
    assert offload.write_wait_s(1.0, 12) == 0.0
    assert offload.write_wait_s(1.0, 1) == pytest.approx(first_end + 0.5 * 0.004 - 1.0)


# ---- backpressure -------------------------------------------------------------------------------


def _running_with_backlog(write_bytes_s: float) -> Replica:
    """Request 0 decoding in a roomy pool, a 2-block write in the queue, request 1 queued."""
    slow = TierSpec("nvme", 100 * BLOCK_BYTES, read_bytes_s=1e9, write_bytes_s=write_bytes_s)
    replica = _replica([4, 4], [400, 4], _tiers(slow), num_blocks=200)
    replica.add_request(0)
    replica.step()
    offload = replica.offload
    assert offload is not None
    # Another request's KV on its way out (long enough to be worth moving at this rate).
    assert offload.store(99, computed=8000, blocks=2)
    replica.add_request(1)
    return replica


def test_saturated_link_delays_admission_not_running_steps() -> None:
    replica = _running_with_backlog(write_bytes_s=1e8)  # 20 ms of writes queued
    offload = replica.offload
    assert offload is not None
    drained = offload.write_free_s
    while 1 not in replica.running.ids.tolist():
        context = int(replica.running.num_computed[0]) + 1
        before = replica.now
        replica.step()
        replica.check_invariants()
        if 1 not in replica.running.ids.tolist():
            # The running request keeps its pace: each step is its decode step alone.
            assert replica.now - before == pytest.approx(_decode_s([context]), rel=1e-12)
    admitted = replica.records.first_scheduled_s[1]
    # Admitted at the first step whose start sees a backlog under one decode step.
    assert drained - admitted <= _decode_s([int(replica.running.num_computed[0])]) + 1e-12
    assert admitted > drained - 0.02  # held for most of the 20 ms
    assert offload.backpressure_s > 0.015


def test_idle_link_admits_at_once() -> None:
    replica = _running_with_backlog(write_bytes_s=1e12)  # the write is out in 2 us
    replica.step()
    assert 1 in replica.running.ids.tolist()
    assert replica.offload is not None and replica.offload.backpressure_s == 0.0


# ---- whole runs: invariants after every step, nothing lost, fast == exact ----------------------


def _workload(seed: int, n: int, rate: float) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        arrival_s=arrival_times_s(n, rate, 1.0, seed),
        input_tokens=rng.integers(1, 400, size=n).astype(np.int64),
        output_tokens=rng.integers(1, 400, size=n).astype(np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
        priorities=np.zeros(n, dtype=np.int64),
    )


def _config(
    wl: Workload, tiers: OffloadConfig | None, *, spare: int, exact: bool, dp: int = 1
) -> SimulationConfig:
    longest = int((wl.input_tokens + wl.output_tokens).max())
    sched = SchedulerConfig(
        max_num_batched_tokens=512,
        max_num_seqs=64,
        block_size=16,
        num_blocks=-(-longest // 16) + 3 + spare,
        kv_block_bytes=BLOCK_BYTES,
        kv_tiers=tiers,
    )
    return SimulationConfig(sched, longest, data_parallel_size=dp, exact=exact)


def _run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    result = Simulation(wl, cfg, _model()).run(check=lambda r: r.check_invariants())
    rec = result.records
    assert np.all(rec.status == COMPLETED), "a request was lost"
    np.testing.assert_array_equal(rec.output_tokens, wl.output_tokens)
    return result


TIER_CHOICES = [
    (TierSpec("host", 30 * BLOCK_BYTES, 64e9, 64e9),),
    (TierSpec("host", 8 * BLOCK_BYTES, 32e9, 16e9), TierSpec("nvme", 1e12, 13e9, 6.6e9)),
    (TierSpec("nvme", 1e12, 13e9, 3e9),),  # slow: backpressure, write waits, some recomputed
]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    tiers=st.sampled_from(TIER_CHOICES),
    cap=st.sampled_from([None, None, 1e9]),
    overlaps=st.booleans(),
    spare=st.integers(0, 40),
    rate=st.sampled_from([5.0, 50.0, math.inf]),
    dp=st.sampled_from([1, 1, 2]),
)
def test_fast_mode_equals_exact_mode_with_tiers(
    seed: int,
    tiers: tuple[TierSpec, ...],
    cap: float | None,
    overlaps: bool,
    spare: int,
    rate: float,
    dp: int,
) -> None:
    wl = _workload(seed, 30, rate)
    offload = _tiers(*tiers, cap=cap, overlaps=overlaps)
    fast = _run(wl, _config(wl, offload, spare=spare, exact=False, dp=dp))
    exact = _run(wl, _config(wl, offload, spare=spare, exact=True, dp=dp))
    f, e = fast.records, exact.records
    assert fast.num_steps == exact.num_steps
    np.testing.assert_array_equal(f.num_preemptions, e.num_preemptions)
    np.testing.assert_array_equal(f.recomputed_tokens, e.recomputed_tokens)
    for name in ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_allclose(getattr(f, name), getattr(e, name), rtol=1e-9, err_msg=name)
    assert fast.kv_tiers is not None and exact.kv_tiers is not None
    for key in ("num_offloaded", "num_reloaded", "recompute_avoided_tokens"):
        assert fast.kv_tiers[key] == exact.kv_tiers[key]
    for ft, et in zip(fast.kv_tiers["tiers"], exact.kv_tiers["tiers"], strict=True):
        assert ft["written_bytes"] == et["written_bytes"]


def test_tiers_keep_what_recompute_would_redo() -> None:
    wl = _workload(5, 60, math.inf)
    plain = _run(wl, _config(wl, None, spare=10, exact=False))
    tiers = _tiers(TierSpec("host", 1e12, 64e9, 64e9))
    kept = _run(wl, _config(wl, tiers, spare=10, exact=False))
    assert plain.kv_tiers is None
    assert int(plain.records.recomputed_tokens.sum()) > 0
    assert kept.kv_tiers is not None
    assert int(kept.records.recomputed_tokens.sum()) == 0  # room for every victim
    assert kept.kv_tiers["recompute_avoided_tokens"] > 0
    assert kept.kv_tiers["num_offloaded"] == int(kept.records.num_preemptions.sum())
    series = kept.kv_tiers["link_utilization_series"]
    assert len(series["time_s"]) == len(series["write"]) == len(series["read"])
    assert all(0 <= u <= 1 + 1e-9 for u in series["write"] + series["read"])
    assert 0 < kept.kv_tiers["write_link_utilization"] <= 1


def test_default_config_has_no_offload() -> None:
    wl = _workload(1, 10, 10.0)
    cfg = _config(wl, None, spare=40, exact=False)
    assert replace(cfg.scheduler).kv_tiers is None
    assert Simulation(wl, cfg, _model()).replicas[0].offload is None


# ---- prefix-cache entries ----------------------------------------------------------------------


def _cached_replica(hashes: tuple[tuple[int, ...], ...], prompts: list[int]) -> Replica:
    """Block size 4, entries of one block, 6 blocks: room for one 4-entry prompt and a bit."""
    replica = _replica(prompts, [1] * len(prompts), _tiers(HOST), num_blocks=6)
    cache = PrefixCache(hashes, entry_blocks=1)
    replica.pool.cache = cache
    replica.records = replace(
        replica.records,
        cached_tokens=np.zeros(len(prompts), dtype=np.int64),
        prefix_queried_tokens=np.zeros(len(prompts), dtype=np.int64),
    )
    replica.scheduler.records = replica.records
    assert replica.offload is not None
    replica.offload.attach_cache(cache, 4)
    return replica


def test_evicted_prefix_entries_go_down_and_come_back_on_a_hit() -> None:
    # Request 0 caches entries 1-4; request 1 (entries 5-8) evicts them; request 2 shares
    # request 0's first three entries.
    hashes = ((1, 2, 3, 4), (5, 6, 7, 8), (1, 2, 3, 9))
    replica = _cached_replica(hashes, [16, 16, 16])
    offload = replica.offload
    assert offload is not None
    for rid in range(3):
        replica.add_request(rid)
        while replica.has_work:
            replica.step()
            replica.check_invariants()
            if offload.loading and replica.now < offload.loading[0].ready_s:
                assert not len(replica.running)  # request 2 waits off the batch
                replica.now = offload.loading[0].ready_s
    # Request 1's 4 blocks took the 2 uncached free blocks and evicted the 2 oldest entries of
    # request 0 (freed tail first: 4, then 3); both went to host.
    assert offload.num_prefix_offloaded >= 2
    # Request 2 finds entries 1 and 2 in HBM and entry 3 in the tier: one entry read back.
    cached = replica.records.cached_tokens
    assert cached is not None and cached[2] == 8
    assert offload.num_prefix_reloaded == 1
    assert offload.reloaded_tokens == 4  # entry 3 was not prefilled again
    assert offload.read_bytes == [1 * BLOCK_BYTES]
    assert np.all(replica.records.status == COMPLETED)


def _shared_workload(seed: int, n: int, rate: float) -> Workload:
    """Prompts of 16-token entries: one of three 2-entry system prompts, then 0-4 own entries."""
    rng = np.random.default_rng(seed)
    hashes = []
    for i in range(n):
        system = int(rng.integers(0, 3))
        own = int(rng.integers(0, 5))
        hashes.append((100 * system, 100 * system + 1, *(1000 + 10 * i + j for j in range(own))))
    inputs = np.array([16 * len(h) for h in hashes], dtype=np.int64)
    return Workload(
        arrival_s=arrival_times_s(n, rate, 1.0, seed),
        input_tokens=inputs,
        output_tokens=rng.integers(1, 200, size=n).astype(np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
        priorities=np.zeros(n, dtype=np.int64),
        prefix_hashes=tuple(hashes),
        prefix_block_tokens=16,
    )


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    tiers=st.sampled_from(TIER_CHOICES),
    spare=st.integers(0, 30),
    rate=st.sampled_from([20.0, math.inf]),
)
def test_fast_mode_equals_exact_mode_with_tiers_and_prefix_caching(
    seed: int, tiers: tuple[TierSpec, ...], spare: int, rate: float
) -> None:
    wl = _shared_workload(seed, 40, rate)
    offload = _tiers(*tiers)
    runs = []
    for exact in (False, True):
        cfg = _config(wl, offload, spare=spare, exact=exact)
        cfg = replace(cfg, scheduler=replace(cfg.scheduler, enable_prefix_caching=True))
        runs.append(_run(wl, cfg))
    fast, exact_run = runs
    assert fast.num_steps == exact_run.num_steps
    f, e = fast.records, exact_run.records
    np.testing.assert_array_equal(f.cached_tokens, e.cached_tokens)
    for name in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(f, name), getattr(e, name), rtol=1e-9, err_msg=name)
    assert fast.kv_tiers is not None and exact_run.kv_tiers is not None
    for key in ("num_prefix_entries_offloaded", "num_prefix_entries_reloaded"):
        assert fast.kv_tiers[key] == exact_run.kv_tiers[key]
