"""A doomed-head pass planned in segments (``engine/thrashrun.py``) against one cycle at a time.

``_Cycles`` is driven by hand from random states (the decoders' offsets in their last block,
their blocks and the pool, the head's chunk and prompt, the first finish, the next arrival) and
a step-time model whose lines change every ``width`` tokens of context, so that a segment which
kept a line past its limit, tested the arrival one step early, let a cycle whose next chunk
just fits keep the plan, or miscounted the decoders' crossings gives other steps, blocks or
times than ``next_cycle`` does.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from inferplan.engine import thrash, thrashrun
from inferplan.engine.loop_order import same_time_s
from inferplan.engine.thrash import _Cycles
from inferplan.metrics.steptrace import StepTrace
from inferplan.perf.batch import StepBatch
from native_mode import pure_only

from .thrash_reference import next_cycle


class _PiecewiseLines:
    """Step-time lines that hold for ``width`` tokens of decode context each."""

    def __init__(self, width: int) -> None:
        self.width = width

    def decode_line(self, num_seqs: int, context: int) -> tuple[float, float, float]:
        piece = context // self.width
        return 1e-3 * (1 + piece % 3) + 1e-6 * num_seqs, 1e-8 * (1 + piece % 2), self._end(piece)

    def batch_line(self, batch: StepBatch) -> tuple[float, float, float]:
        piece = batch.decode_context_tokens // self.width
        a = 2e-3 + 1e-9 * batch.prefill_attention_pairs + 1e-4 * (piece % 4)
        return a, 1e-8 * (2 + piece % 3), self._end(piece)

    def _end(self, piece: int) -> float:
        return float((piece + 1) * self.width)


def _cycles(rng: np.random.Generator) -> _Cycles:
    """A ``_Cycles`` in a random state that often thrashes."""
    block = int(rng.choice([1, 2, 4, 16]))
    n = int(rng.integers(1, 12))
    computed = rng.integers(1, 400, n)
    chunk = int(rng.integers(1, 512))
    tokens = chunk * int(rng.integers(2, 12)) + int(rng.integers(0, chunk))
    held = int((-(-computed // block)).sum())
    head_blocks = -(-tokens // block)
    usable = held + int(rng.integers(-(-chunk // block), head_blocks + n + 2))
    c = _Cycles.__new__(_Cycles)
    c.r = SimpleNamespace(  # type: ignore[assignment]
        model=_PiecewiseLines(int(rng.choice([50, 500, 10**6]))),
        cfg=SimpleNamespace(num_blocks=usable + 7),
        records=SimpleNamespace(first_scheduled_s=np.array([math.nan])),
        trace=StepTrace(10**6, max_points=int(rng.integers(1, 50))),
    )
    c.n, c.block, c.head, c.tokens, c.chunk = n, block, 0, tokens, chunk
    c.held, c.usable = held, usable
    by_offset = np.bincount(computed % block, minlength=block)
    c.by_offset, c.by_offset_array = by_offset.tolist(), by_offset
    c.context = int(computed.sum()) + n
    c.steps_left = int(rng.integers(1, 3000))
    c.now, c.num_steps, c.durations = float(rng.random()), 0, []
    c.num_cycles, c.recomputed, c.lines = 0, 0, {}  # fresh per state (its model is too)
    # An arrival while the cycles would still run (steps take about 1-5 ms), or none.
    wait_s = float(rng.random()) * c.steps_left * 3e-3
    c.arrival = math.inf if rng.random() < 0.2 else c.now + wait_s  # type: ignore[attr-defined]
    return c


def _state(c: _Cycles) -> tuple[object, ...]:
    trace = vars(c.r.trace)
    durations = c.all_durations().tolist()
    return (c.num_steps, c.held, c.now, durations, c.num_cycles, c.recomputed, trace)


def _arrival_on_a_step(seed: int) -> float:
    """An arrival within rounding of a step's start (the loop's tie rule decides it): one of
    the steps the cycles take without arrivals, nudged by a part in 1e13 or not at all."""
    rng = np.random.default_rng(seed)
    c = _cycles(np.random.default_rng(seed))
    while next_cycle(c, math.inf, same_time_s):
        pass
    if not c.durations:
        return math.inf
    starts: list[float] = []
    now = _cycles(np.random.default_rng(seed)).now
    for step_s in c.all_durations().tolist():
        starts.append(now)
        now += step_s
    at = starts[int(rng.integers(0, len(starts)))]
    return at * (1.0 + float(rng.choice([-1e-13, 0.0, 1e-13])))


@pure_only  # builds ``_Cycles`` by ``__new__`` around a stand-in replica
def test_segments_give_one_cycle_at_a_time_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``take_cycles`` leaves the state (steps, the decoders' blocks, the clock, every step's
    seconds, cycles, recomputed tokens, the KV trace) that ``next_cycle`` leaves, over states
    whose passes change plan, cross line limits and meet arrivals inside a segment."""
    cuts = [0]
    in_time = thrashrun._cycles_in_time

    def counting(c, segment, *args):  # type: ignore[no-untyped-def]
        planned = segment.k
        k = in_time(c, segment, *args)
        cuts[0] += 0 < k < planned  # an arrival inside a segment of several cycles
        return k

    monkeypatch.setattr(thrashrun, "_cycles_in_time", counting)
    num_long = num_plans = 0
    for seed in range(240):
        alone, together = (_varied(np.random.default_rng(seed), seed) for _ in range(2))
        arrival: float = alone.arrival  # type: ignore[attr-defined]
        if seed % 3 == 0:
            arrival = _varied_arrival_on_a_step(seed)
        plans = set()
        while True:
            plan = alone._plan()
            if not next_cycle(alone, arrival, same_time_s):
                break
            plans.add(len(plan or []))
        thrashrun.take_cycles(together, arrival, same_time_s)
        assert _state(together) == _state(alone), seed
        num_long += together.num_cycles >= 20
        num_plans += len(plans) >= 3
    assert num_long > 40 and num_plans > 30 and cuts[0] > 25


