"""Replicas simulated apart, in parallel processes, with the interleaved run's exact result.

Where routing reads no replica state (``round_robin``: ``engine/routed_arrivals.py``) every
replica's request stream is known before the run, so each replica can run alone to its end:
route its own arrivals that are due at its clock (``Simulation._arrive``'s rule, within
``same_time_s``), advance (``Simulation._advance_once``), repeat. Replicas share nothing an
advance reads: each writes its own requests' records, and only the ITL histogram's moments
(whose float sums depend on the order of adds) are shared. So groups of replicas run in worker
processes (``fork``), each replica writing an ``ItlLog`` and an ``AdvanceLog``; the parent then
replays the event loop's choices on the logged clocks (``engine/loop_order.py``), which checks
that every advance saw the arrivals the interleaved loop would have routed to it by then, and
applies the ITL updates in the loop's order. The result is byte-identical to
``Simulation.run``'s; where the check fails (an arrival within rounding of two replicas'
tied clocks), a worker raises, or ``fork`` is not available, the run falls back to
``Simulation.run``, so the output never depends on the number of workers.

What runs apart: fast mode, several replicas, round robin, no client concurrency limit, and no
KV tiers, admission policies or speculative decoding (their state or timers are per run, or an
advance reads the global next arrival), and ``Simulation`` itself (not a subclass). CPU seconds
are those of the interleaved run plus the logs and the replay (a few per cent); wall seconds
divide by the workers up to the number of replicas.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from inferplan.engine.loop_order import AdvanceLog, loop_order, same_time_s
from inferplan.engine.replica import Replica
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.errors import InferplanError
from inferplan.metrics.itl_log import ItlLog, replay_into
from inferplan.metrics.records import RequestStatus
from inferplan.metrics.trace_log import StepTraceLog


@dataclass
class ReplicaRun:
    """What one replica run apart hands back: its requests' record rows and its own state."""

    index: int
    columns: dict[str, npt.NDArray[Any]]  # record column -> the rows of its requests
    trace: Any  # StepTrace
    cache: Any  # its prefix cache (or None)
    num_steps: int
    idle_slot_steps: int
    counts: npt.NDArray[np.float64]  # ITL bin counts
    is_integral: bool
    updates: npt.NDArray[np.float64]  # ITL moment updates in its order, as rows (``ItlLog``)
    update_offsets: npt.NDArray[np.int64]  # the first update of each advance, and the end
    advances: AdvanceLog


def runs_apart(sim: Simulation) -> bool:
    """Whether ``sim`` can run its replicas apart (the module docstring)."""
    cfg = sim.cfg
    return (
        type(sim) is Simulation
        and sim.own_arrivals is not None
        and cfg.admission is None
        and cfg.speculative is None
        and cfg.scheduler.kv_tiers is None
        and sim.next_request == 0
        and not any(r.has_work for r in sim.replicas)
    )


AUTO_MIN_REQUESTS = 20_000  # below this, starting workers costs about what they save


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def auto_workers(sim: Simulation, cores: int | None = None) -> int:
    """``--sim-workers auto``: one process per usable core, up to one per replica, where the
    replicas run apart and the run has ``AUTO_MIN_REQUESTS`` requests or more; else 1. The
    output is the same for any count, so only the wall time depends on it."""
    if not runs_apart(sim) or sim.workload.num_requests < AUTO_MIN_REQUESTS:
        return 1
    return max(1, min(len(sim.replicas), usable_cores() if cores is None else cores))


def run_apart(
    sim: Simulation, workers: int, on_progress: Callable[[int], None] | None = None
) -> SimulationResult:
    """``sim.run()``'s result, with groups of replicas run apart in ``workers`` processes
    (in this process when 1); ``sim.run()`` itself where they cannot run apart.
    ``on_progress`` hears of finished requests as the workers finish them (every
    ``PROGRESS_EVERY``, through a shared counter) and of the rest at the end."""
    if workers < 1:
        raise InferplanError(f"--sim-workers: must be >= 1, got {workers}")
    if not runs_apart(sim):
        return sim.run(on_progress=on_progress)
    progress = _Progress(on_progress)
    merged = try_apart(sim, workers, progress)
    if merged is None:  # not the interleaved run: run that instead, from the start
        model = sim.replicas[0].model
        return Simulation(sim.workload, sim.cfg, model).run(on_progress=on_progress)
    progress.settle(sim.num_done)
    return merged


PROGRESS_EVERY = 1000  # finished requests a worker counts before it tells the parent
POLL_S = 0.25  # how often the parent reads the workers' count while it waits


class _Progress:
    """Finished requests counted in a counter the workers share (fork), passed on to
    ``on_progress`` as they come; ``settle`` passes on what is left of the total."""

    def __init__(self, on_progress: Callable[[int], None] | None) -> None:
        self.on_progress = on_progress
        self.shared: Any = None  # a ``multiprocessing.Value`` in the workers' context
        self.reported = 0

    def add(self, done: int) -> None:
        """A worker's (or this process's) ``done`` more finished requests."""
        if self.shared is not None:
            with self.shared.get_lock():
                self.shared.value += done
        else:
            self.poll(self.reported + done)

    def poll(self, total: int | None = None) -> None:
        if self.on_progress is None:
            return
        now = int(self.shared.value) if total is None else total
        if now > self.reported:
            self.on_progress(now - self.reported)
            self.reported = now

    def settle(self, total: int) -> None:
        self.poll(total)


