"""The order in which the interleaved event loop would have run replicas simulated apart.

``Simulation.run`` interleaves arrivals and replica advances by time: it takes the next arrival
when it is due at the earliest busy replica's clock (within ``same_time_s``), else advances that
replica (the lowest index among clocks within rounding of the earliest). Replicas run apart
(``engine/apart.py``) log each advance: its start clock, its end clock, whether the replica had
work left, and how many of its own arrivals it had been routed by then. ``loop_order`` replays
the loop's choices on those floats alone and returns the advances in the loop's order, or None
where the loop would have routed a replica a different number of arrivals before one of its
advances than the apart run did (an arrival within rounding of a clock another replica ties
with), in which case the apart run is not the interleaved one and its caller falls back.

By induction over the loop's iterations, a replica whose every advance starts from the same
clock with the same requests routed to it computes the same advance as in the interleaved run
(replicas share no state that an advance reads), so when ``loop_order`` returns an order, the
apart run equals the interleaved one and the order is the one its shared ITL moments need.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class AdvanceLog:
    """One replica's advances, in its own order."""

    start_s: list[float]  # the replica's clock when the advance began
    end_s: list[float]  # its clock after it
    has_work: list[bool]  # whether it still had work after it
    num_routed: list[int]  # its own arrivals routed to it when the advance began


def loop_order(
    arrival_s: list[float],
    replica_of: list[int],
    logs: list[AdvanceLog],
    same_time_s: Callable[[float], float],
) -> npt.NDArray[np.int64] | None:
    """The replica of each advance in the interleaved loop's order (the ``j``-th entry naming
    replica ``r`` is ``r``'s next advance in its log), or None where the loop disagrees with a
    log. ``arrival_s``/``replica_of``: the requests that reach a replica, in arrival order."""
    num = len(logs)
    clocks = [math.inf] * num  # inf: no work (``Simulation._clocks``)
    reach = [math.inf] * num  # each clock plus its rounding (``same_time_s``)
    now = [0.0] * num  # each replica's clock, with or without work (``Replica.now``)
    routed = [0] * num
    position = [0] * num
    order: list[int] = []
    num_arrivals, next_request = len(arrival_s), 0
    while True:
        arrival = arrival_s[next_request] if next_request < num_arrivals else math.inf
        earliest = min(clocks)
        if earliest < math.inf:
            # The lowest index whose clock is within rounding of the earliest.
            chosen = clocks.index(earliest)
            bound = reach[chosen]
            chosen = next((i for i in range(chosen) if clocks[i] <= bound), chosen)
        elif arrival == math.inf:
            break
        else:
            chosen = -1
        if chosen < 0 or arrival <= reach[chosen]:
            replica = replica_of[next_request]
            next_request += 1
            if clocks[replica] == math.inf:
                now[replica] = clocks[replica] = clock = max(now[replica], arrival)
                reach[replica] = clock + same_time_s(clock)
            routed[replica] += 1
            continue
        log, j = logs[chosen], position[chosen]
        if j >= len(log.start_s) or log.num_routed[j] != routed[chosen]:
            return None
        if log.start_s[j] != clocks[chosen]:
            return None
        position[chosen] = j + 1
        order.append(chosen)
        now[chosen] = end = log.end_s[j]
        clocks[chosen] = end if log.has_work[j] else math.inf
        reach[chosen] = end + same_time_s(end) if log.has_work[j] else math.inf
    if any(position[r] != len(logs[r].start_s) for r in range(num)):
        return None
    return np.asarray(order, dtype=np.int64)
