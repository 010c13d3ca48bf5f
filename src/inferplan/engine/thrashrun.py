"""A doomed-head pass's cycles planned in scalars, their steps written once (``engine/thrash.py``).

Above capacity with long outputs (``long10x`` in ``benchmarks/bench_regimes.py``) a full pool
puts its queue head through the same cycle thousands of times between two decoder finishes:
admit its first chunk, run ``m - 1`` more chunks while their blocks fit, preempt it at the
``m + 1``-th step. One cycle per call (its plan, its step times, a KV trace record per step;
``tests/engine/thrash_reference.py``'s ``next_cycle``, the reference) costs about 20 us of
Python per cycle. Consecutive cycles differ
only in the decoders' blocks, which grow at the steps where a row crosses a block boundary, and
in the decode context, which grows by ``n`` a step; the plan's ``m`` only falls as the decoders
grow. So ``take_cycles`` plans the pass as *segments*, each the cycles that keep one plan and
one set of step-time lines, and costs a few scalar operations per segment, not per cycle:

- **Blocks in closed form.** Row offsets in their last block repeat every ``B`` steps, so the
  decoders' crossings over steps ``[0, t)`` are ``(t // B) * n + Q[t % B]`` (``Q``: prefix sums
  of one period of the offset histogram) and the last step whose cumulative crossings stay
  within a bound is one division and one ``bisect``. Each test of ``_Cycles._plan`` is monotone
  in the cycle (the decoders' blocks only grow, the head's blocks per step rise with its
  chunk), so the last cycle that keeps the plan is where its binding test flips: the head's
  ``m``-th chunk beside the decoders, the decoders alone at the preempting step, the first
  finish (``steps_left``), and each line's ``limit`` (a linear bound on the context).
- **The arrival in floats.** A cycle runs only if its last step starts before the loop would
  take the arrival; the clock is the sequential float sum of the step seconds, so where an
  upper bound on the segment's end (every step at its line's larger end, with a margin of
  1e-9, far above the sum's rounding) already clears the arrival the segment is taken whole,
  and otherwise the exact clock is made (the pending steps' ``cumsum``) and the segment cut at
  the first cycle that does not start in time, as one cycle at a time would.
- **The steps written once.** At the pass's end (or at such a cut) every pending segment's step
  seconds are its line's ``a + b * C`` (the same float as the scalar path's), the clock their
  ``np.cumsum`` from ``now`` (adds in order, as ``now += step``), and the KV trace takes every
  step's blocks at once (``StepTrace.record_many``, the same state as one ``record`` a step).

The lines are made where the reference ``next_cycle`` would make them: at each segment's first
cycle (a line kept from an earlier cycle or call is taken where it holds). Results are therefore
bit for bit those of one cycle at a time (``tests/engine/test_thrash_run.py`` drives both from
random states; ``tests/engine/test_thrash.py`` whole simulations).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from inferplan.engine.thrash import _Cycles

# Relative margin of the clock's upper bound over the float sum of the step seconds: that sum
# of at most ``MAX_BOUND_STEPS`` positive terms rounds by less than 1e-10 relative.
BOUND_MARGIN = 1e-9
MAX_BOUND_STEPS = 1 << 20  # pending steps beyond which the exact clock is made anyway


class _Segment:
    """Cycles ``k`` with one plan from step ``s``: the head's blocks per step and each step's
    line (``a + b * C``) for the cycle's positions."""

    __slots__ = ("a", "b", "durations", "k", "plan", "s")

    def __init__(self, s: int, k: int, plan: list[int], a: list[float], b: list[float]) -> None:
        self.s, self.k, self.plan, self.a, self.b = s, k, plan, a, b
        # Step seconds already made for cycles ``[0, k')`` with ``k' >= k`` (an arrival cut's
        # exact clock, ``_cycles_in_time``), reused when the segment is written.
        self.durations: np.ndarray | None = None


