"""Class pools: the data-parallel replicas split into pools by workload class (DESIGN §2, 6).

Owns the plain-data specs of ``simulate --pools`` and ``--repartition`` and their parsing, the
class -> pool map, and the ``class_pools`` section of the run's JSON. The simulation itself
(routing within a pool, the periodic check and replica moves) is ``classpool_sim.py``.

Rules (written down in ``docs/pools.md``):

- ``--pools reasoning=3,chat=5`` splits the replicas (the counts must add up to the replicas,
  ``--data-parallel-size``). A pool serves the workload class of its name; classes with no pool
  of their name go to the default pool (``--default-pool``, else the pool listed last). Every
  pool but the default must name a class of the workload: a misspelt pool would otherwise
  silently serve nothing.
- Within a pool the run's ``--router`` picks the replica, over the pool's replicas only.
- ``--repartition queue:N`` or ``ttft:S`` checks every ``--repartition-interval-s`` seconds.
  A pool is hot when its signal exceeds the threshold; a donor is another pool with at least
  two serving replicas and a signal at most ``DONOR_FRACTION`` of the threshold (hysteresis: a
  donor is well clear of the threshold, so giving a replica away does not make it hot at the
  next check). One move at a time; after a move ends no new one starts for
  ``--repartition-cooldown-s``. A move takes the donor's replica with the fewest requests
  (quickest drain), stops routing to it, lets it finish every running and queued request (the
  drain: capacity lost to both pools), then it joins the hot pool. The pools serve the same model
  with the same settings, so a drained replica joins with no reload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferplan.errors import InferplanError
from inferplan.metrics.buckets import group_summary
from inferplan.metrics.latency import request_latencies
from inferplan.metrics.records import RequestRecords

SIGNALS = ("queue", "ttft")
DONOR_FRACTION = 0.5  # a donor pool's signal is at most this share of the threshold
DEFAULT_INTERVAL_S = 5.0
DEFAULT_COOLDOWN_S = 60.0
MAX_INTERVAL_S = 86_400.0 * 365


@dataclass(frozen=True)
class PoolSpec:
    name: str
    num_replicas: int


@dataclass(frozen=True)
class Repartition:
    """When to move a replica: ``signal`` above ``threshold`` (requests waiting for ``queue``,
    seconds for ``ttft``), checked every ``interval_s``; ``cooldown_s`` after a move ends."""

    signal: str
    threshold: float
    interval_s: float = DEFAULT_INTERVAL_S
    cooldown_s: float = DEFAULT_COOLDOWN_S


@dataclass(frozen=True)
class ClassPools:
    pools: tuple[PoolSpec, ...]
    default_pool: str
    repartition: Repartition | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pools)

    def first_replicas(self) -> list[list[int]]:
        """Replica indices of each pool at the start: consecutive, in the order listed."""
        out, start = [], 0
        for pool in self.pools:
            out.append(list(range(start, start + pool.num_replicas)))
            start += pool.num_replicas
        return out

    def pool_of_class(self, class_names: tuple[str, ...]) -> np.ndarray:
        """Pool index per class id: the pool of the class's name, else the default pool."""
        index = {name: i for i, name in enumerate(self.names)}
        default = index[self.default_pool]
        missing = [n for n in self.names if n != self.default_pool and n not in class_names]
        if missing:
            raise InferplanError(
                f"--pools: pool {missing[0]!r} names no class of the workload (classes: "
                f"{', '.join(class_names)}); a pool serves the class of its name, the default "
                f"pool ({self.default_pool!r}) every other class"
            )
        return np.array([index.get(name, default) for name in class_names], dtype=np.int64)


