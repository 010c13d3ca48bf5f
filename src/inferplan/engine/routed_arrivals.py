"""Each replica's own next arrival, where routing is known in advance (issue 10: 1M requests on
8 DP replicas).

A fast-mode decode stretch must stop at the first event that can change its replica's batch
(DESIGN §4). An arrival routed elsewhere is not one: under ``round_robin`` a request's replica
depends only on how many requests were routed before it, and whether a request is routed at all
(rejected at arrival or not) depends only on the request and the configuration, so every
request's replica is known before the run. A replica's stretch then stops at its own next
arrival instead of at everybody's: with ``d`` replicas, up to ``d`` times fewer splits.

Where routing reads replica state (``least_outstanding``: an arrival goes to whichever replica
has fewest requests *at its time*, so every replica's state then must be simulated first), where
a subclass routes or times arrivals its own way, or where arrivals wait for finishes on any
replica (``--max-concurrency``), nothing is planned and every stretch stops at every arrival, as
before (``Simulation._own_arrivals``). Class pools plan round robin within each pool while no
repartition rule can move replicas (``ClassPoolSimulation._pool_arrivals``).

Results are the same steps at the same times; only how a replica's run of decode steps is split
into closed-form stretches changes, so times can differ in the last bits (a sum of ``k`` steps
in one piece or in two).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np
import numpy.typing as npt


def round_robin_replicas(is_routed: npt.NDArray[np.bool_], num_replicas: int) -> np.ndarray:
    """The replica of every request under ``round_robin`` (the router's counter counts routed
    requests only); requests not routed get their would-be replica, which is never used."""
    counter = np.cumsum(is_routed) - 1
    return np.maximum(counter, 0) % num_replicas


class RoutedArrivals:
    """Per replica, the arrival times of the requests routed to it, in arrival order, and how
    many of them have arrived."""

    def __init__(
        self,
        dispatch_s: npt.NDArray[np.float64],
        is_routed: npt.NDArray[np.bool_],
        replica_of: npt.NDArray[np.int64],
        num_replicas: int,
    ) -> None:
        self.replica_of = replica_of
        self._dispatch_s, self._is_routed = dispatch_s, is_routed
        # Python floats: read once per stretch, where a numpy scalar costs more than the list;
        # each replica's made at its first read (replicas run apart read only their own).
        self._times_s: list[list[float] | None] = [None] * num_replicas
        self._num_arrived = [0] * num_replicas

    def note_routed(self, rid: int, replica: int) -> None:
        """Request ``rid`` was routed to ``replica``: the plan must have said so, or a stretch
        would have run past this arrival."""
        if self.replica_of[rid] != replica:
            raise AssertionError(f"request {rid} routed to {replica}, planned for another")
        self._num_arrived[replica] += 1

    def note_arrived(self, replica: int) -> None:
        """One more of ``replica``'s planned arrivals was routed to it (a caller that routes
        from the plan itself: ``engine/apart.py``)."""
        self._num_arrived[replica] += 1

    def next_arrival_s(self, replica: int) -> float:
        """When the next request routed to ``replica`` arrives; inf when none is left."""
        times, pos = self._times_s[replica], self._num_arrived[replica]
        if times is None:
            mine = self._is_routed & (self.replica_of == replica)
            times = self._times_s[replica] = self._dispatch_s[mine].tolist()
        return times[pos] if pos < len(times) else math.inf


def held_send_s(sent: float, finish_times: list[float], in_flight: int, limit: int) -> float:
    """When a request sent at ``sent`` reaches the server under a client limit of ``limit``
    requests in flight (``--max-concurrency``): at ``sent`` if a slot is free then, else when
    the slot frees; inf if no finish simulated so far frees one. ``finish_times``: the finishes
    already processed, sorted; those before ``sent`` are dropped from it (sends come in time
    order, so they matter no more)."""
    del finish_times[: bisect_right(finish_times, sent)]
    # Finishes already processed but later than ``sent`` still held their slots then.
    busy_at_send = in_flight + len(finish_times)
    if busy_at_send < limit:
        return sent
    if in_flight >= limit:
        return math.inf  # no slot frees until a finish not yet simulated
    # The slot frees at the (busy_at_send - limit + 1)-th finish after ``sent``.
    return finish_times[busy_at_send - limit]
