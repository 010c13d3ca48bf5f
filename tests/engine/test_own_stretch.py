"""Fast mode with own blocks (``engine/ownstretch.py``, ``engine/ownsteps.py``) reproduces exact
mode: the same schedule, every time to relative 1e-9 (DESIGN §4), on overloaded workloads where
preempted requests re-hit their own blocks; a stretch runs across the block crossings that
shrink the queue head's hit, up to the step that admits it, and a closed form that ignored the
head's admission there would move admissions (fails here)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import ownstretch, stretch
from inferplan.engine.replica import Replica
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.workload import Workload
from inferplan.workload.prefixes import with_own_blocks

from .test_fast_equals_exact import Case, _assert_same, _config, _plan_and_model, _workload, cases


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


OVERLOADED = Case(
    num_requests=60,
    max_input=300,
    max_output=400,
    request_rate=math.inf,
    burstiness=1.0,
    seed=11,
    block_size=16,
    spare_blocks=30,
    max_num_seqs=1024,
    max_num_batched_tokens=96,
    preemption_mode="recompute",
    scheduler="continuous",
    data_parallel_size=1,
    router="round_robin",
    scheduling_policy="fcfs",
    max_concurrency=None,
    reject_some=False,
)


def _advances(case: Case, monkeypatch: pytest.MonkeyPatch) -> tuple[SimulationResult, int]:
    """The fast run and how many advances of a replica it took."""
    wl = with_own_blocks(_workload(case))
    cfg = _own_config(case, wl, exact=False)
    calls = [0]
    original = Simulation._advance_once

    def counted(self: Simulation, replica: Replica, next_arrival_s: float) -> None:
        calls[0] += 1
        original(self, replica, next_arrival_s)

    monkeypatch.setattr(Simulation, "_advance_once", counted)
    return _run(wl, cfg), calls[0]


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


def test_ignoring_the_heads_admission_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stretch that ran on past the step whose waiting pass admits the head (the head's
    shrinking hit not evaluated) moves admissions: fast != exact."""
    # One-token blocks: an entry is 16 KV blocks, so an evicted entry lowers the head's need
    # by 16 blocks where the step's crossings took fewer, and the head fits mid-stretch.
    case = replace(OVERLOADED, num_requests=40, block_size=1, seed=0, max_num_batched_tokens=64)
    _check(case)
    monkeypatch.setattr(stretch, "own_block_stretch_steps", lambda r, k: k)
    with pytest.raises(AssertionError):
        _check(case)


@given(
    computed=st.lists(st.integers(0, 200), min_size=1, max_size=12),
    block=st.sampled_from([1, 2, 4, 16]),
    crossings=st.integers(1, 300),
)
def test_first_step_with_counts_crossings(computed: list[int], block: int, crossings: int) -> None:
    """``_first_step_with`` against counting each row's block crossings step by step."""
    c = np.array(computed, dtype=np.int64)
    first_steps = (-c) % block + 1
    at_most = np.cumsum(np.bincount(first_steps, minlength=block + 1))
    n = len(c)
    step, total = 0, 0
    while total < crossings:
        step += 1
        total += int(np.count_nonzero((c + step - 1) % block == 0))
    assert ownstretch._first_step_with(crossings, n, block, at_most) == step
    q, u = divmod(step, block)
    assert n * q + int(at_most[u]) == total  # C(j) in closed form
