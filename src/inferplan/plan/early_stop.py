"""Stop a planner simulation as soon as its SLO verdict is certain to be a miss.

A probe or a fleet run only answers "does every class meet its SLOs (each within ``ratio`` x
its limit)?". Once enough requests of a class are *certain* to exceed a TTFT or E2EL limit,
the answer is no, whatever the rest of the run does, so the run stops there (an overloaded
run would otherwise simulate its whole queue draining) and the HTTP front end
(``engine/frontend.py``) is not computed for it.

Why a partial run's figures are lower bounds of the final, client-side ones:

- A request with a first token (a finish) has its engine TTFT (E2EL) fixed: the engine never
  moves a first token or a finish earlier, and the front end only delays what the client
  sees (its FCFS server finishes a token's job at or after the token is emitted).
- A request that has arrived and has no first token (no finish) yet gets it at the end of a
  step of its replica, at or after that replica's clock; every replica with work is at or
  after the earliest such clock, so ``earliest clock - arrival`` bounds its TTFT (E2EL).
- The tokenizer stage (``engine/tokenizer_stage.py``) only delays when a request reaches the
  scheduler: latencies from the delayed arrival are at most the client's.
- A rejected request makes its class miss every percentile target (``slo.evaluate``).

Percentiles are numpy's linear interpolation over the class's ``N`` requests (``slo.evaluate``:
all complete, or the class misses anyway): the value is at least the sorted value at index
``floor((N - 1) p / 100)``, so once ``N - floor((N - 1) p / 100)`` requests exceed the limit,
the percentile does too (``misses_needed``). TPOT, ITL and goodput are not watched: the front
end can shorten a request's TPOT (a delayed first token), and one ITL histogram serves every
class. A relative margin of 1e-9 covers the rounding of the interpolation and of the front
end's evenly spread token times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from inferplan.engine.replica import Replica
from inferplan.engine.simulator import Simulation
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.plan.request import PlanRequest
from inferplan.plan.slo import class_targets

WATCHED = ("ttft", "e2el")
MARGIN = 1e-9
# Advances of the event loop between two checks: a check reads every watched request (numpy,
# a few tens of microseconds), an advance is one step or one decode stretch.
CHECK_EVERY = 64


class CertainMissError(Exception):
    """The run's verdict is certain: ``label`` (``class:target``) exceeds its limit x ratio."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.label = label


@dataclass(frozen=True)
class Watch:
    label: str  # class:target, as ``slo.first_broken`` names it
    rows: np.ndarray  # the class's requests in the run
    metric: str  # ttft | e2el | rejected (any percentile target of the class)
    limit_s: float  # the target's limit x the ratio, with the margin
    needed: int  # requests over ``limit_s`` that make the percentile exceed it


def misses_needed(num: int, percentile: float) -> int:
    """Fewest of ``num`` values above a limit that put numpy's linearly interpolated
    ``percentile`` above it: every sorted value from index ``floor((num - 1) p / 100)`` up
    (computed as numpy computes the index)."""
    return num - math.floor((num - 1) * (percentile / 100.0))


def watches(request: PlanRequest, class_ids: np.ndarray, ratio: float) -> list[Watch]:
    """What can make a run of these requests certainly miss ``ratio`` x an SLO."""
    out = []
    for k, cls in enumerate(request.traffic):
        rows = np.flatnonzero(class_ids == k)
        if not rows.size:
            continue
        targets = [t for t in class_targets(cls.slo) if t.percentile is not None]
        if targets:  # a rejected request: every percentile target of the class is missed
            out.append(Watch(f"{cls.name}:{targets[0].key}", rows, "rejected", math.inf, 1))
        for t in targets:
            if t.metric in WATCHED and t.limit_s is not None and t.percentile is not None:
                limit_s = t.limit_s * ratio * (1.0 + MARGIN)
                needed = misses_needed(rows.size, t.percentile)
                out.append(Watch(f"{cls.name}:{t.key}", rows, t.metric, limit_s, needed))
    return out


def certain_miss(records: RequestRecords, items: list[Watch], now_s: float) -> str | None:
    """The first watched target certain to be missed, or None; ``now_s``: a time at or before
    every pending request's next event (inf when none is pending)."""
    for w in items:
        status = records.status[w.rows]
        if w.metric == "rejected":
            if np.any(status == int(RequestStatus.REJECTED)):
                return w.label
            continue
        arrival = records.arrival_s[w.rows]
        column = records.first_token_s if w.metric == "ttft" else records.finish_s
        at = column[w.rows]
        pending = np.isnan(at) & ~np.isnan(arrival) & (status != int(RequestStatus.REJECTED))
        at = np.where(pending, now_s, at)
        with np.errstate(invalid="ignore"):
            over = int(np.count_nonzero(at - arrival > w.limit_s))
        if over >= w.needed:
            return w.label
    return None


class MissWatch:
    """The event loop's ``check``: every ``CHECK_EVERY`` advances, raise ``CertainMissError`` when a
    watched target is certain to be missed."""

    def __init__(self, sim: Simulation, request: PlanRequest, ratio: float) -> None:
        self.sim = sim
        self.items = watches(request, sim.records.class_ids, ratio)
        self.calls = 0

    def __call__(self, replica: Replica) -> None:
        self.calls += 1
        if self.calls % CHECK_EVERY:
            return
        clocks = [r.now for r in self.sim.replicas if r.has_work]
        label = certain_miss(self.sim.records, self.items, min(clocks, default=math.inf))
        if label is not None:
            raise CertainMissError(label)

    def final(self) -> str | None:
        """After the run: a target certain to be missed behind any front end, or None."""
        return certain_miss(self.sim.records, self.items, math.inf)
