"""The lone new queue head admitted in the step's own frame with own blocks
(``implicit_step._admit_head`` on ``Scheduler.admission_path == OWN``, its cache writes in
``own_admission.admit_first``; branch ``vid20``, issue 10) against the same runs where it always
declines (``own_admission.admit_own``'s pass then ``_admit_one``): every record (the queried
tokens among them), the ITL histogram, the KV trace, the step count and the cache's counts and
runs must be the same, bit for bit, and the fast form must be taken."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from inferplan.engine import implicit_step, own_admission
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.schedulers import OWN
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords
from inferplan.metrics.steptrace import StepTrace
from inferplan.workload import Workload
from inferplan.workload.prefixes import with_own_blocks
from native_mode import pure_only

from .test_admit_head import _prompts, run_cases
from .test_head_fit import _FlatModel
from .test_own_blocks_equal import _config, _fingerprint, _plan_and_model, _workload


def _own(
    wl: Workload, block_size: int, spare: int, max_num_seqs: int = 24, budget: int = 96
) -> tuple[Workload, SimulationConfig]:
    """``wl`` with own blocks, on ``test_own_blocks_equal``'s configuration (prefix caching on)."""
    cfg: SimulationConfig = _config(wl, block_size, spare, 1, "fcfs", False)
    sched = replace(cfg.scheduler, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    return with_own_blocks(wl), replace(cfg, scheduler=sched)


def _cache_state(res: SimulationResult) -> list[Any]:
    """The own-block caches' counts and freed runs at the end."""
    state: list[Any] = []
    for cache in res.prefix_caches:
        assert isinstance(cache, OwnBlocks)
        runs = list(cache.runs.items())
        state.append([cache.cached_tokens, cache.queried_tokens, cache.lru_blocks, runs])
    return state


def _run(
    wl: Workload, cfg: SimulationConfig, *, fast: bool, checked: bool = False
) -> tuple[SimulationResult, int]:
    """The run with ``_admit_head`` (and how often ``admit_first`` admitted), or with
    ``_admit_head`` declining always. ``checked``: the invariants after every advance."""
    admit_first = own_admission.admit_first
    taken = [0]

    def counting(*args: Any) -> bool:
        done = admit_first(*args)
        taken[0] += done
        return done

    def check(r: Replica) -> None:
        r.check_invariants()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit_step, "admit_first", counting)
        if not fast:
            patch.setattr(implicit_step, "_admit_head", lambda *args: False)
        sim = Simulation(wl, cfg, _plan_and_model()[1])
        assert sim.replicas[0].scheduler.admission_path == OWN
        res = sim.run(check=check if checked else None)
    return res, taken[0]


def _assert_equal(
    wl: Workload, cfg: SimulationConfig, *, checked: bool = False
) -> tuple[SimulationResult, int]:
    fast, taken = _run(wl, cfg, fast=True, checked=checked)
    general, never = _run(wl, cfg, fast=False, checked=checked)
    assert never == 0
    assert _fingerprint(fast) == _fingerprint(general)
    assert _cache_state(fast) == _cache_state(general)
    return fast, taken


@pure_only
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**run_cases(160))
def test_runs_equal_the_own_block_pass(
    n: int,
    max_input: int,
    max_output: int,
    rate: float,
    seed: int,
    block_size: int,
    spare: int,
    max_num_seqs: int,
) -> None:
    """Prompts beyond the 96-token budget, pools small enough to preempt (heads back with a
    run of their own: the fast form declines), ``max_num_seqs`` 1, 2 and 24, bursts."""
    wl, cfg = _own(_workload(n, max_input, max_output, rate, seed), block_size, spare, max_num_seqs)
    _assert_equal(wl, cfg)


@pure_only
@pytest.mark.parametrize("checked", [False, True])
def test_below_capacity_admits_in_the_step(checked: bool) -> None:
    """Arrivals apart on a roomy pool: most admissions take the fast form, and the run is
    the own-block pass's (with the invariants after every advance too)."""
    wl, cfg = _own(_workload(40, 90, 120, 4.0, 3), 16, 200)
    res, taken = _assert_equal(wl, cfg, checked=checked)
    assert taken > 25
    assert int(res.records.num_preemptions.sum()) == 0


@pure_only
@pytest.mark.parametrize("spare", [4, 10, 40])
def test_freed_runs_evicted_by_the_decode_and_the_row(spare: int) -> None:
    """Prompts of 30-90 tokens, 8-40 outputs, 0.1 s apart, on 4-token blocks with little spare
    KV: the finished requests' runs fill the cached-free blocks, and nearly every fast
    admission's decode blocks and row blocks evict from them (both evictions, in order), with
    preemptions at 4 and 10 spare blocks."""
    rng = np.random.default_rng(23)
    wl = _prompts(rng.integers(30, 90, 60).tolist(), rng.integers(8, 40, 60).tolist(), 0.1)
    wl, cfg = _own(wl, 4, spare)
    res, taken = _assert_equal(wl, cfg)
    assert taken > 40
    cache = res.prefix_caches[0]
    assert cache is not None and cache.lru_blocks > 0 and cache.queried_tokens > 0


