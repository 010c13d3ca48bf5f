"""Stretches stop at a replica's own arrivals where routing is known (engine/routed_arrivals.py).

Round robin decides every request's replica before the run, so a replica's decode stretch runs
past arrivals routed elsewhere; fast mode must still equal exact mode, the plan must route as the
router does (``Simulation._arrive`` asserts it), and a replica's loop iterations must follow its
own events, not the whole cluster's arrivals.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cluster.classpool_sim import ClassPoolSimulation
from inferplan.cluster.classpools import ClassPools, PoolSpec, Repartition
from inferplan.engine import simulator as simulator_module
from inferplan.engine.replica import Replica
from inferplan.engine.routed_arrivals import RoutedArrivals, round_robin_replicas
from inferplan.engine.simulator import Simulation
from native_mode import pure_only

from .test_fast_equals_exact import (
    BASE,
    Case,
    _check_case,
    _config,
    _plan_and_model,
    _workload,
    cases,
)


def test_round_robin_skips_requests_rejected_at_arrival() -> None:
    is_routed = np.array([True, False, True, True, False, True, True])
    assert round_robin_replicas(is_routed, 3)[is_routed].tolist() == [0, 1, 2, 0, 1]


def test_next_arrival_is_the_replicas_own_and_moves_forward() -> None:
    dispatch_s = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    is_routed = np.array([True, True, False, True, True])
    plan = RoutedArrivals(dispatch_s, is_routed, round_robin_replicas(is_routed, 2), 2)
    assert plan.next_arrival_s(0) == 0.0  # requests 0 and 3 go to replica 0
    assert plan.next_arrival_s(1) == 1.0  # requests 1 and 4 to replica 1
    plan.note_routed(0, 0)
    assert plan.next_arrival_s(0) == 3.0  # request 2 is rejected: not replica 0's
    plan.note_routed(1, 1)
    assert plan.next_arrival_s(1) == 4.0
    plan.note_routed(3, 0)
    assert plan.next_arrival_s(0) == math.inf
    with pytest.raises(AssertionError, match="request 4 routed to 0"):
        plan.note_routed(4, 0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(data_parallel_sizes=(2, 3, 8)), has_limit=st.booleans())
def test_fast_equals_exact_with_round_robin(case: Case, has_limit: bool) -> None:
    """Round robin (planned without a client limit), rejections included."""
    limit = case.max_concurrency if has_limit else None
    _check_case(replace(case, router="round_robin", max_concurrency=limit))


def _loop_counts(case: Case, *, planned: bool) -> tuple[Counter[int], Counter[int], Simulation]:
    """Per replica: loop iterations that advanced it, and its single (non-stretch) steps."""
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
    if not planned:
        sim.own_arrivals = None  # today's rule before the plan: stop at every arrival
    iterations: Counter[int] = Counter()
    single_steps: Counter[int] = Counter()
    for replica in sim.replicas:
        step = replica.step

        def counted(step=step, index=replica.index) -> None:  # type: ignore[no-untyped-def]
            single_steps[index] += 1
            step()

        replica.step = counted  # type: ignore[method-assign]
    joined = simulator_module.joined_admission_step

    def counted_joined(r: Replica) -> bool:  # a single step that skips ``Replica.step``
        done = joined(r)
        single_steps[r.index] += done
        return done

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulator_module, "joined_admission_step", counted_joined)
        sim.run(check=lambda r: iterations.update([r.index]))
    return iterations, single_steps, sim


@pure_only  # counts single steps by patching ``Replica.step`` on each instance
def test_stretch_breaks_follow_the_replicas_own_events() -> None:
    """With 8 replicas, every iteration on a replica is one of its single steps or a stretch
    that ended at one of its own events (arrival, finish, preemption): at most the sum of
    those. Stopping at every arrival of the cluster breaks this bound."""
    case = Case(
        **{
            **BASE.__dict__,
            "num_requests": 400,
            "max_input": 300,
            "spare_blocks": None,
            "data_parallel_size": 8,
        }
    )
    iterations, single_steps, sim = _loop_counts(case, planned=True)
    assert sim.own_arrivals is not None
    rec = sim.records
    routed = sim.own_arrivals.replica_of
    for r in range(8):
        mine = routed == r
        events = 2 * int(mine.sum()) + int(rec.num_preemptions[mine].sum())  # arrive + finish
        assert iterations[r] <= events + single_steps[r]
    old, old_single, _ = _loop_counts(case, planned=False)
    assert any(old[r] > 2 * int((routed == r).sum()) + old_single[r] for r in range(8))


def test_state_dependent_routing_is_not_planned() -> None:
    plan, model = _plan_and_model()
    case = Case(**{**BASE.__dict__, "data_parallel_size": 3})
    wl = _workload(case)
    cfg = _config(case, wl, plan, exact=False)
    assert Simulation(wl, cfg, model).own_arrivals is not None
    for changed in (
        replace(cfg, router="least_outstanding"),
        replace(cfg, max_concurrency=4),
        replace(cfg, exact=True),
    ):
        assert Simulation(wl, changed, model).own_arrivals is None
    pools = ClassPools((PoolSpec("default", 3),), "default")
    assert ClassPoolSimulation(wl, cfg, model, pools).own_arrivals is not None
    moving = replace(pools, repartition=Repartition("queue", 1.0))
    assert ClassPoolSimulation(wl, cfg, model, moving).own_arrivals is None


def _pool_run(exact: bool) -> ClassPoolSimulation:
    plan, model = _plan_and_model()
    case = Case(
        **{**BASE.__dict__, "num_requests": 80, "data_parallel_size": 5, "reject_some": True}
    )
    wl = _workload(case)
    classes = np.random.default_rng(1).integers(0, 2, wl.num_requests)
    wl = replace(wl, class_ids=classes, class_names=("chat", "reasoning"))
    pools = ClassPools((PoolSpec("reasoning", 2), PoolSpec("chat", 3)), "chat")
    sim = ClassPoolSimulation(wl, _config(case, wl, plan, exact=exact), model, pools)
    sim.run(check=lambda replica: replica.check_invariants())
    return sim


def test_static_class_pools_plan_round_robin_per_pool() -> None:
    """Without a repartition rule each pool's round robin is planned: fast == exact, and every
    request went to the replica the plan named (``_arrive`` asserts it as it routes)."""
    fast, exact = _pool_run(exact=False), _pool_run(exact=True)
    assert fast.own_arrivals is not None
    routed = fast.is_routed
    assert not routed.all()  # some were rejected at arrival, and skipped by the plan
    np.testing.assert_array_equal(fast.routed_replica[routed], fast.own_arrivals.replica_of[routed])
    np.testing.assert_array_equal(fast.routed_replica, exact.routed_replica)
    f, e = fast.records, exact.records
    np.testing.assert_array_equal(f.status, e.status)
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(f, name), getattr(e, name), rtol=1e-9, atol=0)
