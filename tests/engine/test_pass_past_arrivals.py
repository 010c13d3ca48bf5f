"""A doomed pass carried past the arrivals (``thrashrun._past_arrival``; issue 10, ``long10x``).

Where an arrival comes due inside a doomed-head cycle, the pass used to end at that cycle's
start and the loop ran the cycle on the general path (``step_then_chunks``, routing the
arrival between its steps), then a new pass began. The pass now takes that cycle itself, with
the general path's floats (each step timed by ``Replica.step_s`` of its shape, one ITL sample
of weight ``n`` a step, a new ``add_many`` batch where each pass would have begun), routes the
arrivals through the loop's intake and goes on. Each case runs with ``PASS_PAST_ARRIVALS`` on
and off (off: the loop's way, the reference) and must leave every record, the ITL histogram
and the KV trace the same, having carried passes past arrivals a given number of times.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from inferplan.engine import simulator as simulator_module
from inferplan.engine import thrashrun
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_chain import _assert_identical
from .test_chunk_run import ARRIVING
from .test_fast_equals_exact import Case, _config, _plan_and_model, _workload
from .test_thrash import THRASH, thrash_cases


def _run(case: Case, *, past: bool) -> tuple[SimulationResult, dict[str, int]]:
    """A fast run with passes carried past the arrivals (``past``) or ended at them; and how
    often a pass went past one: routing it at a cycle boundary (``due``) or taking the cycle
    it cuts (``cycle``)."""
    counts = {"due": 0, "cycle": 0, "declined": 0}
    real = thrashrun._past_arrival

    def counting(c: Any, plan: Any, next_arrival_s: float, *rest: Any) -> float | None:
        due = next_arrival_s <= c.now + simulator_module.same_time_s(c.now)
        bound = real(c, plan, next_arrival_s, *rest)
        counts["due" if due else "cycle" if bound is not None else "declined"] += 1
        return bound

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulator_module, "PASS_PAST_ARRIVALS", past)
        patch.setattr(thrashrun, "_past_arrival", counting)
        plan, model = _plan_and_model()
        wl = _workload(case)
        res = Simulation(wl, _config(case, wl, plan, exact=False), model).run()
    return res, counts


# Arrivals every few cycles: many cut a cycle, some fall on a cycle boundary.
BUSY = replace(THRASH, num_requests=60, max_output=1500, request_rate=2.0, spare_blocks=20)


@pure_only
@pytest.mark.parametrize(
    ("case", "least"),
    [
        (BUSY, 20),
        (replace(BUSY, seed=3, burstiness=0.3), 20),
        (replace(BUSY, max_num_batched_tokens=128, block_size=4), 20),
        (replace(THRASH, max_output=2000, spare_blocks=30), 5),
        (ARRIVING, 0),
    ],
)
def test_a_pass_past_the_arrivals_is_the_loops_run(case: Case, least: int) -> None:
    past, counts = _run(case, past=True)
    loop, never = _run(case, past=False)
    assert counts["cycle"] >= least
    assert sum(never.values()) == 0  # the reference never goes past an arrival
    _assert_identical(past, loop)


@pure_only
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=thrash_cases())
def test_passes_past_the_arrivals_bit_for_bit(case: Case) -> None:
    case = replace(case, max_concurrency=None)  # (a client limit: the loop routes, no intake)
    _assert_identical(_run(case, past=True)[0], _run(case, past=False)[0])


@pure_only
def test_an_arrival_due_at_a_boundary_and_the_request_rate_unbounded() -> None:
    # Arrivals at once (an infinite rate): every one due at the first boundary; and a rate
    # high enough that several come due inside one cycle.
    for rate in (math.inf, 40.0):
        case = replace(BUSY, request_rate=rate)
        _assert_identical(_run(case, past=True)[0], _run(case, past=False)[0])