def _varied_arrival_on_a_step(seed: int) -> float:
    """An arrival within rounding of a step the pass takes without arrivals (``_varied``)."""
    rng = np.random.default_rng(seed + 1)
    c = _varied(np.random.default_rng(seed), seed)
    start = c.now
    while next_cycle(c, math.inf, same_time_s):
        pass
    if not c.durations:
        return math.inf
    starts = np.cumsum(np.concatenate(([start], c.all_durations()))).tolist()
    at = starts[int(rng.integers(len(starts) // 2, len(starts)))]
    return at * (1.0 + float(rng.choice([-1e-13, 0.0, 1e-13])))


@pure_only  # builds ``_Cycles`` by ``__new__`` around a stand-in replica
def test_an_arrival_at_the_first_cycles_last_step() -> None:
    """The arrival exactly where the loop's tie rule flips for the first cycle's last step
    (``_cycles_in_time`` tries that cycle alone, in scalars): on the edge no cycle runs, one
    float later the first does, as one cycle at a time gives."""
    num_first = 0
    for seed in range(120):
        probe = _varied(np.random.default_rng(seed), seed)
        if not next_cycle(probe, math.inf, same_time_s):
            continue
        start = _varied(np.random.default_rng(seed), seed).now
        for step_s in probe.durations[0].tolist()[:-1]:
            start += step_s
        edge = start + same_time_s(start)
        for arrival in (edge, math.nextafter(edge, math.inf)):
            alone, together = (_varied(np.random.default_rng(seed), seed) for _ in range(2))
            while next_cycle(alone, arrival, same_time_s):
                pass
            thrashrun.take_cycles(together, arrival, same_time_s)
            assert _state(together) == _state(alone), seed
            assert together.num_cycles == (arrival > edge), seed
            num_first += together.num_cycles
    assert num_first > 50


class _SteepLines(_PiecewiseLines):
    """Lines whose slope is about a step's own seconds over a few thousand tokens of context,
    so a clock bound that took each line at its first context only would fall short."""

    def decode_line(self, num_seqs: int, context: int) -> tuple[float, float, float]:
        a, b, limit = super().decode_line(num_seqs, context)
        return a, 3000 * b, limit

    def batch_line(self, batch: StepBatch) -> tuple[float, float, float]:
        a, b, limit = super().batch_line(batch)
        return a, 3000 * b, limit


def _varied(rng: np.random.Generator, seed: int) -> _Cycles:
    """``_cycles``, with every decoder at one offset in its last block (every crossing at one
    step: the decoders alone may not fit at the preempting step), steep lines, or a near
    first finish, by seed."""
    c = _cycles(rng)
    if seed % 4 == 1:
        c.by_offset = [c.n if u == seed % c.block else 0 for u in range(c.block)]
        c.by_offset_array = np.array(c.by_offset)
        c.chunk = c.block * (1 + seed % 3)
        c.tokens = 7 * c.chunk + 1
    elif seed % 4 == 2:
        c.r.model = _SteepLines(10**6)  # type: ignore[assignment]
        c.context = c.n  # the context's growth dominates the step seconds
    if seed % 5 == 0:
        c.steps_left = 1 + seed % 97
    return c


@pure_only  # builds ``_Cycles`` by ``__new__`` around a stand-in replica
def test_segments_on_the_exact_clock_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the clock's upper bound never trusted (every segment timed on the exact clock and
    cut there), the pass is still the one cycle at a time gives."""
    monkeypatch.setattr(thrashrun, "MAX_BOUND_STEPS", -1)
    for seed in range(0, 240, 3):
        alone, together = (_varied(np.random.default_rng(seed), seed) for _ in range(2))
        while next_cycle(alone, alone.arrival, same_time_s):  # type: ignore[attr-defined]
            pass
        thrashrun.take_cycles(together, together.arrival, same_time_s)  # type: ignore[attr-defined]
        assert _state(together) == _state(alone), seed


class _NanLimits(_PiecewiseLines):
    """Lines that change every 50 tokens of context but give no limit (nan)."""

    def decode_line(self, num_seqs: int, context: int) -> tuple[float, float, float]:
        return *super().decode_line(num_seqs, context)[:2], math.nan

    def batch_line(self, batch: StepBatch) -> tuple[float, float, float]:
        return *super().batch_line(batch)[:2], math.nan


@pure_only  # builds ``_Cycles`` by ``__new__`` around a stand-in replica
def test_lines_without_a_limit_hold_for_one_cycle() -> None:
    """A line with a nan limit is remade at every step by ``next_cycle``; a segment then holds
    one cycle, whose lines are made at its own contexts."""
    for seed in range(0, 120, 2):
        alone, together = (_cycles(np.random.default_rng(seed)) for _ in range(2))
        for c in (alone, together):
            c.r.model = _NanLimits(50)  # type: ignore[assignment]
        while next_cycle(alone, alone.arrival, same_time_s):  # type: ignore[attr-defined]
            pass
        thrashrun.take_cycles(together, together.arrival, same_time_s)  # type: ignore[attr-defined]
        assert _state(together) == _state(alone), seed


@pure_only  # builds ``_Cycles`` by ``__new__`` around a stand-in replica
def test_passes_end_where_one_cycle_at_a_time_ends() -> None:
    """From the state a pass leaves, ``next_cycle`` takes no further cycle."""
    ended = 0
    for seed in range(60):
        c = _cycles(np.random.default_rng(seed))
        thrashrun.take_cycles(c, c.arrival, same_time_s)  # type: ignore[attr-defined]
        ended += c.num_cycles > 0
        assert not next_cycle(c, c.arrival, same_time_s), seed  # type: ignore[attr-defined]
    assert ended > 30


def test_crossings_in_closed_form() -> None:
    """``_Crossings.upto`` is the running sum of the rows' crossings step by step, and
    ``last_within`` the last step count whose sum stays within a bound (by hand: rows at
    offsets 0, 0 and 2 of 4-token blocks cross at steps 0, 2, 4, 6, ...)."""
    by_hand = thrashrun._Crossings([2, 0, 1, 0], 4, 3)
    assert [by_hand.upto(t) for t in range(9)] == [0, 2, 2, 3, 3, 5, 5, 6, 6]
    assert [by_hand.last_within(b) for b in (-1, 0, 1, 2, 3, 4, 5)] == [-1, 0, 0, 2, 4, 4, 6]
    rng = np.random.default_rng(7)
    for _ in range(200):
        block = int(rng.choice([1, 2, 3, 16, 32]))
        offsets = rng.integers(0, block, int(rng.integers(1, 20)))
        by_offset = np.bincount(offsets, minlength=block).tolist()
        crossings = thrashrun._Crossings(by_offset, block, len(offsets))
        steps = np.arange(6 * block + 5)
        sums = np.concatenate(([0], np.cumsum(np.array(by_offset)[-steps % block])))
        assert [crossings.upto(t) for t in range(len(sums))] == sums.tolist()
        for bound in range(-1, int(sums[-1])):
            assert crossings.last_within(bound) == int(np.searchsorted(sums, bound, "right")) - 1


@pure_only  # builds ``_Cycles`` by ``__new__`` around a stand-in replica
def test_lines_kept_across_calls_give_the_lines_made_afresh() -> None:
    """``thrash.shared_lines``: states met one after another with one model (contexts that
    fall as well as rise, the same ``n`` and chunk) take lines made for other calls only
    where they hold, so every step is the one a fresh set of lines gives."""
    model = _PiecewiseLines(50)
    shared_from = 0
    for seed in range(120):
        fresh, shared = _cycles(np.random.default_rng(seed)), _cycles(np.random.default_rng(seed))
        n, chunk = 1 + seed % 2, 64  # few keys: the lines are met again at other contexts
        for c in (fresh, shared):
            c.r.model, c.n, c.chunk = model, n, chunk  # type: ignore[assignment]
            c.tokens = max(c.tokens, 3 * chunk)
        shared.lines = thrash.shared_lines(model, n, chunk)
        shared_from += len(shared.lines)
        for c in (fresh, shared):
            while next_cycle(c, c.arrival, same_time_s):  # type: ignore[attr-defined]
                pass
        assert _state(shared) == _state(fresh), seed
    assert shared_from > 100  # lines were there to take