def _count(text: str, entry: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip():
        raise InferplanError(
            f"--pools: {entry!r}: the replica count must be a whole number >= 1 "
            "(e.g. reasoning=3,chat=5)"
        )
    return value


def parse_pools(text: str, num_replicas: int, default_pool: str | None) -> tuple[PoolSpec, ...]:
    """``NAME=COUNT[,NAME=COUNT...]`` -> pools; the counts must add up to ``num_replicas``."""
    pools: list[PoolSpec] = []
    for entry in text.split(","):
        name, sep, count = entry.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InferplanError(
                f"--pools: expected NAME=COUNT[,NAME=COUNT...] (e.g. reasoning=3,chat=5), "
                f"got {entry!r}"
            )
        if name in (p.name for p in pools):
            raise InferplanError(f"--pools: pool {name!r} is listed twice")
        pools.append(PoolSpec(name, _count(count, entry)))
    total = sum(p.num_replicas for p in pools)
    if total != num_replicas:
        raise InferplanError(
            f"--pools: the pools' replicas add up to {total}, not the {num_replicas} replicas "
            "of --data-parallel-size"
        )
    names = [p.name for p in pools]
    if default_pool is not None and default_pool not in names:
        raise InferplanError(
            f"--default-pool: {default_pool!r} is not a pool of --pools (pools: {', '.join(names)})"
        )
    return tuple(pools)


def parse_repartition(text: str, interval_s: float | None, cooldown_s: float | None) -> Repartition:
    """``queue:N`` (requests waiting, N >= 1) or ``ttft:S`` (seconds > 0)."""
    signal, sep, value = text.partition(":")
    if signal not in SIGNALS or not sep:
        raise InferplanError(
            f"--repartition: expected queue:N (waiting requests) or ttft:S (seconds), got {text!r}"
        )
    try:
        threshold = float(value)
    except ValueError:
        threshold = math.nan
    if not (0 < threshold < math.inf) or (signal == "queue" and threshold != int(threshold)):
        kind = "a whole number >= 1" if signal == "queue" else "seconds > 0"
        raise InferplanError(f"--repartition: the {signal} threshold must be {kind}, got {value!r}")
    return Repartition(
        signal,
        threshold,
        DEFAULT_INTERVAL_S if interval_s is None else interval_s,
        DEFAULT_COOLDOWN_S if cooldown_s is None else cooldown_s,
    )


def class_pools(
    pools: str,
    num_replicas: int,
    default_pool: str | None = None,
    repartition: str | None = None,
    interval_s: float | None = None,
    cooldown_s: float | None = None,
) -> ClassPools:
    """The specs from the flags' text (each error names its flag)."""
    specs = parse_pools(pools, num_replicas, default_pool)
    rule = None if repartition is None else parse_repartition(repartition, interval_s, cooldown_s)
    return ClassPools(specs, default_pool or specs[-1].name, rule)


# ---- the JSON section ------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """One replica moved: routing to it stopped at ``start_s``; it joined ``to_pool`` at
    ``joined_s`` once its last request finished (``drain_s`` later). Times on the run's clock."""

    replica: int
    from_pool: str
    to_pool: str
    start_s: float
    joined_s: float
    signal: float  # the hot pool's signal at the check that started the move

    @property
    def drain_s(self) -> float:
        return self.joined_s - self.start_s


def replica_seconds(timeline: list[tuple[float, int]], end_s: float) -> float:
    """The integral of a pool's replica count from 0 to ``end_s``."""
    total = 0.0
    for (t0, n), (t1, _) in zip(timeline, [*timeline[1:], (end_s, 0)], strict=True):
        total += n * max(0.0, min(t1, end_s) - t0)
    return total


def class_pools_json(
    spec: ClassPools,
    records: RequestRecords,
    pool_of_request: np.ndarray,
    timelines: list[list[tuple[float, int]]],
    moves: list[Move],
    duration_s: float,
) -> dict[str, Any]:
    """Per pool: its classes, replicas over time, requests and latency spreads (seconds, as the
    ``classes`` groups), queue peak; the moves with their drains; the capacity drains lost."""
    latencies = request_latencies(records)
    mapping = spec.pool_of_class(records.class_names)
    pools: dict[str, Any] = {}
    for k, pool in enumerate(spec.pools):
        mask = pool_of_request == k
        group = group_summary(mask, records, latencies, None, duration_s)
        for key in ("good_requests", "slo_attainment"):
            del group[key]
        pools[pool.name] = {
            "classes": [n for c, n in enumerate(records.class_names) if mapping[c] == k],
            "replicas_initial": pool.num_replicas,
            "replicas_final": timelines[k][-1][1],
            "replicas_over_time": [{"time_s": t, "replicas": n} for t, n in timelines[k]],
            "replica_s": replica_seconds(timelines[k], duration_s),
            "queue_peak": queue_peak(records, mask),
            **group,
        }
    drained = sum(m.drain_s for m in moves)
    total = duration_s * sum(p.num_replicas for p in spec.pools)
    rule = spec.repartition
    return {
        "default_pool": spec.default_pool,
        "repartition": None
        if rule is None
        else {
            "signal": rule.signal,
            "threshold": rule.threshold,
            "interval_s": rule.interval_s,
            "cooldown_s": rule.cooldown_s,
            "donor_fraction": DONOR_FRACTION,
        },
        "pools": pools,
        "moves": [
            {
                "replica": m.replica,
                "from": m.from_pool,
                "to": m.to_pool,
                "start_s": m.start_s,
                "joined_s": m.joined_s,
                "drain_s": m.drain_s,
                "signal": m.signal,
            }
            for m in moves
        ],
        "num_moves": len(moves),
        "drain_replica_s": drained,
        "drain_capacity_fraction": drained / total if total > 0 else None,
    }


def queue_peak(records: RequestRecords, mask: np.ndarray) -> int:
    """Most requests of ``mask`` waiting at once for their first admission (arrival to first
    scheduled; a rejected request never waits). Ties: a start before an end at the same time
    is not counted as overlapping (the end is processed first)."""
    starts = records.arrival_s[mask]
    ends = records.first_scheduled_s[mask]
    waited = np.isfinite(ends)
    if not np.any(waited):
        return 0
    times = np.concatenate([starts[waited], ends[waited]])
    deltas = np.concatenate([np.ones(int(waited.sum())), -np.ones(int(waited.sum()))])
    order = np.lexsort((deltas, times))  # ends (-1) before starts (+1) at the same time
    return int(np.max(np.cumsum(deltas[order])))