@pure_only
def test_above_capacity_preempted_heads_equal() -> None:
    """A small pool under a burst: preempted requests come back with their runs (the own-block
    pass's hits) beside new heads admitted in the fast form."""
    wl, cfg = _own(_workload(40, 90, 200, 4.0, 7), 4, 20)
    res, taken = _assert_equal(wl, cfg)
    assert int(res.records.num_preemptions.sum()) > 20 and taken > 10
    assert res.records.cached_tokens is not None and int(res.records.cached_tokens.sum()) > 0


# ---- one step by hand ----------------------------------------------------------------------------


def _one_step(num_blocks: int, *, head_run: int = 0, head_entries: int = 7) -> Replica:
    """Two rows of 8 computed tokens in 4-token blocks (one-block entries) that cross into a
    new block each at the next step; the freed runs of requests 2 (4 entries) and 3 (3),
    least recently freed first; request 4 (an 8-token prompt, 2 blocks, its own entries
    ``head_entries``) queued alone, with a run of ``head_run`` entries (0: none)."""
    prompts, outputs = [8, 8, 16, 12, 8], [20] * 5
    cfg = SchedulerConfig(
        max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_blocks=num_blocks,
        enable_prefix_caching=True,
    )  # fmt: skip
    records = RequestRecords.empty(5)
    records.input_tokens[:] = prompts
    assert records.requested_output_tokens is not None
    records.requested_output_tokens[:] = outputs
    zeros = np.zeros(5, dtype=np.int64)
    records = replace(records, cached_tokens=zeros, prefix_queried_tokens=zeros.copy())
    cache = OwnBlocks(np.array([7, 7, 9, 8, head_entries]), 1)
    r = Replica(
        0, cfg, _FlatModel(), records, np.array(prompts, dtype=np.int64),
        WaitingQueue("fcfs", None), ItlHistogram(), StepTrace(num_blocks), cache,
    )  # fmt: skip
    r.scheduler.settle_admission_path()
    for rid, entries in ((4, head_run), (2, 4), (3, 3)):
        if entries:
            cache.register(rid, entries)
            cache.release(rid)
    for rid in (0, 1):
        r.running.append(rid, 8, 9, 1, 20, 2, 0.0)
        cache.register(rid, 2)
    r.pool.free = num_blocks - 4
    r.waiting.push(4, num_tokens=8)
    return r


def _after_step(r: Replica, *, fast: bool) -> tuple[list[Any], int]:
    """What one joined admission step leaves, and whether ``admit_first`` took it."""
    taken = [0]
    admit_first = own_admission.admit_first

    def counting(*args: Any) -> bool:
        done = admit_first(*args)
        taken[0] += done
        return done

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit_step, "admit_first", counting)
        if not fast:
            patch.setattr(implicit_step, "_admit_head", lambda *args: False)
        assert implicit_step.implicit_decode_and_admit_step(r)
    cache, run, rec = r.pool.cache, r.running, r.records
    assert isinstance(cache, OwnBlocks)
    state = [
        r.pool.free_blocks,
        cache.lru_blocks,
        list(cache.runs.items()),
        dict(cache.held),
        (cache.cached_tokens, cache.queried_tokens),
        np.asarray(rec.cached_tokens).tolist(),
        np.asarray(rec.prefix_queried_tokens).tolist(),
        [run.stored_row(row) for row in range(len(run))],
        [repr(x) for x in (*rec.first_scheduled_s.tolist(), *rec.first_token_s.tolist())],
        (repr(r.now), r.num_steps, len(r.waiting)),
    ]
    return state, taken[0]


@pure_only
@pytest.mark.parametrize("num_blocks", [9, 10, 11, 12, 16])
def test_one_step_equals_the_own_block_pass(num_blocks: int) -> None:
    """From 5 free blocks (all cached-free) to 12 (7 cached-free): the decode's 2 blocks and
    the head's 2 evict from the front runs or not, as the general form's two evictions do."""
    fast, taken = _after_step(_one_step(num_blocks), fast=True)
    general, never = _after_step(_one_step(num_blocks), fast=False)
    assert (taken, never) == (1, 0)
    assert fast == general


@pure_only
def test_one_step_by_hand() -> None:
    """12 blocks: 4 held by the rows, 8 free of which 7 cached-free (runs 4 and 3). The step
    takes 2 blocks for the decode and 2 for the head, leaving 4 free: 3 entries go from the
    front run. The head's computed entries are its prompt's 2, capped at its own 1."""
    state, taken = _after_step(_one_step(12, head_entries=1), fast=True)
    assert taken == 1
    free, lru, runs, held, counts, cached, queried, rows = state[:8]
    assert (free, lru, runs) == (4, 4, [(2, 1), (3, 3)])
    assert held == {0: 2, 1: 2, 4: 1}
    assert counts == (0, 8) and cached == [0] * 5 and queried == [0, 0, 0, 0, 8]
    assert [row[:3] for row in rows] == [[0, 9, 10], [1, 9, 10], [4, 8, 9]]  # id, computed, tokens


@pure_only
def test_a_head_with_a_run_takes_the_own_block_pass() -> None:
    """A new request whose run is cached (preempted before its first token) hits it: the fast
    form declines, and the general form maps the run back."""
    fast, taken = _after_step(_one_step(16, head_run=1), fast=True)
    general, _ = _after_step(_one_step(16, head_run=1), fast=False)
    assert taken == 0
    assert fast == general
    assert fast[5] == [0, 0, 0, 0, 4]  # its hit: one 4-token entry
