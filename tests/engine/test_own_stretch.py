"""Fast mode with own blocks (``engine/ownstretch.py``, ``engine/ownsteps.py``) reproduces exact
mode: the same schedule, every time to relative 1e-9 (DESIGN §4), on overloaded workloads where
preempted requests re-hit their own blocks; a stretch runs across the block crossings that
shrink the queue head's hit, up to the step that admits it, and a closed form that ignored the
head's admission there would move admissions (fails here)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from inferplan.engine import ownstretch, stretch
from inferplan.engine import simulator as simulator_module
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.workload import Workload
from inferplan.workload.prefixes import with_own_blocks
from native_mode import pure_only

from .replica_helpers import replica_at_zero
from .test_fast_equals_exact import (
    BASE,
    Case,
    _assert_same,
    _config,
    _plan_and_model,
    _workload,
    cases,
)


def _own_config(case: Case, wl: Workload, *, exact: bool) -> SimulationConfig:
    cfg = _config(case, wl, _plan_and_model()[0], exact=exact)
    return replace(cfg, scheduler=replace(cfg.scheduler, enable_prefix_caching=True))


def _run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    return Simulation(wl, cfg, _plan_and_model()[1]).run(check=lambda r: r.check_invariants())


def _check(case: Case) -> SimulationResult:
    wl = with_own_blocks(_workload(case))
    fast = _run(wl, _own_config(case, wl, exact=False))
    exact = _run(wl, _own_config(case, wl, exact=True))
    assert fast.prefix_caches and type(fast.prefix_caches[0]).__name__ == "OwnBlocks"
    _assert_same(fast, exact)
    return fast


@st.composite
def own_cases(draw: st.DrawFn) -> Case:
    """vLLM v1 with recompute preemption on tight pools, arrivals from all at once to
    moderate, every queue policy, DP 1-2, block sizes 1-32."""
    base = draw(cases(data_parallel_sizes=(1, 1, 2)))
    return replace(
        base,
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        spare_blocks=draw(st.integers(0, 40)),
        request_rate=draw(st.sampled_from([math.inf, 200.0, 40.0, 8.0])),
        max_num_batched_tokens=draw(st.sampled_from([64, 96, 256, 2048])),
        preemption_mode="recompute",
        scheduler="continuous",
        kv_groups=None,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=own_cases())
def test_fast_mode_equals_exact_mode_with_own_blocks(case: Case) -> None:
    _check(case)


OVERLOADED = replace(
    BASE,
    max_input=300,
    request_rate=math.inf,
    seed=11,
    spare_blocks=30,
    max_num_batched_tokens=96,
)


def _no_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stretches and preemption steps one at a time (``engine/chain.py`` off)."""
    monkeypatch.setattr(simulator_module, "preemption_chain", lambda r, t, **_: False)


def _advances(case: Case, monkeypatch: pytest.MonkeyPatch) -> tuple[SimulationResult, int]:
    """The fast run without chains and how many advances of a replica it took."""
    _no_chains(monkeypatch)
    wl = with_own_blocks(_workload(case))
    cfg = _own_config(case, wl, exact=False)
    calls = [0]
    # A plain replica's advances are ``_advance_plain``'s (``Simulation._advance`` calls it
    # directly), the others ``_advance_once``'s: each advance is counted once.
    for name in ("_advance_once", "_advance_plain"):
        original = getattr(Simulation, name)

        def counted(
            self: Simulation, replica: Replica, next_arrival_s: float, original: Any = original
        ) -> None:
            calls[0] += 1
            original(self, replica, next_arrival_s)

        monkeypatch.setattr(Simulation, name, counted)
    return _run(wl, cfg), calls[0]


