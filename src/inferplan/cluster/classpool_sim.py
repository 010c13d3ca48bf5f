"""The run of class pools: routing by class, the periodic check, and replica moves.

``ClassPoolSimulation`` is the data-parallel ``Simulation`` (same replicas, schedulers, client
and clock) with two changes: an arriving request goes to a replica of its class's pool (the
run's router over that pool's serving replicas), and, with a repartition rule, a check runs at
every multiple of the interval on the run's clock (the first arrival is 0). The rules are in
``classpools.py``'s docstring; the signals are:

- ``queue``: requests waiting for admission (queued or preempted) on the pool's serving
  replicas, as the router would see them at the check;
- ``ttft``: the larger of the mean TTFT of the pool's requests whose first token came since
  the previous check and the age of its oldest request still without a first token (a pool so
  starved that no first token comes still reads hot).

A check is an event like an arrival: it sees every step that started before it (never one that
starts at it), and a fast-mode stretch stops there as it stops at an arrival, so fast and exact
mode see the same state and move the same replicas at the same times. At a check tied with an
arrival the check goes first. While no replica has work nothing can cross a threshold, so the
checks skip ahead to the next arrival. A move ends when the drained replica's last step ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferplan.cluster.classpools import DONOR_FRACTION, ClassPools, Move, class_pools_json
from inferplan.engine.loop_order import same_time_s
from inferplan.engine.policies import ROUTERS
from inferplan.engine.replica import Replica
from inferplan.engine.routed_arrivals import RoutedArrivals, round_robin_replicas
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.errors import InferplanError
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.request import Workload


@dataclass(frozen=True)
class _Draining:
    replica: int
    from_pool: int
    to_pool: int
    start_s: float
    signal: float


@dataclass
class ClassPoolResult:
    """The run (as without pools) and what the pools did."""

    result: SimulationResult
    pool_of_request: np.ndarray  # pool index per request (its class's pool)
    routed_replica: np.ndarray  # replica index per routed request (see ``is_routed``)
    is_routed: np.ndarray  # False: rejected at arrival, never routed
    timelines: list[list[tuple[float, int]]]  # per pool: (time_s, serving replicas) changes
    moves: list[Move]

    def summary_json(self, spec: ClassPools) -> dict[str, Any]:
        res = self.result
        return class_pools_json(
            spec, res.records, self.pool_of_request, self.timelines, self.moves, res.duration_s
        )


class ClassPoolSimulation(Simulation):
    """A DP run whose replicas are split into class pools (module docstring)."""

    def __init__(
        self, workload: Workload, cfg: SimulationConfig, model: StepTimeModel, spec: ClassPools
    ) -> None:
        total = sum(p.num_replicas for p in spec.pools)
        if total != cfg.data_parallel_size:
            raise InferplanError(
                f"--pools: the pools' replicas add up to {total}, not the "
                f"{cfg.data_parallel_size} replicas of --data-parallel-size"
            )
        super().__init__(workload, cfg, model)
        self.spec, self.rule = spec, spec.repartition
        self.pool_of_class = spec.pool_of_class(workload.class_names)
        self.pool_of_request = self.pool_of_class[workload.class_ids]
        self.members = spec.first_replicas()
        self.pool_routed = [0] * len(spec.pools)
        self.routed_replica = np.zeros(workload.num_requests, dtype=np.int64)
        self.is_routed = np.zeros(workload.num_requests, dtype=bool)
        self.timelines = [[(0.0, p.num_replicas)] for p in spec.pools]
        self.moves: list[Move] = []
        self.draining: _Draining | None = None
        self.cooldown_until_s = -math.inf
        self.num_checks = 0  # the next check is at (num_checks + 1) x interval
        self.pending: list[list[int]] = [[] for _ in spec.pools]  # no first token at last check
        self.own_arrivals = self._pool_arrivals()

    def _pool_arrivals(self) -> RoutedArrivals | None:
        """Without a repartition rule the pools never change, so round robin within each pool
        is known before the run: each replica's stretches stop at its own arrivals only
        (``engine/routed_arrivals.py``). A rule's checks read every replica: none planned."""
        if self.rule is not None or not self._routing_is_static():
            return None
        is_routed = self._is_routed_at_arrival()
        replica_of = np.zeros(len(is_routed), dtype=np.int64)
        for pool, members in enumerate(self.members):
            mine = self.pool_of_request == pool
            local = round_robin_replicas(is_routed & mine, len(members))
            replica_of[mine] = np.asarray(members, dtype=np.int64)[local[mine]]
        return RoutedArrivals(self.records.dispatch_s, is_routed, replica_of, len(self.replicas))

    # ---- routing ---------------------------------------------------------------------------

    def _route(self, rid: int) -> int:
        pool = int(self.pool_of_request[rid])
        members = self.members[pool]
        serving = [self.replicas[i] for i in members]
        local = ROUTERS[self.cfg.router](serving, self.pool_routed[pool])
        self.pool_routed[pool] += 1
        index = members[local]
        self.routed_replica[rid], self.is_routed[rid] = index, True
        if self.rule is not None and self.rule.signal == "ttft":
            self.pending[pool].append(rid)
        return index

    # ---- checks as events ------------------------------------------------------------------

    def _check_s(self) -> float:
        assert self.rule is not None
        return (self.num_checks + 1) * self.rule.interval_s

    def _next_arrival_s(self) -> float:
        arrival = super()._next_arrival_s()
        if self.rule is None:
            return arrival
        if not any(r.has_work for r in self.replicas):
            if math.isinf(arrival):
                return arrival  # the run is over
            # Idle: no queue and no first token until the arrival; skip the checks before it.
            self.num_checks = max(self.num_checks, math.ceil(arrival / self.rule.interval_s) - 1)
        return min(arrival, self._check_s())

    def _arrive(self, now: float) -> None:
        if self.rule is not None and now == self._check_s():
            self.num_checks += 1
            self._check(now)
            return
        super()._arrive(now)

    def _collect(self, replica: Replica) -> int:
        done = super()._collect(replica)
        moving = self.draining
        if moving is not None and moving.replica == replica.index and not replica.has_work:
            self._join(moving, replica.now)
        return done

    # ---- the rule --------------------------------------------------------------------------

    def _signals(self, now: float) -> list[float]:
        assert self.rule is not None
        if self.rule.signal == "queue":
            return [float(sum(self.replicas[i].queued for i in m)) for m in self.members]
        return [self._ttft_signal(k, now) for k in range(len(self.members))]

    def _ttft_signal(self, pool: int, now: float) -> float:
        """Mean TTFT of first tokens since the last check, or the oldest wait, the larger."""
        ids = np.asarray(self.pending[pool], dtype=np.int64)
        if not len(ids):
            return 0.0
        rec = self.records
        first = rec.first_token_s[ids]
        got = np.isfinite(first) & (first <= now + same_time_s(now))
        recent = first[got] - rec.arrival_s[ids[got]]
        waiting = ids[~got]
        self.pending[pool] = waiting.tolist()
        oldest = now - float(rec.arrival_s[waiting].min()) if len(waiting) else 0.0
        return max(float(recent.mean()) if len(recent) else 0.0, oldest)

    def _check(self, now: float) -> None:
        assert self.rule is not None
        signals = self._signals(now)  # always read: the TTFT window restarts at every check
        if self.draining is not None or now < self.cooldown_until_s:
            return
        threshold = self.rule.threshold
        hot = [k for k, s in enumerate(signals) if s > threshold]
        if not hot:
            return
        to_pool = max(hot, key=lambda k: (signals[k], -k))
        donors = [
            k
            for k, s in enumerate(signals)
            if k != to_pool and len(self.members[k]) >= 2 and s <= DONOR_FRACTION * threshold
        ]
        if not donors:
            return
        from_pool = min(donors, key=lambda k: (signals[k], k))
        members = self.members[from_pool]
        replica = min(members, key=lambda i: (self.replicas[i].outstanding, i))
        members.remove(replica)
        self._mark(from_pool, now)
        self.draining = _Draining(replica, from_pool, to_pool, now, signals[to_pool])
        if not self.replicas[replica].has_work:
            self._join(self.draining, now)

    def _join(self, moving: _Draining, now: float) -> None:
        joined_s = max(now, moving.start_s)
        members = self.members[moving.to_pool]
        members.append(moving.replica)
        members.sort()  # routers break ties by the lowest index
        self._mark(moving.to_pool, joined_s)
        names = self.spec.names
        self.moves.append(
            Move(
                moving.replica,
                names[moving.from_pool],
                names[moving.to_pool],
                moving.start_s,
                joined_s,
                moving.signal,
            )
        )
        self.draining = None
        assert self.rule is not None
        self.cooldown_until_s = joined_s + self.rule.cooldown_s

    def _mark(self, pool: int, now: float) -> None:
        timeline = self.timelines[pool]
        count = len(self.members[pool])
        if timeline[-1][0] == now:
            timeline[-1] = (now, count)
        else:
            timeline.append((now, count))


def simulate_class_pools(
    workload: Workload,
    cfg: SimulationConfig,
    model: StepTimeModel,
    spec: ClassPools,
    on_progress: Callable[[int], None] | None = None,
) -> ClassPoolResult:
    """Run ``workload`` on ``cfg``'s replicas split into ``spec``'s pools."""
    sim = ClassPoolSimulation(workload, cfg, model, spec)
    result = sim.run(on_progress=on_progress)
    return ClassPoolResult(
        result, sim.pool_of_request, sim.routed_replica, sim.is_routed, sim.timelines, sim.moves
    )
