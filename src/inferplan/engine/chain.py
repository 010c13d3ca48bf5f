"""Chains of decode stretches and tail preemptions in one pass (issue 10, above capacity).

Above capacity vLLM v1's KV pool stays full: a pure-decode batch grows until a step's new blocks
do not fit, the running pass preempts the last-admitted request (recompute: it goes back to the
queue's head), the rest decode on, and a few steps later the next victim follows, until a request
finishes, an arrival comes or the queue head fits. ``Simulation._advance`` ran such a chain one
piece at a time (``DecodeStretches.stretch_steps``, ``advance_decode``,
``preempting_decode_step``), each piece reducing or writing every column of the batch. Here the
chain's block arithmetic comes from the rows' state at its start, in closed form:

- **Blocks.** With the first ``p`` rows (admission order) running and chain step ``j`` done, they
  hold ``G(p, j) = p * (j // B) + H_p[j % B]`` blocks, ``H_p[u] = sum_{i<p} ceil((c_i + u + 1) /
  B)`` (``c_i``: row ``i``'s computed tokens at the chain's start, ``B`` the block size). Step
  ``j`` of ``p`` rows gets its blocks iff ``G(p, j) <= U``, ``U`` the blocks those rows and the
  free pool hold at the start (a victim frees all of its blocks). The first failing step of ``p``
  rows is therefore ``min_u B * t_u + u`` with ``t_u = max(0, (U - H_p[u]) // p + 1)``; fewer
  rows fail later, and victims pop from the tail, so row ``p - 1`` is preempted at exactly the
  first failing step of ``p`` rows (``preempting_decode_step``'s victim count, ``num_victims``,
  is the same test). Both come from a histogram of the rows' offsets in their last block, a
  few integer operations per question and per victim (``engine/chainblocks.py``).
- **Finishes.** Row ``i`` finishes at step ``r_i - 1`` (``r_i``: output tokens left) unless
  preempted first; a segment's fewest-left is a prefix minimum over the rows still running.

Everything that leaves a trace (the step-time lines, the arrival bound, the ITL histogram, the KV
trace, the queue pushes, the victims' counts) is done per segment exactly as the stepwise code does
it, with the same float expressions in the same order, so results are byte-identical; only the
columns are written once, at the chain's end, and the segments' ITL series and KV trace records are
handed over there in one call each (the same updates in the same order). The victims' records
(a preemption, the tokens to recompute, the worst gap) are held back run-wide and applied in a few
numpy calls (``ImplicitRows.note_victims``: sums and maxima commute). It applies where
``preempting_decode_step`` would pop last-admitted victims: vLLM v1's scheduler (FCFS or SPF queue),
recompute, a uniform pool without prefix caching (or with own blocks only: the cache's LRU list
along the chain is ``engine/ownchain.py``'s, and a stretch ends before the step that admits the
queue head, ``engine/ownstretch.py``), KV tiers or admission policies, every row decoding and having
emitted at ``now``. Under the priority policy, with shared prefixes or windowed layers the stepwise
path runs as before. Without own blocks a chain's links run in one frame over locals
(``engine/chainlinks.py``, the same expressions); ``_Chain``'s methods stay its reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.chainblocks import TailBlocks
from inferplan.engine.chainlinks import run_links
from inferplan.engine.ownchain import OwnLru
from inferplan.engine.ownstretch import steps_before_head_joins
from inferplan.engine.plain_admission import plain_head_chunk
from inferplan.engine.schedulers import Scheduler
from inferplan.engine.stretch import _steps_before
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.metrics.moments import ARITHMETIC, Update

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica

# ``Simulation._chain_arrivals``: given the chain's clock, route the arrivals due then as the
# event loop does and return the next one's bound (its time less ``same_time_s``), or None,
# having done nothing, where none is due.
Intake = Callable[[float], "float | None"]

# Rows of ``RunningSet._ints`` (``engine/running.py``).
_COMPUTED = 1
# A chain without own blocks runs its links in one frame (``engine/chainlinks.py``); the
# methods below stay the path with own blocks and the reference (False: they run every chain).
LINKS_IN_ONE_FRAME = True


def preemption_chain(
    replica: Replica,
    next_arrival_s: float,
    *,
    preempting: bool,
    intake: Intake | None = None,
) -> bool:
    """In place of ``Simulation._advance``'s loop of stretches and preemption steps, from its
    start (``preempting`` False: a stretch comes first) or from a preemption step: run the
    chain up to the point where that loop returns (a finish, the arrival bound, a head that
    can join, a stretch cut by its step-time line). False, having done nothing, where the
    chain does not apply, or (from a stretch) where the pool lasts a round of block crossings,
    so that the stretch is unlikely to end in a preemption (below capacity). ``intake``: the
    event loop's arrivals, where the chain may take them in at its bound (``_Chain.run``)."""
    if not preempting and replica.pool.free >= len(replica.running):
        return False
    if not _applies(replica):
        return False
    chain = _Chain(replica)
    if not chain.is_consistent(preempting):
        return False
    if intake is not None and replica.waiting.policy == "fcfs":
        chain.intake = intake
    chain.run(next_arrival_s, preempting)
    return True


