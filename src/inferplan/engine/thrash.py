"""Doomed re-admissions in closed form: the cycle a full KV pool puts a long queue head through.

vLLM v1 admits the queue head on its first chunk's blocks only (``Scheduler.head_chunk``), and
when a running request's next chunk does not fit, its running pass preempts the last admitted
request (``vllm/v1/core/sched/scheduler.py``). With the pool nearly full of decoding requests
and a queue head longer than one chunk whose KV cannot fit (a preempted request recomputing tens
of thousands of tokens, or a long prompt), each cycle goes: admit the head's first chunk, run
more chunks while their blocks fit, and at the first chunk that does not fit preempt the head
itself (it is the last admitted) and put it back at the queue's head; the decoding requests
gain one token per step. The cycle repeats until a decoder finishes, the decoders' growth
leaves room for fewer chunks, or a request arrives: thousands of steps per finish when a
long-output workload runs above capacity (``long10x`` in ``benchmarks/bench_regimes.py``).
Where the loop's ``intake`` is given (fast mode, one replica, no client limit:
``simulator.PASS_PAST_ARRIVALS``), an arrival does not end the pass: it is routed at the cycle
boundary or between the steps of the cycle it cuts, and the pass goes on
(``thrashrun._past_arrival``).

``doomed_cycles`` runs whole cycles as scalar arithmetic instead of scheduler passes: every
chunk that runs is ``budget - n`` tokens (a chunk that would complete the head never runs in a
cycle); the decoders' blocks grow at the steps where a row crosses a block boundary, counted
from a histogram of the rows' offsets in their last block; a step's time is its batch shape's
step-time line (``batch_line``, exact to rounding like a decode stretch's). Each step records
what the exact path records (the KV trace, an ITL sample per decoder, the clock); the decoders'
state and the head's preemption counts are written once at the end, through the running set's
implicit rows where it keeps them (``engine/implicit.py``: the decoders read from its scalars and
committed as ``k`` decode steps, their columns written when next read, so the chain after a pass
finds its rows known), else into the columns. The pass is planned in segments
of cycles that keep one plan, a few scalar operations each, and its steps written once
(``take_cycles``, ``engine/thrashrun.py``), bit for bit one cycle at a time
(``tests/engine/thrash_reference.py``). It applies
only where the exact path's outcome is this cycle: vLLM v1's scheduler, FCFS, recompute
preemption, a uniform pool without prefix caching, KV tiers or admission policies, and a
roofline step-time model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.loop_order import same_time_s
from inferplan.engine.schedulers import Scheduler
from inferplan.engine.thrashrun import take_cycles
from inferplan.perf.batch import StepBatch
from inferplan.perf.bounded_cache import keep

if TYPE_CHECKING:
    from inferplan.engine.implicit import ImplicitRows
    from inferplan.engine.replica import Replica

# ``ndarray.sum``, ``min`` and ``max`` without their Python wrappers: the same reductions.
_sum, _min, _max = np.add.reduce, np.minimum.reduce, np.maximum.reduce


def doomed_cycles(
    replica: Replica,
    next_arrival_s: float,
    intake: Callable[[float], float | None] | None = None,
) -> bool:
    """Run the doomed-head cycles the replica is in, each whole, all of them starting before
    the next arrival is seen (a step starting within ``same_time_s`` of it sees it) and ending
    before any decoder finishes; given the loop's ``intake``, on past the arrivals, routing
    them (``thrashrun._past_arrival``). False, having done nothing, if not one cycle can run."""
    if replica.doomed_mark == _state_key(replica, next_arrival_s):
        return False  # a pass ended here: the cycle that ended it cannot run now either
    if not _applies(replica):
        return False
    cycles = _Cycles(replica)
    if intake is None:
        take_cycles(cycles, next_arrival_s, same_time_s)
    else:  # on past the arrivals: the pass ends at a later bound
        next_arrival_s = take_cycles(cycles, next_arrival_s, same_time_s, intake)
    if cycles.num_steps:
        cycles.commit()
    # Where this pass ended (``Replica.doomed_mark``). A pass ends where its next cycle is not
    # one (``_Cycles._plan``) or does not start in time for the arrival; asked again in the same
    # state (the loop's next pass, the arrival not yet due) it takes no cycle and changes nothing
    # (the lines of that cycle were made by the pass: the same are found), so the answer is
    # known without the pass. Its steps and clock, the queue and pool, and the arrival bound:
    # nothing else changes the state between two passes of the loop at one replica.
    replica.doomed_mark = _state_key(replica, next_arrival_s)
    return cycles.num_steps > 0


def _state_key(r: Replica, next_arrival_s: float) -> tuple[int, float, float, int, int, int]:
    return (r.num_steps, r.now, next_arrival_s, r.pool.free_blocks, len(r.waiting), r.running._size)


def _applies(r: Replica) -> bool:
    """vLLM v1's scheduler in a state whose next steps can only be doomed-head cycles: every
    running row a pure decode that emitted at ``now``, an FCFS queue whose head needs more than
    one chunk and fits beside them in ``max_num_seqs``, nothing else in the way."""
    sched, run, pool, cfg = r.scheduler, r.running, r.pool, r.cfg
    if type(sched) is not Scheduler or sched.admission is not None or r.offload is not None:
        return False
    if cfg.preemption_mode != "recompute" or pool.cache is not None or not pool.is_uniform:
        return False
    if r.swapped or not len(r.waiting) or r.waiting.policy != "fcfs":
        return False
    n = len(run)
    if n == 0 or n + 1 > cfg.max_num_seqs or cfg.max_num_batched_tokens - n < 2:
        return False
    if not getattr(r.model, "batch_line", None):
        return False  # a measured operator table has no line for mixed steps
    _, tokens = r.waiting.peek()
    if tokens <= cfg.max_num_batched_tokens - n or not r.is_decoding():
        return False
    rows = run.rows
    if rows.time_rows >= n:  # every row's last token time is the implicit one (no settling)
        return rows.time_s == r.now
    times = run.last_token_s  # ``min`` and ``max`` as their ufuncs (the same reductions)
    return bool(_min(times) == r.now) and bool(_max(times) == r.now)


# A line per head chunk ``j`` for a model, ``n`` decoders and a chunk: ``(a, b, limit,
# context)``, ``a + b * C`` for ``context <= C < limit`` (``batch_line``: the prefill chunk's
# operators do not depend on ``C``, so the line is the same floats there). Kept across
# ``doomed_cycles`` calls, which each met the same lines anew (a roofline pass each); bounded,
# and keyed by the model's identity with the model kept, so an id is never reused.
Line = tuple[float, float, float, int]
_LINES: dict[tuple[int, int, int], tuple[object, dict[int, Line]]] = {}
MAX_SHARED_LINES = 256  # ``(model, n, chunk)`` keys kept before the memo starts afresh


def shared_lines(model: object, n: int, chunk: int) -> dict[int, Line]:
    """The lines made so far for ``model``, ``n`` decoders and head chunks of ``chunk``."""
    key = (id(model), n, chunk)
    entry = _LINES.get(key)
    if entry is None or entry[0] is not model:
        entry = keep(_LINES, key, (model, {}), MAX_SHARED_LINES)
    return entry[1]


class _Cycles:
    """The cycles' state as scalars: steps taken ``s``, the decoders' blocks ``held`` after
    them, the clock, and the head's tallies."""

    def __init__(self, r: Replica) -> None:
        run, cfg = r.running, r.cfg
        self.r, self.n, self.block = r, len(run), cfg.block_size
        self.head, self.tokens = r.waiting.peek()
        self.chunk = cfg.max_num_batched_tokens - self.n
        # Rows by offset in their last block: the row crosses into a new block at step ``s``
        # when ``(computed + s) % block == 0``.
        self.implicit = _implicit(run.rows, self.block)
        if self.implicit:  # from the rows' scalars, their columns left as they are
            rows = run.rows
            self.by_offset = rows.offset_counts()  # ``_implicit`` holds rows.block == block
            self.held = rows.ceil_sum
            self.context = rows.computed_sum + self.n * (rows.lag + 1)
            self.steps_left = rows.fewest_left()
        else:
            self.held = int(_sum(run.held_blocks))
            self.by_offset = np.bincount(
                run.num_computed % self.block, minlength=self.block
            ).tolist()
            self.context = int(_sum(run.num_computed)) + self.n  # decode context at step 0
            self.steps_left = int(_min(run.target - run.num_generated))  # to the first finish
        self.by_offset_array = np.array(self.by_offset)
        self.held_start = self.held
        self.usable = r.pool.free + self.held  # the decoders' blocks and the free pool
        self.now, self.num_steps = r.now, 0
        # Every step's time, in order, as the runs and cycles gave them (``all_durations``).
        self.durations: list[np.ndarray] = []
        # Past an arrival (``thrashrun._past_arrival``): the entries of ``durations`` that are
        # a cycle the general path would have run (one ITL sample a step), and those where
        # another pass would have begun (a batch of its own).
        self.ones: list[int] = []
        self.breaks: list[int] = []
        self.num_cycles, self.recomputed = 0, 0
        # The step-time line of the head's chunk ``j`` beside the decoders, with the context
        # it was made at: kept across calls for this model, ``n`` and chunk (``_step_s``).
        self.lines = shared_lines(r.model, self.n, self.chunk)

    def _crossings(self, s: int) -> int:
        return self.by_offset[-s % self.block]

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def _plan(self) -> list[int] | None:
        """The next cycle's head blocks per step (the last step, its preemption, 0), or None
        where the exact path would do something else: the decoders cannot all grow (a decode
        preemption), the head cannot join or would complete, or a decoder would finish."""
        s, held, usable = self.num_steps, self.held, self.usable
        held += self._crossings(s)
        if held > usable or self._blocks(self.chunk) > usable - held:
            return None  # a decode preemption, or the head cannot join: not a cycle
        plan = [self._blocks(self.chunk)]
        while True:
            held += self._crossings(s + len(plan))
            computed = (len(plan) + 1) * self.chunk
            need = self._blocks(min(computed, self.tokens))
            if held + need > usable:
                break  # the head's chunk (or a decoder, the head being last) does not fit
            if computed >= self.tokens:
                return None  # the head's last chunk fits: it completes
            plan.append(need)
        if held > usable or s + len(plan) + 1 >= self.steps_left:
            return None  # more victims than the head, or a decoder finishes
        return [*plan, 0]

    def _step_s(self, j: int, context: int) -> float:
        """Step time with the head's chunk ``j`` (0: none) beside the decoders at ``context``."""
        if j == 0:
            a, b, _ = self.r.model.decode_line(self.n, context)
            return a + b * context
        line = self.lines.get(j)
        if line is None or not line[3] <= context < line[2]:  # made for another context
            q, o = self.chunk, (j - 1) * self.chunk
            batch = StepBatch(
                prefill_tokens=q,
                prefill_attention_pairs=float(q * o + q * (q + 1) / 2),
                prefill_context_tokens=o,
                num_prefill_seqs=1,
                num_decode_seqs=self.n,
                decode_context_tokens=context,
            )
            a, b, limit = self.r.model.batch_line(batch)  # type: ignore[attr-defined]
            line = self.lines[j] = (a, b, limit, context)
        return line[0] + line[1] * context

    def crossings_from(self, s: int, steps: int) -> np.ndarray:
        """Cumulative blocks the decoders take over steps ``s .. s + steps - 1`` (each entry:
        the blocks from step ``s`` up to and including that step)."""
        minus_t = np.arange(-s, -s - steps, -1)  # ``-t`` for each step ``t``
        return np.add.accumulate(self.by_offset_array[minus_t % self.block])  # ``np.cumsum``

    def all_durations(self) -> np.ndarray:
        """Every step's seconds, in order (a pass written once: its one array, not copied;
        nothing writes into it after ``_write``)."""
        durations = self.durations
        if len(durations) == 1:
            return durations[0]
        return np.concatenate(durations) if durations else np.empty(0)

    def commit(self) -> None:
        """Write the cycles into the replica: decoders' columns, the pool, the head's counts."""
        if self.implicit:
            self._commit_implicit()
            return
        r, k = self.r, self.num_steps
        run, rec = r.running, r.records
        computed, held = run.num_computed, run.held_blocks
        computed += k
        run.num_generated += k
        run.num_tokens += k
        np.floor_divide(computed + (self.block - 1), self.block, out=held)
        r.pool.free = self.usable - self.held
        run.last_token_s[:] = self.now
        ids = run.ids
        durations = self.all_durations()
        rec.max_itl_s[ids] = np.fmax(rec.max_itl_s[ids], _max(durations))
        self._add_itl(durations)
        self._commit_head()

    def _commit_implicit(self) -> None:
        """``commit`` through the rows' implicit state (``engine/implicit.py``): ``k`` decode
        steps of every row (``lag``), each then holding ``ceil(computed / B)`` blocks, every row
        emitting at the pass's end, and its longest step on the ITL log (a row's worst gap,
        written when it leaves: the same maximum as ``np.fmax`` into the records now). The
        columns are written when next read, as after a stretch; the scalars stay known."""
        r, k = self.r, self.num_steps
        rows = r.running.rows
        rows.decode(k, self.held - self.held_start, self.n)
        r.pool.free = self.usable - self.held
        rows.emitted(self.now)
        durations = self.all_durations()
        rows.itl_mark(float(_max(durations)))
        self._add_itl(durations)
        self._commit_head()

    def _add_itl(self, durations: np.ndarray) -> None:
        """Every decoder's sample of every step: one ``add_many`` of the pass's steps; past an
        arrival, the batches each pass would have added, and between them the general path's
        cycle, one ``add`` a step (the same updates in the same order)."""
        itl, n = self.r.itl, float(self.n)
        if not (self.ones or self.breaks):
            itl.add_many(durations, n)  # every decoder, every step
            return
        batch: list[np.ndarray] = []
        for i, part in enumerate(self.durations):
            if batch and (i in self.ones or i in self.breaks):
                itl.add_many(np.concatenate(batch) if len(batch) > 1 else batch[0], n)
                batch = []
            if i in self.ones:
                for duration in part.tolist():
                    itl.add(duration, n)
            else:
                batch.append(part)
        if batch:
            itl.add_many(np.concatenate(batch) if len(batch) > 1 else batch[0], n)

    def _commit_head(self) -> None:
        """Both commits' end: the head's preemption counts, the clock and the steps."""
        r = self.r
        r.records.num_preemptions[self.head] += self.num_cycles
        r.records.recomputed_tokens[self.head] += self.recomputed
        r.now = self.now
        r.num_steps += self.num_steps


def _implicit(rows: ImplicitRows, block: int) -> bool:
    """Whether the pass may read and write the rows through their implicit scalars: a uniform
    pool's rows (``rows.block``), every row known (``holds_ceil`` learns them) and holding
    ``ceil(computed / B)`` blocks."""
    return rows.block == block > 0 and rows.holds_ceil()
