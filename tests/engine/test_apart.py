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
import pytest
from hypothesis import HealthCheck, given, settings

from inferplan.engine import apart
from inferplan.engine import loop_order as loop_order_module
from inferplan.engine.apart import run_apart, runs_apart, try_apart
from inferplan.engine.loop_order import AdvanceLog, loop_order, same_time_s
from inferplan.engine.simulator import Simulation, SimulationResult
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
    by_replica = np.concatenate([np.full(len(run.advances), run.index) for run in runs])
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


def _logs_of(case: Case) -> tuple[np.ndarray, np.ndarray, list[AdvanceLog]]:
    """The arrivals that reach a replica and every replica's advance log, run apart."""
    sim = _sim(case)
    runs = apart._run_group(sim, list(range(len(sim.replicas))))
    assert runs is not None and sim.own_arrivals is not None
    routed = np.asarray(sim._routed_at_arrival, dtype=bool)
    arrival_s = sim.records.dispatch_s[routed]
    return arrival_s, sim.own_arrivals.replica_of[routed], [run.advances for run in runs]


def test_sorting_gives_the_loops_order() -> None:
    """The merge sort decides a real run's order (no clocks within rounding) and it is the
    loop's, step by step."""
    arrival_s, replica_of, logs = _logs_of(DP_CASE)
    sorted_order = loop_order_module._by_sorting(arrival_s, replica_of, logs, same_time_s)
    stepped = loop_order_module._step_by_step(
        arrival_s.tolist(), replica_of.tolist(), logs, same_time_s
    )
    assert sorted_order is not None and stepped is not None
    assert sorted_order.tolist() == stepped.tolist()
    assert len(set(stepped[:8].tolist())) > 1  # the replicas interleave


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(data_parallel_sizes=(2, 3, 8)))
def test_sorting_never_disagrees_with_the_loop(case: Case) -> None:
    """Where the sort decides, it decides what the loop does (ties at rate inf included)."""
    case = replace(case, router="round_robin", max_concurrency=None)
    arrival_s, replica_of, logs = _logs_of(case)
    decided = loop_order_module._by_sorting(arrival_s, replica_of, logs, same_time_s)
    stepped = loop_order_module._step_by_step(
        arrival_s.tolist(), replica_of.tolist(), logs, same_time_s
    )
    if decided is not None:
        assert stepped is not None and decided.tolist() == stepped.tolist()


def test_sorting_orders_equal_clocks_by_index_and_near_ties_as_the_loop() -> None:
    """Equal clocks: the lowest index first, each replica's advances in its own order;
    clocks within rounding but not equal are ordered by the loop's rule (lowest index first);
    a log that saw other arrivals is refused by both."""
    logs = [AdvanceLog([10.0, 11.0], [11.0, 12.0], [True, False], [1, 1]), _log(10.0, 1)]
    args = ([10.0, 10.0], [1, 0])
    for order_of in (loop_order_module._by_sorting, loop_order):
        order = order_of(np.asarray(args[0]), np.asarray(args[1]), logs, same_time_s)
        assert order is not None and order.tolist() == [0, 1, 0]
    woken = [AdvanceLog([10.0, 20.0], [11.0, 21.0], [False, False], [1, 2]), _log(10.0, 1)]
    arrivals = np.asarray([10.0, 10.0, 20.0])
    order = loop_order_module._by_sorting(arrivals, np.asarray([0, 1, 0]), woken, same_time_s)
    assert order is not None and order.tolist() == [0, 1, 0]
    late = [AdvanceLog([10.0, 20.5], [11.0, 21.0], [False, False], [1, 2]), _log(10.0, 1)]
    assert loop_order(arrivals, np.asarray([0, 1, 0]), late, same_time_s) is None
    near = 10.0 + 0.5 * same_time_s(10.0)
    near_logs = [_log(near, 1), _log(10.0, 1)]
    near_args = (np.asarray([10.0, near]), np.asarray([1, 0]))
    order = loop_order_module._by_sorting(*near_args, near_logs, same_time_s)
    assert order is not None and order.tolist() == [0, 1]  # the loop's rule, in its window
    refused = [_log(near, 1), _log(10.0, 0)]
    assert loop_order_module._by_sorting(*near_args, refused, same_time_s) is None


def test_sorting_routes_an_arrival_at_the_rounding_bound_first_and_wakes_at_the_later() -> None:
    """An arrival exactly at a clock plus its rounding is routed before that advance (the
    loop's ``<=``); an idle replica woken by an arrival older than its clock starts at its
    clock (``max``)."""
    bound = 10.0 + same_time_s(10.0)
    logs = [AdvanceLog([10.0], [11.0], [False], [2])]
    for order_of in (loop_order_module._by_sorting, loop_order):
        order = order_of(np.asarray([10.0, bound]), np.asarray([0, 0]), logs, same_time_s)
        assert order is not None and order.tolist() == [0]
    woken = [AdvanceLog([10.0, 12.0], [12.0, 13.0], [False, False], [1, 2])]
    for order_of in (loop_order_module._by_sorting, loop_order):
        order = order_of(np.asarray([10.0, 11.0]), np.asarray([0, 0]), woken, same_time_s)
        assert order is not None and order.tolist() == [0, 0]