class _Crossings:
    """The decoders' cumulative block crossings over steps ``[0, t)``, and its inverse."""

    def __init__(self, by_offset: list[int], block: int, n: int) -> None:
        self.block, self.n = block, n
        # ``by_offset[-u % block]`` for ``u = 0 .. block - 1``: offset 0, then downwards
        self.prefix = [0, *accumulate(by_offset[:1] + by_offset[:0:-1])]
        # (``prefix[block] == n``: every row crosses once a period)

    def upto(self, t: int) -> int:
        q, r = divmod(t, self.block)
        return q * self.n + self.prefix[r]

    def last_within(self, bound: int) -> int:
        """The largest ``t`` with ``upto(t) <= bound`` (-1 where even ``t = 0`` exceeds it)."""
        if bound < 0:
            return -1
        q, rem = divmod(bound, self.n)
        return q * self.block + bisect_right(self.prefix, rem, 0, self.block) - 1


def take_cycles(
    c: _Cycles,
    next_arrival_s: float,
    same_time_s: Callable[[Any], Any],
    intake: Callable[[float], float | None] | None = None,
) -> float:
    """Take every cycle ``next_cycle`` would take one at a time from the cycles' state, up to
    the first that is not one or does not start before the arrival is seen; given the loop's
    ``intake`` (``Simulation._pass_arrivals``), on past the arrivals (``_past_arrival``). The
    arrival bound the pass ended with."""
    crossings = _Crossings(c.by_offset, c.block, c.n)
    held_init = c.held - crossings.upto(c.num_steps)  # the decoders' blocks before step 0
    pending: list[_Segment] = []
    now_hi, pending_steps = c.now, 0  # an upper bound on the clock after the pending steps
    while True:
        plan = c._plan()
        if plan is None:
            break
        segment, step_hi = _segment(c, plan, crossings, held_init)
        planned, length = segment.k, len(plan)
        if planned == 0:
            break  # (``_plan`` passed: its first cycle keeps the plan; never reached)
        end_hi = now_hi + planned * length * step_hi
        bound = end_hi * (1.0 + BOUND_MARGIN)
        many = pending_steps + planned * length > MAX_BOUND_STEPS
        if many or not next_arrival_s > bound + same_time_s(bound):
            _write(c, pending, held_init, crossings)  # the exact clock
            pending, pending_steps = [], 0
            segment.k = _cycles_in_time(c, segment, next_arrival_s, same_time_s)
            if segment.k == 0:
                if intake is not None:
                    past = _past_arrival(
                        c, plan, next_arrival_s, same_time_s, intake, crossings, held_init
                    )
                    if past is not None:
                        next_arrival_s, now_hi = past, c.now
                        continue
                break
            end_hi = c.now + segment.k * length * step_hi
        if c.num_cycles == 0 and math.isnan(c.r.records.first_scheduled_s[c.head]):
            c.r.records.first_scheduled_s[c.head] = c.now
        steps = segment.k * length
        pending.append(segment)
        pending_steps += steps
        now_hi = end_hi
        c.num_steps += steps
        c.held = held_init + crossings.upto(c.num_steps)
        c.num_cycles += segment.k
        c.recomputed += segment.k * (length - 1) * c.chunk
        if segment.k < planned:
            if intake is not None:  # the cycles up to the cut, written: the clock there
                _write(c, pending, held_init, crossings)
                pending, pending_steps = [], 0
                past = _past_arrival(
                    c, plan, next_arrival_s, same_time_s, intake, crossings, held_init
                )
                if past is not None:
                    next_arrival_s, now_hi = past, c.now
                    continue
            break  # the next cycle starts too late for the arrival
    _write(c, pending, held_init, crossings)
    return next_arrival_s


