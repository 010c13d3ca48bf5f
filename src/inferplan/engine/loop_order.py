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

Two ways to the same order. The loop itself, one iteration per arrival and per advance
(``_step_by_step``: the reference, a few microseconds per iteration, so seconds for a million
requests). And a sort (``_by_sorting``): every replica's advances start at non-decreasing
clocks, so while no two clocks are within rounding of each other without being equal, the
loop merges the replicas' logs by start clock (equal clocks: the lowest index first, then the
replica's own order) and takes each arrival just before the first advance whose clock plus
rounding reaches it (``searchsorted``); what the loop checks per advance (the arrivals routed
by then, the clock it starts from) is then checked on whole arrays. Where the sort cannot
decide (clocks within rounding but not equal, where the loop's lowest-index rule may reorder,
or a check fails), the loop decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Rounding = Callable[[Any], Any]  # ``same_time_s``: a float, or a float array element-wise


# ``now``: a clock reading or an array of them (``reach_of``, ``thrashrun``), so
# not ``float``, which a compiled (mypyc) function would check.
def same_time_s(now: Any) -> Any:
    """How far apart two clock readings (>= 0, finite) may be and still be the same instant.
    Fast mode sums a stretch's steps in closed form, exact mode one by one: the same instant
    differs in the last bits (a rounding error that grows with the time elapsed since the
    clock's start), and an arrival tied with a step boundary must be ordered the same way in
    both. The clock starts at the first arrival (``Simulation`` rebases the trace), so where a
    trace's times start (0, or Unix-epoch seconds) changes nothing."""
    return 1e-9 * (now + 1.0)


class AdvanceLog:
    """One replica's advances, in its own order, as numpy arrays."""

    def __init__(
        self,
        start_s: npt.ArrayLike,
        end_s: npt.ArrayLike,
        has_work: npt.ArrayLike,
        num_routed: npt.ArrayLike,
    ) -> None:
        self.start_s = np.asarray(start_s, dtype=np.float64)  # its clock when it began
        self.end_s = np.asarray(end_s, dtype=np.float64)  # its clock after it
        self.has_work = np.asarray(has_work, dtype=np.bool_)  # work left after it
        self.num_routed = np.asarray(num_routed, dtype=np.int64)  # own arrivals routed by then

    def __reduce__(self) -> tuple[object, ...]:
        # ``engine/apart.py``'s workers send logs back; compiled with mypyc (``native.py``),
        # an instance unpickles only through its constructor.
        return (AdvanceLog, (self.start_s, self.end_s, self.has_work, self.num_routed))

    def __len__(self) -> int:
        return len(self.start_s)


def loop_order(
    arrival_s: npt.ArrayLike,
    replica_of: npt.ArrayLike,
    logs: list[AdvanceLog],
    same_time_s: Rounding,
) -> npt.NDArray[np.int64] | None:
    """The replica of each advance in the interleaved loop's order (the ``j``-th entry naming
    replica ``r`` is ``r``'s next advance in its log), or None where the loop disagrees with a
    log. ``arrival_s``/``replica_of``: the requests that reach a replica, in arrival order."""
    arrivals = np.asarray(arrival_s, dtype=np.float64)
    replicas = np.asarray(replica_of, dtype=np.int64)
    order = _by_sorting(arrivals, replicas, logs, same_time_s)
    if order is not None:
        return order
    return _step_by_step(arrivals.tolist(), replicas.tolist(), logs, same_time_s)


def _by_sorting(
    arrival_s: npt.NDArray[np.float64],
    replica_of: npt.NDArray[np.int64],
    logs: list[AdvanceLog],
    same_time_s: Rounding,
) -> npt.NDArray[np.int64] | None:
    """The loop's order by a merge sort of the logs (the module docstring), or None where
    the sort cannot decide it."""
    if any(np.any(np.diff(log.start_s) < 0.0) for log in logs):
        return None
    start = np.concatenate([log.start_s for log in logs])
    replica = np.repeat(np.arange(len(logs)), [len(log) for log in logs])
    # Stable: equal clocks keep the lowest index first, and each replica its own order.
    merged = np.argsort(start, kind="stable")
    clock = start[merged]
    reach = reach_of(clock, same_time_s)
    # Arrival ``i`` is taken before the first advance whose clock plus rounding reaches it.
    taken_before = np.searchsorted(reach, arrival_s, side="left")
    if np.any(np.diff(taken_before) < 0):
        return None
    order = replica[merged]
    in_window = np.zeros(len(order), dtype=bool)
    # Per replica, its advances done and its arrivals taken before the window: counted on
    # from the last window, so that many windows cost one pass over the run, not one each.
    done, routed = np.zeros(len(logs), dtype=np.int64), np.zeros(len(logs), dtype=np.int64)
    counted_done = counted_taken = 0
    windows = _near_ties(clock, reach)
    bounds = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
    takens = np.searchsorted(taken_before, bounds[:, 0], side="left").tolist()
    uptos = np.searchsorted(taken_before, bounds[:, 1], side="right").tolist()
    for (first, end), taken, upto in zip(windows, takens, uptos, strict=True):
        done += np.bincount(order[counted_done:first], minlength=len(logs))
        routed += np.bincount(replica_of[counted_taken:taken], minlength=len(logs))
        counted_done, counted_taken = first, taken
        sorted_part = order[first:end]
        window = _Loop.resumed(
            arrival_s[taken:upto], replica_of[taken:upto], logs, done, routed, sorted_part
        )
        stepped = window.advance(end - first, same_time_s)
        if stepped is None or sorted(stepped.tolist()) != sorted(sorted_part.tolist()):
            return None
        order[first:end] = stepped
        in_window[first:end] = True
    position = np.empty(len(merged), dtype=np.int64)
    position[merged] = np.arange(len(merged))
    offset = 0
    for r, log in enumerate(logs):
        mine = replica_of == r
        at = position[offset : offset + len(log)]
        offset += len(log)
        if not _log_agrees(log, at, in_window[at], arrival_s[mine], taken_before[mine]):
            return None
    return order