def _apart_logs(seed: int) -> tuple[np.ndarray, np.ndarray, list[AdvanceLog]]:
    """Round-robin arrivals and each replica's log as a run apart writes it (its own arrivals
    due within rounding routed before each advance, which stops at its next arrival), with
    clocks on a coarse grid plus offsets below the rounding, so replicas' clocks often tie
    within rounding without being equal."""
    rng = np.random.default_rng(seed)
    num_replicas, num_arrivals = int(rng.integers(2, 5)), int(rng.integers(4, 40))
    tiny = same_time_s(1.0) * np.array([0.0, 0.0, 0.3, 0.7])
    arrival_s = np.sort(rng.integers(0, 20, num_arrivals) * 0.5 + rng.choice(tiny, num_arrivals))
    replica_of = np.arange(num_arrivals) % num_replicas
    logs = []
    for r in range(num_replicas):
        mine = arrival_s[replica_of == r].tolist()
        start_s, end_s, has_work, num_routed = [], [], [], []
        clock, busy, pos = 0.0, False, 0
        while True:
            if pos < len(mine) and (not busy or mine[pos] <= clock + same_time_s(clock)):
                clock, busy, pos = (clock if busy else max(clock, mine[pos])), True, pos + 1
                continue
            if not busy:
                break
            step = float(rng.integers(1, 4)) * 0.5 + float(rng.choice(tiny))
            end = min(clock + step, mine[pos]) if pos < len(mine) else clock + step
            busy = bool(rng.random() < 0.6)
            start_s.append(clock)
            end_s.append(end)
            has_work.append(busy)
            num_routed.append(pos)
            clock = end
        logs.append(AdvanceLog(start_s, end_s, has_work, num_routed))
    return arrival_s, replica_of, logs


def test_sorting_with_near_ties_gives_the_loops_order() -> None:
    """Windows of clocks within rounding are ordered by the loop itself: the sort decides
    every case the loop accepts (none falls back to the loop's seconds), and what the loop
    does, near ties included."""
    decided_near_ties = 0
    for seed in range(300):
        arrival_s, replica_of, logs = _apart_logs(seed)
        decided = loop_order_module._by_sorting(arrival_s, replica_of, logs, same_time_s)
        stepped = loop_order_module._step_by_step(
            arrival_s.tolist(), replica_of.tolist(), logs, same_time_s
        )
        assert (decided is None) == (stepped is None), seed
        if decided is not None and stepped is not None:
            assert decided.tolist() == stepped.tolist(), seed
            start = np.sort(np.concatenate([log.start_s for log in logs]))
            decided_near_ties += bool(
                loop_order_module._near_ties(start, loop_order_module.reach_of(start, same_time_s))
            )
    assert decided_near_ties >= 20


def test_auto_workers_one_per_core_up_to_the_replicas_for_large_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--sim-workers auto``: min(cores, replicas) where replicas run apart and the run is
    large enough; 1 for small runs and for runs that cannot go apart."""
    monkeypatch.setattr(apart, "AUTO_MIN_REQUESTS", DP_CASE.num_requests)
    sim = _sim(DP_CASE)  # 4 replicas, round robin
    assert [apart.auto_workers(sim, cores) for cores in (1, 2, 16)] == [1, 2, 4]
    assert apart.auto_workers(_sim(replace(DP_CASE, router="least_outstanding")), 16) == 1
    monkeypatch.setattr(apart, "AUTO_MIN_REQUESTS", DP_CASE.num_requests + 1)
    assert apart.auto_workers(sim, 16) == 1


def test_sorting_resumes_the_loop_with_a_replica_woken_before_a_near_tie() -> None:
    """Replica 0's first advance runs past its next arrival (11 s) and idles at 12 s + a
    little; the arrival wakes it there before replica 1's clock (12 s) comes up, within
    rounding of it: the loop runs replica 0 first (the lowest index), which the window of
    the near tie must know to be awake."""
    later = 12.0 + 0.5 * same_time_s(12.0)
    logs = [
        AdvanceLog([10.0, later], [later, 13.0], [False, False], [1, 2]),
        AdvanceLog([11.0, 12.0], [11.5, 13.0], [False, False], [1, 2]),
    ]
    arrival_s, replica_of = np.asarray([10.0, 11.0, 11.0, 12.0]), np.asarray([0, 1, 0, 1])
    stepped = loop_order_module._step_by_step(
        arrival_s.tolist(), replica_of.tolist(), logs, same_time_s
    )
    assert stepped is not None and stepped.tolist() == [0, 1, 0, 1]
    decided = loop_order_module._by_sorting(arrival_s, replica_of, logs, same_time_s)
    assert decided is not None and decided.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize("workers", [1, 2])
def test_progress_counts_every_finished_request_once(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers count finishes in a shared counter (every PROGRESS_EVERY; one here) that the
    # parent passes on while it waits; the rest comes at the end: never a request twice.
    monkeypatch.setattr(apart, "PROGRESS_EVERY", 1)
    calls: list[int] = []
    sim = _sim(DP_CASE)
    result = run_apart(sim, workers, calls.append)
    done = int((result.records.status == 0).sum())
    assert done > 1 and sum(calls) == sim.num_done
    assert all(n > 0 for n in calls)
    if workers == 1:  # in this process: told as they finish, not once at the end
        assert len(calls) > 1


def test_updates_in_order_gathers_each_advances_rows_in_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every advance's update rows, in the order given, whatever the block size."""
    sim = _sim(DP_CASE)
    runs = apart._run_group(sim, list(range(len(sim.replicas))))
    assert runs is not None
    order = np.concatenate([np.full(len(run.advances), run.index) for run in runs])
    order = order[np.random.default_rng(0).permutation(len(order))]
    seen = [0] * len(runs)
    expected = []
    for r in order.tolist():
        offsets = runs[r].update_offsets
        expected.append(runs[r].updates[offsets[seen[r]] : offsets[seen[r] + 1]])
        seen[r] += 1
    monkeypatch.setattr(apart, "REPLAY_ADVANCES", 7)
    blocks = list(apart._updates_in_order(runs, order))
    assert len(blocks) == -(-len(order) // 7)
    assert np.array_equal(np.concatenate(blocks), np.concatenate(expected))
