"""Replicas simulated apart (engine/apart.py) give the interleaved run byte for byte.

Every record column, the ITL histogram's counts and moments (order-dependent floats), the KV
traces and the step counts must equal ``Simulation.run``'s, in this process and in worker
processes; where the event loop would have routed differently (``loop_order``) the run falls
back to the interleaved one.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

import numpy as np
from hypothesis import HealthCheck, given, settings

from inferplan.engine import apart
from inferplan.engine.apart import run_apart, runs_apart, try_apart
from inferplan.engine.loop_order import AdvanceLog, loop_order
from inferplan.engine.simulator import Simulation, SimulationResult, same_time_s
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.itl_log import replay_into

from .test_fast_equals_exact import BASE, Case, _config, _plan_and_model, _workload, cases

DP_CASE = Case(
    **{
        **BASE.__dict__,
        "num_requests": 240,
        "request_rate": 60.0,
        "spare_blocks": None,
        "data_parallel_size": 4,
        "reject_some": True,
    }
)


def _sim(case: Case) -> Simulation:
    plan, model = _plan_and_model()
    wl = _workload(case)
    return Simulation(wl, _config(case, wl, plan, exact=False), model)


def _assert_identical(a: SimulationResult, b: SimulationResult) -> None:
    for spec in fields(a.records):
        x, y = getattr(a.records, spec.name), getattr(b.records, spec.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), spec.name
        else:
            assert x == y, spec.name
    assert np.array_equal(a.itl.counts, b.itl.counts)
    for name in ("total_weight", "sum_s", "min_s", "max_s"):
        assert getattr(a.itl, name) == getattr(b.itl, name), name
    assert (a.itl.mean(), a.itl.std()) == (b.itl.mean(), b.itl.std()) or math.isnan(a.itl.mean())
    assert (a.num_steps, a.idle_slot_steps) == (b.num_steps, b.idle_slot_steps)
    assert a.duration_s == b.duration_s
    assert [t.summary() for t in a.traces] == [t.summary() for t in b.traces]


def test_apart_equals_interleaved_in_process_and_in_workers() -> None:
    interleaved = _sim(DP_CASE).run()
    sim = _sim(DP_CASE)
    assert runs_apart(sim)
    alone = try_apart(sim, 1)
    assert alone is not None  # the apart path ran, not the fallback
    _assert_identical(alone, interleaved)
    in_workers = try_apart(_sim(DP_CASE), 2)
    assert in_workers is not None
    _assert_identical(in_workers, interleaved)
    assert int((interleaved.records.status == 0).sum()) > 0


def test_itl_moments_need_the_loops_order() -> None:
    """Each replica's ITL updates concatenated (instead of replayed in the loop's order) give
    another standard deviation in the last bits: the replay order is load-bearing."""
    sim = _sim(DP_CASE)
    runs = apart._run_group(sim, list(range(len(sim.replicas))))
    assert runs is not None
    by_replica = np.concatenate([np.full(len(run.advances.start_s), run.index) for run in runs])
    unordered = ItlHistogram()
    replay_into(
        unordered,
        np.sum([run.counts for run in runs], axis=0),
        apart._updates_in_order(runs, by_replica),
    )
    interleaved = _sim(DP_CASE).run().itl
    assert unordered.total_weight == interleaved.total_weight
    assert unordered.std() != interleaved.std()
    ordered = apart._merge(sim, runs)
    assert ordered is not None and ordered.itl.std() == interleaved.std()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(data_parallel_sizes=(2, 3, 8)))
def test_run_apart_equals_run(case: Case) -> None:
    """Any round-robin case, ties at rate inf included: apart or fallen back, the same run."""
    case = replace(case, router="round_robin", max_concurrency=None)
    _assert_identical(run_apart(_sim(case), 1), _sim(case).run())


def test_state_dependent_routing_runs_interleaved() -> None:
    small = replace(DP_CASE, num_requests=60)
    for changed in (
        replace(small, router="least_outstanding"),
        replace(small, max_concurrency=8),
        replace(small, data_parallel_size=1),
    ):
        assert not runs_apart(_sim(changed))
        _assert_identical(run_apart(_sim(changed), 2), _sim(changed).run())


def _log(start_s: float, num_routed: int) -> AdvanceLog:
    return AdvanceLog([start_s], [start_s + 1.0], [False], [num_routed])


def test_loop_order_breaks_near_ties_to_the_lowest_index() -> None:
    """Replica 1's clock (10 s) is the earliest, but replica 0's is within rounding of it: the
    loop runs replica 0 first, as ``Simulation._earliest_busy`` does (a sort by clock would
    not)."""
    later = 10.0 + 0.5 * same_time_s(10.0)
    arrivals, replica_of = [10.0, later], [1, 0]
    logs = [_log(later, 1), _log(10.0, 1)]
    order = loop_order(arrivals, replica_of, logs, same_time_s)
    assert order is not None and order.tolist() == [0, 1]
    apart_s = 10.0 + 2.0 * same_time_s(10.0)  # not within rounding: the earliest goes first
    order = loop_order([10.0, apart_s], replica_of, [_log(apart_s, 1), _log(10.0, 1)], same_time_s)
    assert order is not None and order.tolist() == [1, 0]


def test_loop_order_refuses_a_log_that_saw_other_arrivals() -> None:
    """An advance logged with a different number of routed arrivals than the loop would have
    routed by then is not the interleaved run's."""
    arrivals, replica_of = [10.0, 10.0 + 0.5 * same_time_s(10.0)], [1, 0]
    good = [_log(arrivals[1], 1), _log(10.0, 1)]
    assert loop_order(arrivals, replica_of, good, same_time_s) is not None
    assert loop_order(arrivals, replica_of, [good[0], _log(10.0, 0)], same_time_s) is None
    assert loop_order(arrivals, replica_of, [good[0], _log(10.5, 1)], same_time_s) is None