def try_apart(
    sim: Simulation, workers: int, progress: _Progress | None = None
) -> SimulationResult | None:
    """The replicas of ``sim`` (``runs_apart``) run apart and merged; None where the result
    would not be the interleaved run's (``sim`` may then be spent: build a new one)."""
    progress = _Progress(None) if progress is None else progress
    if workers == 1:
        runs = _run_group(sim, list(range(len(sim.replicas))), progress)
    else:
        runs = _in_workers(sim, workers, progress)
    return None if runs is None else _merge(sim, runs)


def _in_workers(sim: Simulation, workers: int, progress: _Progress) -> list[ReplicaRun] | None:
    """Each replica a task of its own, in index order, for ``workers`` processes; each result
    taken as it comes (its record rows written, ``_take_rows``), so a worker holds one
    replica's result at a time and the parent no record column twice."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("fork")  # the workers inherit ``sim`` unpickled
    progress.shared = ctx.Value("q", 0)
    own_ids = _own_ids(sim)
    runs: list[ReplicaRun] = []
    with ProcessPoolExecutor(
        min(workers, len(sim.replicas)),
        mp_context=ctx,
        initializer=_adopt,
        initargs=(sim, progress),
    ) as ex:
        pending = {ex.submit(_run_adopted, [index]) for index in range(len(sim.replicas))}
        while pending:
            done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            progress.poll()
            for part in (future.result() for future in done):
                if part is None:  # a stuck replica: the interleaved run says why
                    for future in pending:
                        future.cancel()
                    return None
                for run in part:
                    _take_rows(sim, run, own_ids[run.index])
                runs.extend(part)
    return sorted(runs, key=lambda run: run.index)


# A worker process's own copy of the simulation and the parent's progress counter (fork).
_ADOPTED: list[tuple[Simulation, _Progress]] = []


def _adopt(sim: Simulation, progress: _Progress) -> None:
    _ADOPTED.append((sim, progress))


def _run_adopted(group: list[int]) -> list[ReplicaRun] | None:
    sim, progress = _ADOPTED[-1]
    return _run_group(sim, group, progress)


def _run_group(
    sim: Simulation, group: list[int], progress: _Progress | None = None
) -> list[ReplicaRun] | None:
    """Run each replica of ``group`` alone to its end; None where one is stuck (the
    interleaved run then says why). Finished requests are counted in ``progress``."""
    progress = _Progress(None) if progress is None else progress
    own_ids = _own_ids(sim)
    runs = []
    for index in group:
        run = _run_alone(sim, sim.replicas[index], own_ids[index].tolist(), progress)
        if run is None:
            return None
        runs.append(run)
    return runs


def _run_alone(
    sim: Simulation, replica: Replica, ids: list[int], progress: _Progress
) -> ReplicaRun | None:
    """``replica`` alone: its own arrivals routed as ``Simulation.run`` routes them (the
    arrivals due within rounding of its clock, before it advances), one advance at a time."""
    own, rec = sim.own_arrivals, sim.records
    assert own is not None
    times: list[float] = rec.dispatch_s[ids].tolist()
    itl = _log_metrics(replica)
    start_s: list[float] = []
    end_s: list[float] = []
    has_work: list[bool] = []
    num_routed: list[int] = []
    offsets: list[int] = []
    index, add, advance = replica.index, replica.add_request, sim._advance_once
    pos, num, unreported = 0, len(ids), 0
    busy = replica.has_work
    while True:
        while pos < num:  # the arrivals due at its clock, as ``Simulation.run`` routes them
            if not busy:
                replica.now = max(replica.now, times[pos])
            elif times[pos] > replica.now + 1e-9 * (replica.now + 1.0):  # ``same_time_s``
                break
            own.note_arrived(index)
            add(ids[pos])
            pos += 1
            busy = replica.has_work
        if not busy:
            break
        steps, now = replica.num_steps, replica.now
        start_s.append(now)
        num_routed.append(pos)
        offsets.append(itl.num_updates)
        advance(replica, times[pos] if pos < num else math.inf)
        if replica.num_steps == steps and replica.now == now and not len(replica.running):
            return None  # stuck (``Simulation._stuck``)
        busy = replica.has_work
        end_s.append(replica.now)
        has_work.append(busy)
        finished = replica.on_finish
        if finished:
            unreported += len(finished)
            finished.clear()
            if unreported >= PROGRESS_EVERY:
                progress.add(unreported)
                unreported = 0
    replica.running.rows.flush_itl()
    offsets.append(itl.num_updates)
    if isinstance(replica.trace, StepTraceLog):
        replica.trace.settle()
    return ReplicaRun(
        index=index,
        columns=_record_rows(sim, ids),
        trace=replica.trace,
        cache=replica.pool.cache,
        num_steps=replica.num_steps,
        idle_slot_steps=replica.idle_slot_steps,
        counts=itl.counts.copy(),
        is_integral=itl.is_integral,
        updates=itl.rows(),
        update_offsets=np.asarray(offsets, dtype=np.int64),
        advances=AdvanceLog(start_s, end_s, has_work, num_routed),
    )


def _log_metrics(replica: Replica) -> ItlLog:
    """Point ``replica``'s ITL histogram at a log (``metrics/itl_log.py``); its ITL log. Its KV
    trace is already a ``StepTraceLog`` (``simsetup.build_replicas`` builds every replica's)."""
    itl = ItlLog()
    replica.itl = itl
    return itl


# Columns the run does not write, or writes outside a replica (the arrival, in ``_merge``).
_NOT_WRITTEN = {"arrival_s", "dispatch_s", "input_tokens", "class_ids", "requested_output_tokens"}


def _record_rows(sim: Simulation, ids: list[int]) -> dict[str, npt.NDArray[Any]]:
    """The rows of ``ids`` of every record column a replica writes."""
    rows = np.asarray(ids, dtype=np.int64)
    out = {}
    for spec in fields(sim.records):
        column = getattr(sim.records, spec.name)
        if isinstance(column, np.ndarray) and spec.name not in _NOT_WRITTEN:
            out[spec.name] = column[rows]
    return out


def _own_ids(sim: Simulation) -> list[npt.NDArray[np.int64]]:
    """Per replica, the requests routed to it (``RoutedArrivals``' plan), in arrival order."""
    assert sim.own_arrivals is not None
    routed = np.flatnonzero(np.asarray(sim._routed_at_arrival, dtype=bool))
    replica_of = sim.own_arrivals.replica_of[routed]
    return [routed[replica_of == index] for index in range(len(sim.replicas))]


def _take_rows(sim: Simulation, run: ReplicaRun, ids: npt.NDArray[np.int64]) -> None:
    """Write ``run``'s record rows (its requests ``ids``) into ``sim``'s records, and drop
    them from ``run``."""
    for name, values in run.columns.items():
        getattr(sim.records, name)[ids] = values
    run.columns = {}


def _merge(sim: Simulation, runs: list[ReplicaRun]) -> SimulationResult | None:
    """The interleaved run's result from the replicas' runs, or None where the event loop
    would not have run them so (``loop_order``) or the ITL counts are not integral."""
    if not all(run.is_integral for run in runs):
        return None
    assert sim.own_arrivals is not None
    routed = np.asarray(sim._routed_at_arrival, dtype=bool)
    arrival_s = sim.records.dispatch_s[routed]
    replica_of = sim.own_arrivals.replica_of[routed]
    order = loop_order(arrival_s, replica_of, [run.advances for run in runs], same_time_s)
    if order is None:
        return None
    rec = sim.records
    rec.arrival_s[:] = rec.dispatch_s  # every request reaches the server at its send time
    rec.status[~routed] = int(RequestStatus.REJECTED)
    sim.num_done = rec.num_requests
    own_ids = _own_ids(sim)
    for run in runs:
        _take_rows(sim, run, own_ids[run.index])
        replica = sim.replicas[run.index]
        replica.trace, replica.pool.cache = run.trace, run.cache
        replica.num_steps, replica.idle_slot_steps = run.num_steps, run.idle_slot_steps
    sim.next_request = rec.num_requests
    counts = np.sum([run.counts for run in runs], axis=0)
    replay_into(sim.itl, counts, _updates_in_order(runs, order))
    return sim._result()


REPLAY_ADVANCES = 1 << 16  # advances whose ITL updates are gathered and folded at once


def _updates_in_order(
    runs: list[ReplicaRun], order: npt.NDArray[np.int64]
) -> Iterator[npt.NDArray[np.float64]]:
    """Every replica's ITL update rows, advance by advance in the loop's ``order``, in
    blocks of ``REPLAY_ADVANCES`` advances (so the parent holds one block's copy at a time).
    A block's advances of one replica are consecutive in its own log, so their rows are one
    slice of its updates: the slices are joined, then put in the loop's order."""
    taken = [0] * len(runs)  # per replica, its advances in earlier blocks
    for block in range(0, len(order), REPLAY_ADVANCES):
        part = order[block : block + REPLAY_ADVANCES]
        first = np.empty(len(part), dtype=np.int64)  # per advance, its first row in ``joined``
        sizes = np.empty(len(part), dtype=np.int64)
        slices, base = [], 0
        for r, run in enumerate(runs):
            mine = np.flatnonzero(part == r)
            offsets = run.update_offsets[taken[r] : taken[r] + len(mine) + 1]
            first[mine] = base + offsets[:-1] - offsets[0]
            sizes[mine] = np.diff(offsets)
            slices.append(run.updates[offsets[0] : offsets[-1]])
            base += int(offsets[-1] - offsets[0])
            taken[r] += len(mine)
        joined = np.concatenate(slices)
        starts = np.cumsum(sizes) - sizes
        yield joined[np.repeat(first - starts, sizes) + np.arange(base)]