def _past_arrival(
    c: _Cycles,
    plan: list[int],
    next_arrival_s: float,
    same_time_s: Callable[[Any], Any],
    intake: Callable[[float], float | None],
    crossings: _Crossings,
    held_init: int,
) -> float | None:
    """At a cycle boundary the arrival cut (every pending step written: ``c.now`` exact), what
    the loop does next, in the pass: where the arrival is due now, it routes it (``intake``)
    and a new pass begins here; else the next cycle, ``plan``, runs on the general path (a
    partial run, ``step_then_chunks``), routing the arrivals that come due between its steps,
    and a new pass begins after it. An arrival queues behind the head (FCFS) and the budget is
    the head's chunk and the decoders', so the cycle is ``plan``'s whatever it routes; only its
    floats are the general path's: each step timed by ``Replica.step_s`` of its shape (the
    admission step's, ``chunk_step``'s, ``preempt_step``'s), one ITL sample of weight ``n`` a
    step, and a new ``add_many`` batch where each pass would have begun (``_Cycles.ones`` and
    ``breaks``). The arrival bound after, or None, having done nothing, where a step's gap is
    not one step long in floats (the general path then writes columns: left to it)."""
    start = c.now
    if next_arrival_s <= start + same_time_s(start):  # due at this boundary
        bound = intake(start)
        if bound is not None:  # (None: the loop's test disagrees: the pass ends here)
            c.breaks.append(len(c.durations))
        return bound
    n, chunk, seconds = c.n, c.chunk, c.r.step_s.seconds
    m, s = len(plan) - 1, c.num_steps
    pairs = chunk * (chunk + 1) / 2  # ``step_shape`` of one chunk at ``o``: ``q * o`` more
    durations, times = [], [start]
    now = start
    for i in range(m + 1):
        context = c.context + n * (s + i)
        if i < m:
            o = i * chunk
            duration = seconds(chunk, float(chunk * o + pairs), o, 1, n, context)
        else:
            duration = seconds(0, 0.0, 0, 0, n, context)
        end = now + duration
        if now != end - duration:
            return None  # the column form's gaps (``chunk_step``'s test)
        durations.append(duration)
        now = end
        times.append(now)
    if c.num_cycles == 0 and math.isnan(c.r.records.first_scheduled_s[c.head]):
        c.r.records.first_scheduled_s[c.head] = start
    segment = _Segment(s, 1, plan, [], [])
    segment.durations = np.array(durations)
    c.ones.append(len(c.durations))
    _write(c, [segment], held_init, crossings)
    c.num_steps += m + 1
    c.held = held_init + crossings.upto(c.num_steps)
    c.num_cycles += 1
    c.recomputed += m * chunk
    bound = None
    for at in times[1:]:  # between its steps (``step_then_chunks``), then after it
        routed = intake(at)
        if routed is not None:
            bound = routed
    return next_arrival_s if bound is None else bound


