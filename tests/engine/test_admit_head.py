"""The lone queue head admitted in the step's own frame (``implicit_step._admit_head``, branch
``vid19``, issue 10) against the general form (``Scheduler.admit_waiting`` then ``_admit_one``):
whole runs on the plain path (no prefix cache) must leave every record, the ITL histogram, the
KV trace and the step count the same, bit for bit, and the fast form must be taken."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import implicit_step
from inferplan.engine.replica import Replica
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.workload import Workload
from native_mode import pure_only

from .test_own_blocks_equal import _config, _fingerprint, _plan_and_model, _workload


def _plain(wl: Workload, block_size: int, spare: int, max_num_seqs: int) -> SimulationConfig:
    cfg: SimulationConfig = _config(wl, block_size, spare, 1, "fcfs", False)
    sched = replace(cfg.scheduler, enable_prefix_caching=False, max_num_seqs=max_num_seqs)
    return replace(cfg, scheduler=sched)


def _run(wl: Workload, cfg: SimulationConfig, *, fast: bool) -> tuple[SimulationResult, int]:
    """The run with ``_admit_head`` (and how often it admitted), or with it declining always."""
    admit_head = implicit_step._admit_head
    taken = [0]

    def counting(r: Replica, n: int, new_blocks: int) -> bool:
        done = admit_head(r, n, new_blocks)
        taken[0] += done
        return done

    def check(r: Replica) -> None:
        r.check_invariants()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit_step, "_admit_head", counting if fast else lambda *args: False)
        res = Simulation(wl, cfg, _plan_and_model()[1]).run(check=check)
    return res, taken[0]


def _assert_equal(wl: Workload, cfg: SimulationConfig) -> tuple[SimulationResult, int]:
    fast, taken = _run(wl, cfg, fast=True)
    general, never = _run(wl, cfg, fast=False)
    assert never == 0
    assert _fingerprint(fast) == _fingerprint(general)
    return fast, taken


@pure_only
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(10, 40),
    max_input=st.integers(8, 200),
    max_output=st.integers(1, 120),
    rate=st.sampled_from([math.inf, 40.0, 8.0, 2.0]),
    seed=st.integers(0, 10_000),
    block_size=st.sampled_from([1, 4, 16]),
    spare=st.integers(0, 60),
    max_num_seqs=st.sampled_from([1, 2, 24]),
)
def test_runs_equal_the_general_form(
    n: int,
    max_input: int,
    max_output: int,
    rate: float,
    seed: int,
    block_size: int,
    spare: int,
    max_num_seqs: int,
) -> None:
    """Prompts beyond the 96-token budget, a pool small enough to preempt (resumed heads),
    ``max_num_seqs`` of 1 and 2 (no room), bursts that queue several: each declines or admits
    as the general pass does."""
    wl = _workload(n, max_input, max_output, rate, seed)
    _assert_equal(wl, _plain(wl, block_size, spare, max_num_seqs))


@pure_only
def test_below_capacity_admits_in_the_step() -> None:
    """Arrivals apart on a roomy pool, prompts within the budget: most steps that admit take
    the fast form, and the run is the general one's."""
    wl = _workload(40, 90, 120, 4.0, 3)
    res, taken = _assert_equal(wl, _plain(wl, 16, 200, 24))
    assert taken > 25
    assert int(res.records.num_preemptions.sum()) == 0


@pure_only
def test_above_capacity_preempted_heads_equal() -> None:
    """A small pool under a burst: preempted requests come back (the general form's resumed
    rows) beside new heads admitted in the fast form."""
    wl = _workload(40, 90, 200, 4.0, 7)
    res, taken = _assert_equal(wl, _plain(wl, 4, 20, 24))
    assert int(res.records.num_preemptions.sum()) > 40 and taken > 15
