"""Pure-decode stretches in closed form, and the preemption steps that end them (DESIGN §4).

Between events a pure-decode batch is constant, so ``advance_decode`` runs a whole stretch of
steps at once: it ends at the first finishing sequence, the step that starts at or after the
next arrival, the step whose block allocation would fail, or where the step-time line stops
holding. ``DecodeStretches`` is the part of ``Replica`` that does this; the scheduler, the pool
and the exact steps are in ``replica.py``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.policies import WaitingQueue
from inferplan.engine.running import RunningSet
from inferplan.memory.blockpool import BlockPool
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords
from inferplan.metrics.steptrace import StepTrace
from inferplan.perf.protocol import StepTimeModel

if TYPE_CHECKING:
    from inferplan.engine.replica import SchedulerConfig


class DecodeStretches:
    """Replica state and verbs for pure-decode stretches (a base of ``Replica``)."""

    cfg: SchedulerConfig
    model: StepTimeModel
    records: RequestRecords
    waiting: WaitingQueue
    itl: ItlHistogram
    trace: StepTrace
    running: RunningSet
    swapped: deque[tuple[int, int, int, int]]
    pool: BlockPool
    now: float
    num_steps: int
    batch_slots: int
    idle_slot_steps: int
    decode_phase: int
    # Whether every running row is a pure decode (None: unknown since the last exact step).
    # Stretches and preemption steps keep it true; only an exact step can change it.
    _decoding: bool | None

    # Defined by Replica.
    def _admission_blocks(self, rid: int, tokens: int, chunk: int) -> int:
        raise NotImplementedError

    def _preempt_last(self) -> float:
        raise NotImplementedError

    def _finish(self, rows: np.ndarray) -> None:
        raise NotImplementedError

    def is_decoding(self) -> bool:
        """Every running request is a pure decode (cached between exact steps)."""
        if self._decoding is None:
            self._decoding = self.running.all_decoding
        return self._decoding

    def _count_idle_slots(self, steps: int) -> None:
        if self.cfg.scheduler == "static":
            self.batch_slots = max(self.batch_slots, len(self.running))
            self.idle_slot_steps += (self.batch_slots - len(self.running)) * steps

    def can_stretch(self) -> bool:
        """A pure-decode batch that nothing waiting can join until an event."""
        run, cfg = self.running, self.cfg
        n = len(run)
        if n == 0 or n > cfg.max_num_batched_tokens or self.swapped or not self.is_decoding():
            return False
        if not len(self.waiting) or n >= cfg.max_num_seqs or cfg.scheduler == "static":
            return True
        rid, tokens = self.waiting.peek()
        if cfg.scheduler == "prefill_first":
            # Inside a multi-step block every step decodes (``stretch_steps`` stops the stretch
            # at the block's end); at a scheduling point the head's prefill runs alone if it
            # fits now (the whole budget, the free pool), and the pool only shrinks while
            # decoding, so otherwise it stays out.
            return self.decode_phase > 0 or not self._head_admissible()
        leftover = cfg.max_num_batched_tokens - n
        if leftover <= 0:
            return True
        if cfg.scheduler == "trtllm":
            # Whole prompts only; and the free blocks beyond the running requests' reservations
            # do not change while they decode, so a head that does not fit stays out.
            return tokens > leftover or self._admission_blocks(rid, tokens, tokens) > (
                self.pool.free
            )
        crossing = int(self.pool.crossing_cost(run.num_computed).sum())
        return self._admission_blocks(rid, tokens, min(tokens, leftover)) > (
            self.pool.free - crossing
        )

    def _head_admissible(self) -> bool:
        """Prefill-first: the queue head's whole prompt fits the budget and the free pool."""
        rid, tokens = self.waiting.peek()
        return tokens <= self.cfg.max_num_batched_tokens and (
            self._admission_blocks(rid, tokens, tokens) <= self.pool.free
        )

    def _steps_to_scheduling_point(self) -> int | None:
        """Prefill-first multi-step: decode steps left before the scheduler could admit the
        queue head (None when nothing waiting can be admitted before an event)."""
        cfg = self.cfg
        if cfg.scheduler != "prefill_first" or not len(self.waiting) or self.decode_phase == 0:
            return None
        if len(self.running) >= cfg.max_num_seqs or self.swapped or not self._head_admissible():
            return None
        return cfg.num_scheduler_steps - self.decode_phase

    def stretch_steps(self, next_arrival_s: float) -> tuple[int, float, float, bool]:
        """(steps k, a, b, pool_bound): the stretch length, its step-time line ``a + b*C``, and
        whether it ends only because step ``k`` cannot get its blocks."""
        run = self.running
        n = len(run)
        context = int(run.num_computed.sum()) + n
        a, b, limit = self.model.decode_line(n, context)
        k = int((run.target - run.num_generated).min())
        if math.isfinite(limit):
            k = min(k, max(0, math.ceil((limit - context) / n)))
        if math.isfinite(next_arrival_s):
            k = _steps_before(next_arrival_s - self.now, a, b, context, n, k)
        block_end = self._steps_to_scheduling_point()
        if block_end is not None:
            k = min(k, block_end)
        k, k_pool = self._steps_before_pool_runs_out(k)
        return min(k, k_pool), a, b, k_pool < k

    def _steps_before_pool_runs_out(self, k: int) -> tuple[int, int]:
        """(k, k_pool): the stretch's length, shortened where the pool's crossing costs change,
        and the first step whose block allocation fails (``>= k`` when none in ``k`` steps).
        Every row crosses into a new block once per ``block_size`` steps, at its offset
        ``(-computed) mod block_size``; a round of crossings costs the sum of the rows' costs,
        so ``free // round`` rounds succeed and, within the next, the first crossing (in offset
        order) that the rest of the pool cannot cover fails."""
        run, pool, block = self.running, self.pool, self.cfg.block_size
        free, n = pool.free, len(run)
        if pool.is_uniform:  # every crossing costs one block: a partial sort finds it
            full_rounds = (free // n) * block
            if full_rounds >= k:
                return k, k
            offsets = (-run.num_computed) % block
            return k, full_rounds + int(np.partition(offsets, free % n)[free % n])
        cost, hold = pool.next_crossing_costs(run.num_computed)
        per_round = int(cost.sum())
        if per_round == 0 or (free // per_round) * block >= k:
            return k, k  # costs only fall as windows fill, so the pool lasts longer
        if hold is not None:
            k = min(k, hold)
        full_rounds = (free // per_round) * block
        offsets = (-run.num_computed) % block
        order = np.argsort(offsets, kind="stable")
        failing = int(np.argmax(np.cumsum(cost[order]) > free % per_round))
        return k, full_rounds + int(offsets[order[failing]])

    def advance_decode(self, k: int, a: float, b: float) -> None:
        """Run ``k`` decode steps of the current batch at once."""
        run, cfg = self.running, self.cfg
        n = len(run)
        # Views of the columns: the in-place operations below write through.
        computed, held, last_token = run.num_computed, run.held_blocks, run.last_token_s
        generated, tokens = run.num_generated, run.num_tokens
        context = int(computed.sum()) + n
        first = a + b * context
        step = b * n
        total = k * a + b * (k * context + n * k * (k - 1) / 2)
        self.trace.record(self.now, self.pool.used)
        self._count_idle_slots(k)
        # Every token time is <= now, so all rows emitted at now iff the earliest did.
        same = None if last_token.min() == self.now else last_token == self.now
        gaps = None if same is None else np.where(same, first, self.now + first - last_token)
        computed += k
        if self.pool.is_uniform:
            np.floor_divide(computed + (cfg.block_size - 1), cfg.block_size, out=held)
        else:
            held[:] = self.pool.blocks_for(computed)
        self.pool.free = cfg.num_blocks - int(held.sum())  # the pool is what rows do not hold
        generated += k
        tokens += k
        self._stretch_itl(gaps, same, first, step, k)
        self.now += total
        self.num_steps += k
        if cfg.scheduler == "prefill_first":
            self.decode_phase = (self.decode_phase + k) % cfg.num_scheduler_steps
        last_token[:] = self.now
        if (generated - run.target).max() >= 0:
            self._finish(np.flatnonzero(generated >= run.target))

    def _stretch_itl(
        self, gaps: np.ndarray | None, same: np.ndarray | None, first: float, step: float, k: int
    ) -> None:
        """ITL samples of a stretch: ``k`` steps for every sequence, where a sequence that did
        not emit at the stretch's start (``same`` False) has a longer first gap (``gaps``; both
        None if every sequence emitted then)."""
        ids, rec = self.running.ids, self.records
        last = first + (k - 1) * step
        if gaps is None or same is None:
            rec.max_itl_s[ids] = np.fmax(rec.max_itl_s[ids], last)
            self.itl.add_arithmetic(first, step, k, float(len(ids)))
            return
        rec.max_itl_s[ids] = np.fmax(rec.max_itl_s[ids], np.maximum(gaps, last))
        self.itl.add_arithmetic(first, step, k, float(same.sum()))
        others = ~same
        self.itl.add_many(gaps[others])
        self.itl.add_arithmetic(first + step, step, k - 1, float(others.sum()))

    def preempting_decode_step(self) -> None:
        """The step a pure-decode batch takes when the pool cannot give every sequence crossing
        a block boundary its new block (recompute preemption), in vector form: the running pass
        pops the last-admitted requests until the rest fit. Popping is lazy and both sides only
        move one way, so the number of victims is the smallest ``p`` with
        ``new blocks of rows[:n-p] <= free + blocks held by rows[n-p:]``. No request is admitted
        in a step that preempted (vLLM v1)."""
        run = self.running
        need = self.pool.crossing_cost(run.num_computed)
        cum_need = np.concatenate(([0], np.cumsum(need)))  # cum_need[m]: rows[:m]
        held_tail = np.concatenate(([0], np.cumsum(run.held_blocks[::-1])))  # by p
        n = len(run)
        fits = cum_need[n - np.arange(n + 1)] <= self.pool.free + held_tail
        victims = int(np.argmax(fits))
        for _ in range(victims):
            self._preempt_last()
        if len(run):  # the rest decode one token each: a one-step stretch
            a, b, _ = self.model.decode_line(len(run), int((run.num_computed + 1).sum()))
            self.advance_decode(1, a, b)


def _steps_before(window_s: float, a: float, b: float, context: int, n: int, cap: int) -> int:
    """Steps that start before ``window_s`` from now, at most ``cap``: the smallest ``i <= cap``
    with ``S(i) >= window_s``, or ``cap`` if there is none, where
    ``S(i) = i*a + b*(i*C + n*i*(i-1)/2)`` is the time ``i`` steps take. ``S`` is increasing,
    so a bisection bounds the work (a far window, e.g. an arrival 1e100 s away, must not make
    the search walk one float at a time)."""
    if window_s <= 0 or cap <= 0:
        return 0

    def elapsed(i: int) -> float:
        return i * a + b * (i * context + n * i * (i - 1) / 2)

    if elapsed(cap) < window_s:
        return cap
    qa, qb = b * n / 2, a + b * context - b * n / 2
    root = math.sqrt(qb * qb + 4 * qa * window_s)
    guess = (-qb + root) / (2 * qa) if qa > 0 else window_s / qb if qb > 0 else cap
    # Bracket the answer in (low, high] with S(low) < window_s <= S(high), starting near the
    # root: usually two probes settle it, and the bisection is the bound.
    low, high = 0, cap
    near = min(max(0, math.ceil(guess) - 2), cap)
    if elapsed(near) >= window_s:
        high = near
        if near >= 2 and elapsed(near - 2) < window_s:
            low = near - 2
    else:
        low = near
        probe = near + 2
        if probe < high and elapsed(probe) >= window_s:
            high = probe
    while high - low > 1:
        mid = (low + high) // 2
        if elapsed(mid) >= window_s:
            high = mid
        else:
            low = mid
    return high