def reach_of(clock: npt.NDArray[np.float64], same_time_s: Rounding) -> npt.NDArray[np.float64]:
    """Each clock plus its rounding (``same_time_s`` element-wise: the same float operations
    as on one clock)."""
    return np.asarray(clock + same_time_s(clock), dtype=np.float64)


def _near_ties(
    clock: npt.NDArray[np.float64], reach: npt.NDArray[np.float64]
) -> list[tuple[int, int]]:
    """The merged positions ``[first, end)`` of each run of clocks chained within rounding of
    each other that holds two unequal clocks, where the loop's lowest-index rule may reorder
    (``Simulation._earliest_busy``); the sort's order holds everywhere else."""
    linked = clock[1:] <= reach[:-1]
    near = linked & (clock[1:] != clock[:-1])
    windows: list[tuple[int, int]] = []
    for k in np.flatnonzero(near).tolist():
        if windows and k < windows[-1][1]:
            continue
        first, end = k, k + 2
        while first > 0 and linked[first - 1]:
            first -= 1
        while end < len(clock) and linked[end - 1]:
            end += 1
        windows.append((first, end))
    return windows


def _log_agrees(
    log: AdvanceLog,
    position: npt.NDArray[np.int64],
    in_window: npt.NDArray[np.bool_],
    arrival_s: npt.NDArray[np.float64],
    taken_before: npt.NDArray[np.int64],
) -> bool:
    """Whether the loop, running one replica's advances at merged ``position``s and its
    arrivals before the advance ``taken_before`` says, routes it what its log says and starts
    each advance at its logged clock (``_Loop.advance``'s checks, on arrays; the routing of
    advances ``in_window`` was checked by the loop itself)."""
    if not len(log):
        return not len(arrival_s)
    # Arrivals routed before each advance: those taken before a later merged position.
    routed = np.searchsorted(taken_before, position, side="right")
    if not np.array_equal(routed[~in_window], log.num_routed[~in_window]):
        return False
    if log.has_work[-1] or log.num_routed[-1] != len(arrival_s):
        return False  # the loop would advance it again, or route it more after its end
    # Each advance starts where the last ended, or, after it ran out of work, at the later of
    # that end and its next arrival (``Simulation._arrive``); at 0 before its first.
    was_busy = np.concatenate(([False], log.has_work[:-1]))
    before = np.concatenate(([0], log.num_routed[:-1]))
    now = np.concatenate(([0.0], log.end_s[:-1]))
    woken = ~was_busy
    if np.any(log.num_routed[woken] <= before[woken]):
        return False  # idle, and no arrival woke it
    expected = now.copy()
    expected[woken] = np.maximum(now[woken], arrival_s[before[woken]])
    return bool(np.array_equal(expected, log.start_s))


_NONE: list[list[Any]] = [[], [], [], []]  # no advances (read, never written)


def _columns(log: AdvanceLog) -> tuple[npt.NDArray[Any], ...]:
    return log.start_s, log.end_s, log.has_work, log.num_routed


def _step_by_step(
    arrival_s: list[float],
    replica_of: list[int],
    logs: list[AdvanceLog],
    same_time_s: Rounding,
) -> npt.NDArray[np.int64] | None:
    """``loop_order`` by running the loop's choices one iteration at a time (the reference)."""
    loop = _Loop(arrival_s, replica_of, logs)
    order = loop.advance(None, same_time_s)
    if order is None or any(loop.position[r] != len(log) for r, log in enumerate(logs)):
        return None
    return order


