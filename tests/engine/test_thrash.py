"""Doomed re-admission cycles (``engine/thrash.py``): fast mode == exact mode where a full pool
makes vLLM v1 admit a long queue head, prefill it chunk by chunk and preempt it again.

The cases are built to thrash: prompts longer than the token budget (so the head needs several
chunks), long outputs and a pool a few blocks above one longest request; each test also checks
that the closed-form cycles ran, so a condition that stops matching cannot pass silently.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import simulator as simulator_module
from inferplan.engine import thrash as thrash_module
from inferplan.engine import thrashrun
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.engine.thrash import doomed_cycles
from native_mode import pure_only

from .test_chain import _assert_identical
from .test_fast_equals_exact import BASE, Case, _check_case, _config, _plan_and_model, _workload
from .thrash_reference import next_cycle


@pytest.fixture
def cycles_taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of ``doomed_cycles`` that ran cycles."""
    taken: list[int] = []

    def counting(replica, next_arrival_s, *intake):  # type: ignore[no-untyped-def]
        ran = doomed_cycles(replica, next_arrival_s, *intake)
        taken.append(int(ran))
        return ran

    monkeypatch.setattr(simulator_module, "doomed_cycles", counting)
    return taken


THRASH = replace(
    BASE,
    num_requests=30,
    max_input=900,
    max_output=600,
    request_rate=20.0,
    block_size=16,
    spare_blocks=6,
    max_num_batched_tokens=256,
)


@pure_only
def test_long_heads_thrash_and_fast_equals_exact(cycles_taken: list[int]) -> None:
    fast = _check_case(THRASH)
    assert fast.records.num_preemptions.sum() > 50
    assert sum(cycles_taken) > 0


@st.composite
def thrash_cases(draw: st.DrawFn) -> Case:
    return replace(
        THRASH,
        num_requests=draw(st.integers(10, 40)),
        max_input=draw(st.integers(100, 1200)),
        max_output=draw(st.integers(50, 800)),
        request_rate=draw(st.sampled_from([2.0, 20.0, 200.0, math.inf])),
        burstiness=draw(st.sampled_from([0.3, 1.0, 4.0])),
        seed=draw(st.integers(0, 2**16)),
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        spare_blocks=draw(st.integers(0, 30)),
        max_num_seqs=draw(st.sampled_from([3, 8, 1024])),
        max_num_batched_tokens=draw(st.sampled_from([64, 128, 256, 512])),
        data_parallel_size=draw(st.sampled_from([1, 1, 2])),
        router=draw(st.sampled_from(["round_robin", "least_outstanding"])),
        max_concurrency=draw(st.sampled_from([None, None, 4])),
        reject_some=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=thrash_cases())
def test_fast_equals_exact_when_heads_thrash(case: Case) -> None:
    _check_case(case)


def _fast(case: Case, *, runs: bool) -> tuple[SimulationResult, int]:
    """A fast run with the cycles planned in segments (and how many passes took cycles), or
    one cycle at a time (``thrash_reference.next_cycle``)."""
    taken = [0]

    def one_at_a_time(cycles, next_arrival_s, same_time_s):  # type: ignore[no-untyped-def]
        while next_cycle(cycles, next_arrival_s, same_time_s):
            pass

    def counting(cycles, *args):  # type: ignore[no-untyped-def]
        (thrashrun.take_cycles if runs else one_at_a_time)(cycles, *args)
        taken[0] += cycles.num_cycles >= 2
        return None

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(thrash_module, "take_cycles", counting)
        plan, model = _plan_and_model()
        wl = _workload(case)
        res = Simulation(wl, _config(case, wl, plan, exact=False), model).run(
            check=lambda replica: replica.check_invariants()
        )
    return res, taken[0]


@pure_only
def test_runs_of_cycles_are_one_cycle_at_a_time_bit_for_bit() -> None:
    """Cycles planned in segments (``engine/thrashrun.py``) ran and leave every record, the ITL
    histogram and the KV trace as one cycle at a time does."""
    case = replace(THRASH, max_output=2000, spare_blocks=30)
    with_runs, num_runs = _fast(case, runs=True)
    alone, _ = _fast(case, runs=False)
    assert num_runs > 5
    _assert_identical(with_runs, alone)


@pure_only
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=thrash_cases())
def test_runs_of_cycles_equal_one_cycle_at_a_time(case: Case) -> None:
    _assert_identical(_fast(case, runs=True)[0], _fast(case, runs=False)[0])