@pure_only
def test_stretches_run_across_the_head_hits_crossings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The overloaded case preempts and re-hits, and fast == exact; with the head's hit ending
    every stretch at a crossing (the hashed cache's bound) it takes far more advances."""
    fast = _check(OVERLOADED)
    assert int(fast.records.num_preemptions.sum()) > 50
    assert fast.records.cached_tokens is not None and int(fast.records.cached_tokens.sum()) > 0
    _, closed = _advances(OVERLOADED, monkeypatch)
    monkeypatch.setattr(stretch, "own_block_stretch_steps", lambda r, k: None)
    stepwise, crossings = _advances(OVERLOADED, monkeypatch)
    assert crossings > 2 * closed
    _assert_same(stepwise, fast)


@pure_only
def test_ignoring_the_heads_admission_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stretch that ran on past the step whose waiting pass admits the head (the head's
    shrinking hit not evaluated) moves admissions: fast != exact."""
    # One-token blocks: an entry is 16 KV blocks, so an evicted entry lowers the head's need
    # by 16 blocks where the step's crossings took fewer, and the head fits mid-stretch.
    case = replace(OVERLOADED, num_requests=40, block_size=1, seed=0, max_num_batched_tokens=64)
    _check(case)
    _no_chains(monkeypatch)
    _check(case)
    monkeypatch.setattr(stretch, "own_block_stretch_steps", lambda r, k: k)
    with pytest.raises(AssertionError):
        _check(case)


@settings(max_examples=200, deadline=None)
@given(
    block=st.sampled_from([1, 2, 4, 16]),
    entry_blocks=st.sampled_from([1, 2, 4, 16]),
    computed=st.lists(st.integers(1, 300), min_size=1, max_size=12),
    runs_before=st.lists(st.integers(1, 6), max_size=4),
    head_run=st.integers(1, 40),
    extra_tokens=st.integers(1, 400),
    spare=st.integers(0, 30),
    budget_over=st.integers(1, 300),
    k=st.integers(1, 400),
    scalar_steps=st.sampled_from([0, ownstretch.SCALAR_STEPS, 10**9]),
)
def test_steps_before_the_head_joins_match_a_step_by_step_count(
    block: int,
    entry_blocks: int,
    computed: list[int],
    runs_before: list[int],
    head_run: int,
    extra_tokens: int,
    spare: int,
    budget_over: int,
    k: int,
    scalar_steps: int,
) -> None:
    """``own_block_stretch_steps`` against running the decode steps one at a time: each
    step's crossings taken from the pool (evicting the LRU list's front), then vLLM's
    admission test (``Scheduler.head_chunk``) with the head's hit as it stands; its steps
    evaluated in Python ints (``scalar_steps`` 10**9), in one vector pass (0), or as the
    module picks."""
    entry_tokens = entry_blocks * block
    n = len(computed)
    head, first_run = n + len(runs_before), n
    head_tokens = head_run * entry_tokens + extra_tokens
    prompts = [1] * n + [entry_tokens * e for e in runs_before] + [head_tokens - 1]
    held = [-(-c // block) for c in computed]
    cached = (sum(runs_before) + head_run) * entry_blocks
    cfg = SchedulerConfig(
        max_num_batched_tokens=n + budget_over,
        max_num_seqs=1024,
        block_size=block,
        num_blocks=sum(held) + cached + spare,
        enable_prefix_caching=True,
    )
    outputs = [10**6] * len(prompts)
    r = replica_at_zero(prompts, outputs, cfg, _plan_and_model()[1])
    tokens = np.array(prompts) + np.array(outputs)
    cache = OwnBlocks(tokens // entry_tokens, entry_blocks)
    r.pool.cache = cache
    for row, c in enumerate(computed):
        r.running.append(row, c, c + 1, c, 10**6, held[row], 0.0)
    for i, entries in enumerate([*runs_before, head_run]):
        cache.runs[first_run + i] = entries
    cache.lru_blocks = cached
    r.pool.free = cfg.num_blocks - sum(held)
    r.waiting.push(head, num_tokens=head_tokens)
    assume(not r.scheduler.head_can_join())  # a stretch starts only then (``can_stretch``)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ownstretch, "SCALAR_STEPS", scalar_steps)
        steps = ownstretch.own_block_stretch_steps(r, k)
    assert steps is not None
    leftover = cfg.max_num_batched_tokens - n
    expected = last = k  # the last step the pool lasts (a stretch ends where it runs out)
    rows = np.array(computed)
    for j in range(1, k + 1):
        crossings = int(np.count_nonzero((rows + j - 1) % block == 0))
        if crossings > r.pool.free:
            last = j - 1
            break
        r.pool.free -= crossings
        if r.scheduler.head_chunk(leftover, r.pool.free) is not None:
            expected = j - 1
            break
    assert min(steps, last) == min(expected, last)


@settings(deadline=None)  # a loaded machine takes a case past hypothesis' 200 ms
@given(
    computed=st.lists(st.integers(0, 200), min_size=1, max_size=12),
    block=st.sampled_from([1, 2, 4, 16]),
    crossings=st.integers(1, 300),
)
def test_first_step_with_counts_crossings(computed: list[int], block: int, crossings: int) -> None:
    """``_first_step_with`` against counting each row's block crossings step by step."""
    c = np.array(computed, dtype=np.int64)
    first_steps = (-c) % block + 1
    at_most = np.cumsum(np.bincount(first_steps, minlength=block + 1)).tolist()
    n = len(c)
    step, total = 0, 0
    while total < crossings:
        step += 1
        total += int(np.count_nonzero((c + step - 1) % block == 0))
    assert ownstretch._first_step_with(crossings, n, block, at_most) == step
    q, u = divmod(step, block)
    assert n * q + int(at_most[u]) == total  # C(j) in closed form