class _Loop:
    """``Simulation.run``'s choices on logged clocks: per replica its clock (inf without
    work), the clock plus rounding, its clock with or without work, the arrivals routed to
    it and its next advance in its log; and the next arrival. It holds the logs from each
    replica's advance ``base[r]`` on, and the arrivals still to come."""

    def __init__(
        self,
        arrival_s: list[float],
        replica_of: list[int],
        logs: Sequence[AdvanceLog | list[list[Any]]],
        base: list[int] | None = None,
    ) -> None:
        """``logs``: each replica's log, or its columns as lists from advance ``base`` on."""
        num = len(logs)
        self.base = [0] * num if base is None else base
        self.arrival_s, self.replica_of = arrival_s, replica_of
        columns: list[list[list[Any]]] = [
            [column[b:].tolist() for column in _columns(log)]
            if isinstance(log, AdvanceLog)
            else log
            for b, log in zip(self.base, logs, strict=True)
        ]
        self.starts, self.ends, self.has_work, self.num_routed = (
            [replica[i] for replica in columns] for i in range(4)
        )
        self.clocks = [math.inf] * num
        self.reach = [math.inf] * num
        self.now = [0.0] * num
        self.routed = [0] * num
        self.position = list(self.base)
        self.next_request = 0

    @classmethod
    def resumed(
        cls,
        arrival_s: npt.NDArray[np.float64],
        replica_of: npt.NDArray[np.int64],
        logs: list[AdvanceLog],
        done: npt.NDArray[np.int64],
        routed: npt.NDArray[np.int64],
        sorted_part: npt.NDArray[np.int64],
    ) -> _Loop:
        """The loop after each replica's first ``done`` advances with ``routed`` arrivals
        routed to it, holding what the window's advances read (``sorted_part``: their
        replicas in the sort's order): each of those replicas' advances in it, and the
        arrivals still to come before the advance after them (``arrival_s``, ``replica_of``;
        later ones come after every advance it runs). A replica with none in the window
        holds none: were the loop to choose it there, the window would not be the sort's
        (its caller compares the replicas' counts) and the sort could not decide."""
        counts = done.tolist()
        in_window = np.bincount(sorted_part, minlength=len(logs)).tolist()
        window: list[list[list[Any]]] = []
        for count, num, log in zip(counts, in_window, logs, strict=True):
            part = slice(count, count + num)
            window.append([column[part].tolist() for column in _columns(log)] if num else _NONE)
        loop = cls(arrival_s.tolist(), replica_of.tolist(), window, counts)
        for r, count in enumerate(counts):
            loop.routed[r] = int(routed[r])
            log = logs[r]
            seen = 0
            if count:
                loop.now[r] = float(log.end_s[count - 1])
                if log.has_work[count - 1]:
                    loop.clocks[r] = loop.now[r]
                seen = int(log.num_routed[count - 1])
            if loop.clocks[r] == math.inf and routed[r] > seen and count < len(log):
                # Woken since (an arrival its last advance ran past): at its next logged
                # start, which ``_log_agrees`` checks is the later of its clock and the
                # arrival's.
                loop.clocks[r] = float(log.start_s[count])
        return loop

    def advance(
        self, num_advances: int | None, same_time_s: Rounding
    ) -> npt.NDArray[np.int64] | None:
        """The replicas of the next ``num_advances`` advances (all, if None), in the loop's
        order, or None where a log disagrees with the loop."""
        clocks, reach, now, routed, position = (
            self.clocks, self.reach, self.now, self.routed, self.position,
        )  # fmt: skip
        for r, clock in enumerate(clocks):
            reach[r] = clock + same_time_s(clock) if clock < math.inf else math.inf
        arrival_s, replica_of, num_arrivals = self.arrival_s, self.replica_of, len(self.arrival_s)
        order: list[int] = []
        while num_advances is None or len(order) < num_advances:
            i = self.next_request
            arrival = arrival_s[i] if i < num_arrivals else math.inf
            earliest = min(clocks)
            if earliest < math.inf:
                # The lowest index whose clock is within rounding of the earliest.
                chosen = clocks.index(earliest)
                bound = reach[chosen]
                chosen = next((r for r in range(chosen) if clocks[r] <= bound), chosen)
            elif arrival == math.inf:
                break
            else:
                chosen = -1
            if chosen < 0 or arrival <= reach[chosen]:
                replica = replica_of[i]
                self.next_request = i + 1
                if clocks[replica] == math.inf:
                    now[replica] = clocks[replica] = clock = max(now[replica], arrival)
                    reach[replica] = clock + same_time_s(clock)
                routed[replica] += 1
                continue
            j = position[chosen]
            k = j - self.base[chosen]
            if k >= len(self.starts[chosen]) or self.num_routed[chosen][k] != routed[chosen]:
                return None
            if self.starts[chosen][k] != clocks[chosen]:
                return None
            position[chosen] = j + 1
            order.append(chosen)
            now[chosen] = end = self.ends[chosen][k]
            work = self.has_work[chosen][k]
            clocks[chosen] = end if work else math.inf
            reach[chosen] = end + same_time_s(end) if work else math.inf
        return np.asarray(order, dtype=np.int64)
