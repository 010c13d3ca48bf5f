"""Runs of identical doomed-head cycles at once (``engine/thrash.py``; issue 10, item 3).

Above capacity with long outputs (``long10x`` in ``benchmarks/bench_regimes.py``) a full pool
puts its queue head through the same cycle thousands of times between two decoder finishes:
admit its first chunk, run ``m - 1`` more chunks while their blocks fit, preempt it at the
``m + 1``-th step. ``thrash._Cycles.next_cycle`` takes one cycle per call (its plan, its step
times, a KV trace record per step: about 20 us of Python per cycle). Consecutive cycles differ
only in the decoders' blocks, which grow at the steps where a row crosses a block boundary
(the histogram of the rows' offsets in their last block gives every step's crossings), and in
the decode context, which grows by ``n`` a step. So the cycles that keep the first one's plan
(``_Cycles._plan``'s tests, evaluated for every candidate cycle at once on the cumulative
crossings), whose steps stay on the same step-time lines (each line holds below its ``limit``)
and whose last step starts before the next arrival is seen, are taken in one vector pass:

- each step's seconds is its line's ``a + b * C``, the same float as the scalar path's;
- the clock is the sequential sum of the step seconds (``np.cumsum`` adds in order, as the
  scalar path's ``now += step``), so the arrival test sees the same floats;
- the KV trace takes every step's record at once (``StepTrace.record_many``, the same state as
  one ``record`` per step).

Results are therefore bit for bit those of one cycle at a time (``tests/engine/test_thrash.py``
compares both); a run shorter than two cycles is left to ``next_cycle``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from inferplan.engine.thrash import _Cycles

MAX_RUN_CYCLES = 256  # candidate cycles evaluated at once (a longer run is several)

# The steps of a run: (step start times and the run's end, KV blocks in use per step, step
# seconds, cycles, the decoders' blocks after the run).
Run = tuple[np.ndarray, np.ndarray, np.ndarray, int, int]


def cycle_run(
    c: _Cycles, plan: list[int], next_arrival_s: float, same_time_s: Callable[[Any], Any]
) -> Run | None:
    """The longest run (at least two cycles) of cycles with ``plan`` (head blocks per step,
    the last 0: the step that preempts the head) from the cycles' state, or None."""
    m = len(plan) - 1  # steps with a head chunk; step ``m`` preempts the head
    length, s = m + 1, c.num_steps
    room = c.steps_left - s - m - 2  # cycle k ends before the first finish iff k * length <= room
    if room < length:
        return None
    count = min(room // length + 1, MAX_RUN_CYCLES)
    held = c.held + c.crossings_from(s, count * length).reshape(count, length)
    ok = _keeps_plan(c, plan, held)
    context = c.context + c.n * (s + np.arange(count * length)).reshape(count, length)
    a, b, limit = _lines(c, m, context[0])
    ok &= (context < limit).all(axis=1)  # the scalar path would take another line
    durations: np.ndarray = a + b * context
    times = np.cumsum(np.concatenate(([c.now], durations.ravel())))
    last_start = times[m : count * length : length]  # each cycle's last step starts then
    ok &= next_arrival_s > last_start + same_time_s(last_start)
    num_cycles = count if bool(ok.all()) else int(ok.argmin())
    if num_cycles < 2:
        return None
    steps = num_cycles * length
    outside = c.r.cfg.num_blocks - c.usable
    blocks: np.ndarray = (held[:num_cycles] + np.array(plan)).ravel() + outside
    step_s: np.ndarray = durations[:num_cycles].ravel()
    return (
        times[: steps + 1],
        blocks,
        step_s,
        num_cycles,
        int(held[num_cycles - 1, -1]),
    )


def _keeps_plan(c: _Cycles, plan: list[int], held: np.ndarray) -> np.ndarray:
    """Per candidate cycle, ``_Cycles._plan``'s tests with this plan (``held``: the decoders'
    blocks after each step's crossings): every chunk's blocks fit beside them, the next chunk's
    do not, and the decoders themselves fit at the preempting step."""
    m, usable = len(plan) - 1, c.usable
    next_need = c._blocks(min((m + 1) * c.chunk, c.tokens))
    fits = (held[:, :m] + np.array(plan[:m]) <= usable).all(axis=1)
    last = held[:, m]
    result: np.ndarray = fits & (last + next_need > usable) & (last <= usable)
    return result


def _lines(c: _Cycles, m: int, context: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's line ``(a, b, limit)`` at the first cycle's ``context``: the head's chunk
    ``j`` beside the decoders (``_Cycles._step_s``, which caches it), then the decode step."""
    a, b, limit = [], [], []
    for i in range(m):
        c._step_s(i + 1, int(context[i]))  # makes ``c.lines[i + 1]`` the line at this context
        line = c.lines[i + 1]
        a.append(line[0])
        b.append(line[1])
        limit.append(line[2])
    decode = c.r.model.decode_line(c.n, int(context[m]))
    a.append(decode[0])
    b.append(decode[1])
    limit.append(decode[2])
    return np.array(a), np.array(b), np.array(limit)