def _segment(
    c: _Cycles, plan: list[int], crossings: _Crossings, held_init: int
) -> tuple[_Segment, float]:
    """The cycles from the current step that keep ``plan`` (``_Cycles._plan``'s tests, each
    monotone in the cycle) and the lines made at the first cycle's contexts; with an upper
    bound on one step's seconds over them."""
    m = len(plan) - 1  # steps with a head chunk; step ``m`` preempts the head
    length, s, usable, n = m + 1, c.num_steps, c.usable, c.n
    base = held_init  # the decoders' blocks after step ``t``: ``base + upto(t + 1)``
    last = (c.steps_left - s - m - 2) // length  # a decoder finishes after the last
    # The head's ``m``-th chunk beside the decoders (its blocks rise with the chunk: the
    # binding step), and the decoders alone at the preempting step.
    last = min(last, (crossings.last_within(usable - plan[m - 1] - base) - s - m) // length)
    last = min(last, (crossings.last_within(usable - base) - s - m - 1) // length)
    a, b, step_hi = [], [], 0.0
    lines = c.lines
    for i in range(length):
        context = c.context + n * (s + i)
        if i < m:
            line = lines.get(i + 1)
            if line is None or not line[3] <= context < line[2]:  # ``_step_s``'s own test
                c._step_s(i + 1, context)  # makes ``c.lines[i + 1]`` the line at this context
                line = lines[i + 1]
            line_a, line_b, limit, _ = line
        else:
            line_a, line_b, limit = c.r.model.decode_line(n, context)
        if not limit >= math.inf:  # the scalar path takes another line from ``limit`` on
            # (the first cycle's own line stands: ``next_cycle`` makes it at its context; a
            # limit at or below it, or nan, leaves that one cycle)
            cap = (math.ceil(limit) - 1 - context) // (n * length) if limit > context else 0
            last = min(last, cap)
        end = context + n * length * max(last, 0)
        step_hi = max(step_hi, line_a + line_b * context, line_a + line_b * end)
        a.append(line_a)
        b.append(line_b)
    return _Segment(s, last + 1, plan, a, b), step_hi


def _step_seconds(c: _Cycles, segments: list[_Segment]) -> np.ndarray:
    """The segments' step seconds, in order (each segment's cycles as rows, its lines
    broadcast over them: ``a + b * C`` for every step)."""
    durations = []
    n = c.n
    for seg in segments:
        length = len(seg.plan)
        if seg.durations is not None:  # made for the exact clock: the same floats
            durations.append(seg.durations[: seg.k * length])
        else:
            first = c.context + n * seg.s  # the context at each step, as integers
            context = np.arange(first, first + n * seg.k * length, n).reshape(seg.k, length)
            durations.append((np.array(seg.a) + np.array(seg.b) * context).ravel())
    return durations[0] if len(durations) == 1 else np.concatenate(durations)


def _cycles_in_time(
    c: _Cycles, segment: _Segment, next_arrival_s: float, same_time_s: Callable[[Any], Any]
) -> int:
    """The segment's cycles whose last step starts before the arrival is seen, from the exact
    clock ``c.now``. The first cycle is tried alone first, in scalars (the same float
    operations as the arrays': ``a + b * C`` with ``C`` exact, added in order from ``now``):
    where even it starts too late, the segment's seconds are not made."""
    length = len(segment.plan)
    start, context = c.now, c.context + c.n * segment.s
    for i in range(length - 1):
        start += segment.a[i] + segment.b[i] * float(context + c.n * i)
    if not next_arrival_s > start + same_time_s(start):
        return 0
    durations = _step_seconds(c, [segment])
    segment.durations = durations
    times = np.add.accumulate(np.concatenate(([c.now], durations)))  # ``np.cumsum``
    last_start = times[length - 1 : segment.k * length : length]
    ok = next_arrival_s > last_start + same_time_s(last_start)
    return segment.k if bool(ok.all()) else int(ok.argmin())


def _write(c: _Cycles, segments: list[_Segment], held_init: int, crossings: _Crossings) -> None:
    """The pending segments' steps: the clock, the KV trace (blocks in use once each step's
    blocks are allocated) and the step seconds kept for the ITL samples at ``commit``."""
    if not segments:
        return
    durations = _step_seconds(c, segments)
    first, steps = segments[0].s, len(durations)
    # Blocks in use: the decoders' after each step, the others' (neither the decoders' nor
    # free), and the head's at each position of its cycle.
    used = c.crossings_from(first, steps)
    used += held_init + crossings.upto(first) + c.r.cfg.num_blocks - c.usable
    start = 0
    for seg in segments:
        end = start + seg.k * len(seg.plan)
        in_cycles = used[start:end].reshape(seg.k, len(seg.plan))  # a view of ``used``
        in_cycles += np.array(seg.plan)
        start = end
    times = np.empty(steps + 1)  # the clock: ``now``, then each step added in order
    times[0] = c.now
    times[1:] = durations
    np.add.accumulate(times, out=times)  # ``np.cumsum``
    c.r.trace.record_many(times[:-1], used)
    c.now = float(times[-1])
    c.durations.append(durations)