@settings(max_examples=150, deadline=None)
@given(
    computed=st.lists(st.integers(0, 200), min_size=1, max_size=12),
    block=st.sampled_from([1, 2, 4, 16]),
    e=st.sampled_from([1, 2, 4]),
    cached_short=st.integers(0, 40),
    head=st.tuples(
        st.integers(1, 30),
        st.integers(0, 30),
        st.integers(0, 40),
        st.integers(1, 400),
        st.integers(1, 300),
    ),
    j_from=st.integers(1, 40),
    length=st.integers(-1, 20),
)
def test_the_scalar_steps_equal_the_vector_pass(
    computed: list[int],
    block: int,
    e: int,
    cached_short: int,
    head: tuple[int, int, int, int, int],
    j_from: int,
    length: int,
) -> None:
    """``_first_admitting`` (Python ints, a chain's few steps) against
    ``_first_admitting_vector`` (the vector pass) for every free pool from 0 to 160 blocks
    (``cached_short``, one more and three more fewer of them cached-free), any head (its run,
    the entries before it, the lookup's cap, its tokens, the budget) and steps, reachable or
    not: the same first admitting step (the cap, the budget's cut, the fit's bound and the
    crossings as the vector pass has them; ``test_the_scalar_steps_by_hand`` has the
    entries' ceiling and the lost entries' clip)."""
    first_steps = (-np.array(computed, dtype=np.int64)) % block + 1
    at_most = np.cumsum(np.bincount(first_steps, minlength=block + 1)).tolist()
    n, j_to = len(computed), j_from + length
    steps = range(j_from, j_to + 1)
    scalar_steps = [1, *steps] if j_from > 1 else steps
    for free0 in range(161):
        for short in (cached_short, cached_short + 1, cached_short + 3):
            pool = (free0, max(free0 - short, 0))
            scalar = ownstretch._first_admitting(scalar_steps, pool, n, e, at_most, head)
            vector = ownstretch._first_admitting_vector(j_from, j_to, pool, n, e, at_most, head)
            assert scalar == vector


@pytest.mark.parametrize(
    ("e", "run0", "free0", "lru0", "expected"),
    [
        (2, 5, 20, 20, 1),  # step 1 evicts ceil(1 / 2) = 1 entry: hit 8, 18 blocks <= 19 free
        (2, 5, 19, 19, 1),  # 18 <= 18
        (2, 5, 18, 18, None),  # the hit shrinks by 2 tokens every 2 steps, the pool by 2
        (1, 1, 10, 11, None),  # the run lost whole (a hit of 0, never below): 10 > 10 - j
        (1, 1, 11, 12, 1),  # 10 <= 10
    ],
)
def test_the_scalar_steps_by_hand(
    e: int, run0: int, free0: int, lru0: int, expected: int | None
) -> None:
    """One row on one-token blocks (one crossing a step: ``free0 - j`` free at step ``j``,
    ``ceil((lru0 - free0 + j) / e)`` entries evicted, all from the head's run), the head
    with 100 tokens under a 10-token budget (its chunk ends at ``hit + 10``), steps 1-5:
    both forms give the first step whose hit plus chunk fit."""
    head = (run0, 0, 40, 100, 10)
    at_most = [0, 1]
    scalar = ownstretch._first_admitting(range(1, 6), (free0, lru0), 1, e, at_most, head)
    vector = ownstretch._first_admitting_vector(1, 5, (free0, lru0), 1, e, at_most, head)
    assert scalar == vector == expected