def _applies(r: Replica) -> bool:
    sched, pool, cfg, run = r.scheduler, r.pool, r.cfg, r.running
    if type(sched) is not Scheduler or sched.admission is not None or r.offload is not None:
        return False
    if cfg.preemption_mode != "recompute" or not pool.is_uniform:
        return False
    if pool.cache is not None and type(pool.cache) is not OwnBlocks:
        return False
    if r.swapped or r.waiting.policy == "priority" or not len(run) or not r.is_decoding():
        return False
    emitted = run.rows.emitted_at(len(run))  # implicit rows: no column to settle
    if emitted is not None:
        return emitted == r.now
    return bool(run.last_token_s.min() == r.now)


class _Chain:
    """The chain's state as scalars (steps done ``j``, rows running ``p``, the clock) over the
    columns at its start, which stay untouched until ``_commit``."""

    def __init__(self, r: Replica) -> None:
        run, block = r.running, r.cfg.block_size
        self.r, self.block, self.n = r, block, len(run)
        # Implicit rows (``engine/implicit.py``) that all hold ``ceil(computed / B)`` blocks:
        # the chain reads their stored columns and the pending decode count, and commits into
        # their scalars, so neither it nor the next fast path settles or relearns the batch.
        rows = run.rows
        self.implicit = bool(rows.block) and rows.holds_ceil()
        if self.implicit:  # the offsets and sums from the rows' scalars (every row known)
            lag = rows.lag
            # Each row's computed tokens: its stored column plus the lag (``_computed``, built
            # where the reference methods ask; the one-frame loop reads the victims' alone).
            self.computed: np.ndarray | None = None
            self.computed_lag = lag
            self.held_start = rows.ceil_sum
            # ``target - generated`` as stored, per row: a row's left count plus the lag (the
            # rows' own list, read only until ``_commit``)
            self.left_stored, self.left_lag = rows.left, lag
            self.computed_sum = rows.computed_sum + self.n * lag  # of the running rows
            offsets = rows.offset_counts()
        else:
            self.computed = run.num_computed.copy()  # the columns settled: no lag
            self.computed_lag = 0
            self.held_start = int(run.held_blocks.sum())
            self.left_stored, self.left_lag = (run.target - run.num_generated).tolist(), 0
            self.computed_sum = int(self.computed.sum())
            offsets = np.bincount(self.computed % block, minlength=block).tolist()
        self.usable = r.pool.free + self.held_start  # U: the rows' blocks and the free pool
        self.outside = r.cfg.num_blocks - self.usable  # blocks no running row nor free holds
        # The fewest left (as stored) among the first ``p`` rows, per ``p`` (``_fewest_left``; the
        # one-frame loop keeps the current ``p``'s alone: ``engine/chainlinks.py``).
        self.left_prefix: list[int] | None = None
        self.blocks = TailBlocks.from_offsets(offsets, self.computed_sum, block, self.usable)
        self.j, self.p, self.now = 0, self.n, r.now
        self.seg_max_itl = -math.inf  # the largest last step of the segments so far
        # Each victim's id, computed tokens, and largest last step of the segments it ran.
        self.victim_ids: list[int] = []
        self.victim_computed: list[int] = []
        self.victim_itl: list[float] = []
        self.finished = False
        # The segments' KV trace records and ITL series, handed over once at ``_commit``
        # (nothing else records into the replica's trace or histogram during the chain).
        self.trace_times: list[float] = []
        self.trace_blocks: list[int] = []
        # ``(ARITHMETIC, first, step, num_steps, weight, last)``: ``add_arithmetic``'s updates
        self.itl_updates: list[Update] = []
        # Own blocks (``engine/ownchain.py``): the prefix cache's LRU list along the chain.
        self.own = OwnLru(r) if r.pool.cache is not None else None
        # The event loop's arrivals, where the chain may take them in (``preemption_chain``).
        self.intake: Intake | None = None

    def is_consistent(self, preempting: bool) -> bool:
        """Each row holds exactly its KV's blocks, and if ``preempting`` the next step is a
        preemption step (the state a pool-bound stretch leaves)."""
        if self.blocks.held(-1) != self.held_start:
            return False
        return not preempting or self.blocks.first_failure() == 0

    # ---- the chain --------------------------------------------------------------------------

    def run(self, next_arrival_s: float, preempting: bool) -> None:
        """Preemption steps and stretches, as ``Simulation._advance``'s loop takes them (with
        ``intake``, across the arrivals it takes in at the bound: ``_arrivals_in``)."""
        if self.own is None and LINKS_IN_ONE_FRAME:
            run_links(self, next_arrival_s, preempting)
            return
        r = self.r
        while True:
            if preempting:
                bound = self._preemption_step(next_arrival_s)
                if bound is None:
                    return
                next_arrival_s = bound
            preempting = True
            k, a, b, pool_bound = self._stretch_steps(next_arrival_s)
            if k > 0:
                self._segment(k, a, b, self._context())
            if not pool_bound:
                if k > 0 and not self.finished:
                    bound = self._arrivals_in()
                    if bound is not None and not self._head_can_join():
                        # The loop would start a chain here, with a stretch (or, the pool
                        # full, ``preemption_chain``'s own first stretch): the same one.
                        next_arrival_s, preempting = bound, False
                        continue
                self._commit()
                if k == 0:
                    r.step()
                return

    def _preemption_step(self, next_arrival_s: float) -> float | None:
        """``preempting_decode_step`` and the loop's checks after it: the bound to go on with,
        or None where the loop returns (the chain is committed then)."""
        r = self.r
        self._preempt_victims()
        if self.p == 0:  # nothing left to run: the loop's ``can_stretch`` fails
            self._commit()
            return None
        context = self._context()
        a, b, _ = r.model.decode_line(self.p, context)
        self._segment(1, a + 0.0, b, context)  # the preemption step (no swap time)
        if not self.finished and self.now >= next_arrival_s:
            bound = self._arrivals_in()
            if bound is not None:
                next_arrival_s = bound  # the loop's next advance: ``can_stretch`` asks first
        if self.finished or self.now >= next_arrival_s or self._head_can_join():
            self._commit()
            return None
        return next_arrival_s

    def _arrivals_in(self) -> float | None:
        """At the end of a segment, where the event loop would take the arrivals due now: take
        them in (``Intake``) and return the next arrival's bound, where they cannot change the
        batch: they join the tail of a non-empty FCFS queue (its head, the only request
        ``_head_can_join`` and the stretches read, stays). None where no arrival is due, or the
        loop must see it (the chain is then committed as before)."""
        intake = self.intake
        if intake is None or not self.r.waiting.tokens:
            return None
        return intake(self.now)

    def _preempt_victims(self) -> None:
        """The preemption step's running pass: pop the last rows while the rest cannot all get
        their blocks (``Scheduler.preempt``'s records and queue push, per victim)."""
        r, j = self.r, self.j
        run = r.running
        while self.p > 0 and self.blocks.first_failure() <= j:
            row = self.p - 1
            rid = int(run.ids[row])
            computed = int(self._computed()[row]) + j
            r.waiting.push_front(rid, num_tokens=computed + 1)
            if self.own is not None:
                self.own.preempt(rid, computed)
            self.computed_sum -= computed - j
            self.victim_ids.append(rid)
            self.victim_computed.append(computed)
            self.victim_itl.append(self.seg_max_itl)
            self.blocks.pop(computed - j)
            self.p = row

    def _context(self) -> int:
        """The running rows' total context: ``sum(num_computed) + n`` as the batch stands."""
        p = self.p
        return self.computed_sum + p * self.j + p

    def _left(self) -> int:
        """Fewest output tokens left among the running rows."""
        return self._fewest_left(self.p) - self.j

    def _computed(self) -> np.ndarray:
        """Each row's computed tokens at the chain's start (the columns stay untouched until
        ``_commit``)."""
        if self.computed is None:
            self.computed = self.r.running._ints[_COMPUTED, : self.n] + self.computed_lag
        return self.computed

    def _fewest_left(self, p: int) -> int:
        """Fewest output tokens left among the first ``p`` rows at the chain's start."""
        if self.left_prefix is None:  # as stored (the lag comes off per read: no loop)
            self.left_prefix = list(accumulate(self.left_stored, min))
        return self.left_prefix[p - 1] - self.left_lag

    def _head_can_join(self) -> bool:
        """``DecodeStretches.can_stretch`` negated, with the blocks left after the next step
        (``Scheduler.available_blocks(after_decode_step=True)``) from ``G``."""
        r, p = self.r, self.p
        cfg = r.cfg
        if p > cfg.max_num_batched_tokens:
            return True  # no stretch: the loop returns
        if not len(r.waiting) or p >= cfg.max_num_seqs:
            return False
        leftover = cfg.max_num_batched_tokens - p
        if leftover <= 0:
            return False
        available = self.usable - self.blocks.held(self.j)
        if self.own is None:  # ``head_chunk`` without a prefix cache, KV tiers or policies
            # (``_applies``): the head's first chunk of ``min(tokens, leftover)`` tokens fits
            tokens = r.waiting.peek()[1]
            return plain_head_chunk(tokens, leftover, self.block, available) is not None
        rid, tokens = r.waiting.peek()  # vLLM v1's ``head_chunk`` with the chain's hit
        run_entries, _ = self.own.head_run(rid)
        cap = r.scheduler.hbm_hit_entries(rid, tokens)[2]
        hit = min(run_entries, max(cap, 0)) * self.own.entry_tokens
        chunk_end = hit + min(tokens - hit, leftover)
        return r.pool.blocks_for_one(chunk_end) <= available

    def _stretch_steps(self, next_arrival_s: float) -> tuple[int, float, float, bool]:
        """``DecodeStretches.stretch_steps`` of the chain's state: the same float steps."""
        r, p = self.r, self.p
        context = self._context()
        a, b, limit = r.model.decode_line(p, context)
        k = self._left()
        if math.isfinite(limit):
            k = min(k, max(0, math.ceil((limit - context) / p)))
        k_pool = int(self.blocks.first_failure()) - self.j
        if math.isfinite(next_arrival_s):
            # Capped at ``k_pool + 1``: a larger answer ends the stretch at the pool all the
            # same, and the cap usually settles the search at once.
            cap = min(k, k_pool + 1)
            k = _steps_before(next_arrival_s - self.now, a, b, context, p, cap)
        if self.own is not None and len(r.waiting) and k > 0:  # ``own_block_stretch_steps``
            k = self._own_steps(k)
        return min(k, k_pool), a, b, k_pool < k

    def _own_steps(self, k: int) -> int:
        """Steps (at most ``k``) before the step whose waiting pass admits the queue head,
        with own blocks (``ownstretch.steps_before_head_joins`` of the chain's state)."""
        own, r, p, j = self.own, self.r, self.p, self.j
        assert own is not None
        rid = r.waiting.peek()[0]
        run_entries, known = own.head_run(rid)
        if not run_entries:  # ``steps_before_head_joins``' ``not run0`` exit, before the
            return k  # rows' array is built: the head's hit cannot shrink
        free = self.usable - self.blocks.held(j - 1)
        return steps_before_head_joins(
            r,
            self._computed()[:p] + j,
            k,
            (free, own.lru_blocks),
            (run_entries, lambda limit: own.entries_before(rid, known, limit)),
        )

    def _segment(self, k: int, a: float, b: float, context: int) -> None:
        """``DecodeStretches.advance_decode`` of ``k`` steps, every row having emitted at
        ``now``: the KV trace, the ITL samples and the clock; the columns wait."""
        n, j = self.p, self.j
        first = a + b * context
        step = b * n
        total = k * a + b * (k * context + n * k * (k - 1) / 2)
        self.trace_times.append(self.now)
        self.trace_blocks.append(self.outside + self.blocks.held(j - 1))
        last = first + (k - 1) * step
        if last > self.seg_max_itl:  # ``max``: the first of equals stays
            self.seg_max_itl = last
        if not (first >= 0.0 and last >= 0.0):  # ``add_arithmetic``'s check
            raise ValueError(f"ITL durations must be >= 0, got {first} .. {last}")
        self.itl_updates.append((ARITHMETIC, first, step, k, float(n), last))
        self.now += total
        self.finished = k >= self._fewest_left(n) - j  # ``_left``
        self.j = j = j + k
        if self.own is not None:  # the free pool only fell: evict to where it ends
            self.own.evict_to(self.usable - self.blocks.held(j - 1))

    def _commit(self) -> None:
        """Write the chain into the replica: the running rows' columns, the victims' largest
        gaps, the pool, the clock; then the finishes, as ``advance_decode`` does."""
        r, p, j = self.r, self.p, self.j
        run, rec = r.running, r.records
        if self.trace_times:  # the segments' records, in order
            r.trace.record_each(self.trace_times, self.trace_blocks)
            r.itl.add_updates(self.itl_updates)
        if self.victim_ids and not self.implicit:  # ``Scheduler.preempt``'s counts, held
            # back (``ImplicitRows.note_victims``; with the rows implicit: ``_commit_rows``)
            run.rows.note_victims(rec, self.victim_ids, self.victim_computed, self.victim_itl)
        if self.own is not None:
            self.own.commit()
        held = self.blocks.held(j - 1)  # the survivors' blocks after ``j`` steps
        r.pool.free = self.usable - held
        r.now = self.now
        r.num_steps += j
        if self.implicit:
            self._commit_rows(held)
            return
        run.truncate(p)
        if j:
            run.num_computed += j
            run.num_generated += j
            run.num_tokens += j
            np.floor_divide(run.num_computed + (self.block - 1), self.block, out=run.held_blocks)
            run.last_token_s[:] = self.now
            rec.max_itl_s[run.ids] = np.fmax(rec.max_itl_s[run.ids], self.seg_max_itl)
        if self.finished:
            r.finish((run.num_generated >= run.target).nonzero()[0])

    def _commit_rows(self, held: int) -> None:
        """``_commit``'s rows with the rows implicit (``held``: the survivors' blocks). The
        victims leave from the tail: their worst gaps from the ITL log as it stood before the
        chain join their gaps in the chain, and their records are held back
        (``RunningSet.drop_chain_tail``, ``ImplicitRows.note_victims``). The survivors take one
        ITL log entry (the chain's longest step), ``j`` decode steps with the blocks they
        crossed, and a token at the chain's end; then the finishes: the same records as the
        column writes."""
        r, p, j = self.r, self.p, self.j
        run = r.running
        rows = run.rows
        if p < self.n:
            gaps = self.victim_itl
            # The survivors' stored computed sum: the chain's (each victim's computed tokens
            # at the start left it at its pop), less their lag.
            run.drop_chain_tail(p, self.computed_sum - p * self.computed_lag, gaps)
            rows.note_victims(r.records, self.victim_ids, self.victim_computed, gaps)
        if j and p:
            rows.itl_mark(self.seg_max_itl)
            rows.decode(j, held - rows.ceil_sum, p)
            rows.emitted(self.now)
        else:
            rows.ceil_sum = held  # ``decode``'s result, without steps
        if self.finished:
            r.finish(rows.finished_rows())
