"""Decode rows kept implicit: a running set's pending decode steps and its scalars (issue 10).

Below capacity nearly every step is a decode of every running row, and a stretch or the vector
admission step used to reduce or write each column of the batch (tens of small numpy calls per
event). Here the fast paths keep, per running set:

- **A decode counter** ``lag``: the three decode columns (computed, tokens, generated) are
  stored minus it, so ``k`` decode steps of every row are ``lag += k``. Rows appended later are
  stored minus the lag at their append, so one counter serves rows that joined at any step.
- **Prefixes of stale columns**: rows ``[0, held_rows)`` hold ``ceil(computed / B)`` blocks (a
  uniform pool, vLLM v1's decode rows) and rows ``[0, time_rows)`` emitted their last token at
  ``time_s``; their columns are written only when read.
- **Scalars** over rows ``[0, known_rows)``: the stored computed sum (the total context is
  ``sum + n * (lag + 1)``), a histogram of the stored computed tokens mod ``B`` (row ``j``
  crosses into a new block at the steps ``i`` with ``(c_j + i) % B == 0``, so the blocks ``k``
  steps take and the step at which the pool runs out are ``O(B)``, not ``O(batch)``), the sum
  of ``ceil(computed / B)`` (the pool's held blocks after a stretch), and a heap of each row's
  ``target - generated`` (the fewest tokens left is its top minus the lag).
- **An ITL log**: a stretch's longest step (or a decode step's duration) applies to every row
  running then; it is pushed on a monotonic stack, and a row's worst gap is the largest entry
  since it joined (``itl_from``), written into the records when the row leaves. Maxima commute,
  so a path that writes ``max_itl_s`` directly (chains, doomed cycles, the general step) gives
  the same record.
- **A chain's victims' records** (``engine/chain.py``: a preemption each, the tokens it will
  recompute, its worst gap), held back run-wide and applied ``VICTIMS_HELD`` at a time with
  ``np.add.at`` / ``np.fmax.at``, and at ``flush_itl`` (the run's end, a replica run apart);
  a reader of those columns mid-run calls ``flush_victims`` first. Sums and maxima commute, so
  the records are the same at any moment they are applied.

Reading a lazy column settles it (the pending steps, blocks and times are written, in one numpy
call each) and forgets the scalars (the reader may write the columns); the next fast path
relearns them from the columns. Every value equals what the columns would have held, so results
are unchanged bit for bit (``tests/engine/test_implicit_rows.py``).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from inferplan.metrics.records import RequestRecords

if TYPE_CHECKING:
    from inferplan.engine.running import RunningSet

# Rows of ``RunningSet._ints``: id, computed, tokens, generated, target, held, itl_from.
_ID, _COMPUTED, _TOKENS, _GENERATED, _TARGET, _HELD, _ITL_FROM = range(7)
_PRUNE_AT = 1024  # ITL log entries before the ones no running row reads are dropped
_VECTOR_ROWS = 32  # rows from which ``learn`` runs in numpy rather than a Python loop
# A chain's victims' record writes held back (``note_victims``) up to this many, then applied
# in three numpy calls (``flush_victims``): sums and maxima commute, so any moment is exact.
VICTIMS_HELD = 1 << 15


class ImplicitRows:
    """A running set's implicit decode state (module docstring)."""

    def __init__(
        self, run: RunningSet, block_size: int, max_itl_s: npt.NDArray[np.float64] | None
    ) -> None:
        self.run, self.block, self.max_itl_s = run, block_size, max_itl_s
        self.lag = 0
        self.held_rows = 0
        self.time_rows, self.time_s = 0, 0.0
        self.pending = False  # lag, held_rows or time_rows set
        self.known_rows = 0
        self.computed_sum = 0
        self.ceil_sum = 0
        self.hist = [0] * max(block_size, 1)
        self.due: list[int] = []
        self.left: list[int] = []  # ``target - generated`` (stored) per known row, in row order
        self.gone: dict[int, int] = {}
        self.ceil_held = True  # every known row beyond ``held_rows`` holds ceil(computed / B)
        self.itl_length = 0
        self._itl_pos: list[int] = []
        self._itl_val: list[float] = []
        self._prune_at = _PRUNE_AT
        # Chains' victims' record writes not yet applied (``note_victims``): each victim's id,
        # computed tokens (``recomputed_tokens``) and worst gap (-inf: none), into ``records``.
        self.victims_into: RequestRecords | None = None
        self.victim_ids: list[int] = []
        self.victim_computed: list[int] = []
        self.victim_gaps: list[float] = []

    # ---- settling ---------------------------------------------------------------------------

    def settle(self) -> None:
        """Write the pending decode steps, held blocks and token times into the columns."""
        if not self.pending:
            return
        run = self.run
        ints, size = run._ints, run._size
        if self.lag:
            ints[_COMPUTED : _GENERATED + 1, :size] += self.lag
            self.lag = 0
            self.known_rows = 0  # the histogram and sums are of the stored columns
        if self.held_rows:
            h, block = self.held_rows, self.block
            np.floor_divide(ints[_COMPUTED, :h] + (block - 1), block, out=ints[_HELD, :h])
            self.held_rows = 0
        if self.time_rows:
            run._times[: self.time_rows] = self.time_s
            self.time_rows = 0
        self.pending = False

    def forget(self) -> None:
        """The columns may change under us: relearn the scalars before the next fast path."""
        self.known_rows = 0

    def learn(self) -> None:
        """Bring the scalars up to date with every row (those appended since, or all)."""
        run = self.run
        size, start = run._size, self.known_rows
        if start == 0:  # forgotten (or never known): from nothing
            self._reset()
        if start == size:
            return
        ints = run._ints  # ``_learn_range``, inline: asked after every admission
        if size - start >= _VECTOR_ROWS:
            self._learn_rows(start, size)
            return
        computed = ints[_COMPUTED, start:size].tolist()
        keys = (ints[_TARGET, start:size] - ints[_GENERATED, start:size]).tolist()
        held = ints[_HELD, start:size].tolist()
        self._add_rows(computed, keys, held)

    def learn_first(self, rows: int) -> None:
        """The scalars of rows ``[0, rows)`` only (``engine/chunk_step.py``: the decoders in
        front of a prefilling last row, which the scalars then leave out)."""
        if self.known_rows > rows:
            self.known_rows = 0
        start = self.known_rows
        if start == 0:
            self._reset()
        if start != rows:
            self._learn_range(start, rows)

    def _learn_range(self, start: int, rows: int) -> None:
        """The scalars of rows ``[start, rows)`` added to those of the rows before."""
        if rows - start >= _VECTOR_ROWS:
            self._learn_rows(start, rows)
            return
        ints = self.run._ints
        computed = ints[_COMPUTED, start:rows].tolist()
        keys = (ints[_TARGET, start:rows] - ints[_GENERATED, start:rows]).tolist()
        self._add_rows(computed, keys, ints[_HELD, start:rows].tolist())

    def learn_row(self, computed: int, key: int, held: int) -> None:
        """``learn_rows`` of one row, in scalars (the same integers and heap)."""
        if self.known_rows == 0:
            self._reset()
        row, block = self.known_rows, self.block
        self.hist[computed % block] += 1
        blocks = -(-(computed + self.lag) // block)
        self.ceil_sum += blocks
        if row >= self.held_rows and held != blocks:
            self.ceil_held = False
        self.computed_sum += computed
        self.left.append(key)
        heapq.heappush(self.due, key)
        self.known_rows = row + 1

    def learn_rows(self, computed: list[int], keys: list[int], held: list[int]) -> None:
        """``learn`` of the last rows, after the known ones, from the caller's Python ints: their
        stored computed tokens, ``target - generated`` and held blocks (``implicit_step``'s)."""
        if self.known_rows == 0:
            self._reset()
        self._add_rows(computed, keys, held)

    def _reset(self) -> None:
        self.computed_sum = self.ceil_sum = 0
        self.hist = [0] * self.block
        self.due, self.gone, self.ceil_held, self.left = [], {}, True, []

    def _add_rows(self, computed: list[int], keys: list[int], held: list[int]) -> None:
        block, lag, start = self.block, self.lag, self.known_rows
        hist, ceil_sum, held_rows = self.hist, self.ceil_sum, self.held_rows
        ceil_held = self.ceil_held
        for row, c in enumerate(computed, start):
            hist[c % block] += 1
            blocks = -(-(c + lag) // block)
            ceil_sum += blocks
            if row >= held_rows and held[row - start] != blocks:
                ceil_held = False
        self.ceil_held, self.ceil_sum = ceil_held, ceil_sum
        self.computed_sum += sum(computed)
        self.left.extend(keys)
        if start == 0:
            keys.sort()  # a sorted list is a heap
            self.due = keys
        else:
            for key in keys:
                heapq.heappush(self.due, key)
        self.known_rows = start + len(computed)

    def _learn_rows(self, start: int, size: int) -> None:
        """``learn`` of rows ``[start, size)`` in numpy (many rows: after a general path
        settled the columns): the same integers."""
        ints, block, lag = self.run._ints, self.block, self.lag
        computed = ints[_COMPUTED, start:size]
        counts = np.bincount(computed % block, minlength=block).tolist()
        self.hist = [h + c for h, c in zip(self.hist, counts, strict=True)]
        blocks = (computed + (lag + block - 1)) // block
        self.ceil_sum += int(blocks.sum())
        first = max(self.held_rows, start)  # rows before it hold ceil(computed / B) by definition
        if first < size and bool((ints[_HELD, first:size] != blocks[first - start :]).any()):
            self.ceil_held = False
        self.computed_sum += int(computed.sum())
        left = (ints[_TARGET, start:size] - ints[_GENERATED, start:size]).tolist()
        self.left.extend(left)
        keys = sorted(left)
        if start == 0:
            self.due = keys  # a sorted list is a heap
        else:
            for key in keys:
                heapq.heappush(self.due, key)
        self.known_rows = size

    # ---- what the fast paths read -----------------------------------------------------------

    def total_context(self) -> int:
        """``sum(num_computed) + n``: every row's KV length including the token it computes."""
        if self.known_rows != self.run._size or not self.known_rows:
            self.learn()
        n = self.run._size
        return self.computed_sum + n * (self.lag + 1)

    def fewest_left(self) -> int:
        """``min(target - num_generated)`` over the rows (there is at least one)."""
        if self.known_rows != self.run._size or not self.known_rows:
            self.learn()
        due, gone = self.due, self.gone  # ``fewest_known_left``, inline: asked per event
        while gone and due[0] in gone:
            key = heapq.heappop(due)
            if gone[key] == 1:
                del gone[key]
            else:
                gone[key] -= 1
        return due[0] - self.lag

    def fewest_known_left(self) -> int:
        """``fewest_left`` over the known rows only (there is at least one), learning none."""
        due, gone = self.due, self.gone
        while gone and due[0] in gone:
            key = heapq.heappop(due)
            if gone[key] == 1:
                del gone[key]
            else:
                gone[key] -= 1
        return due[0] - self.lag

    def crossings(self, k: int) -> int:
        """Blocks the rows' next ``k`` decode steps take: row ``j`` crosses at the steps ``i``
        with ``(c_j + i) % B == 0``, so ``k // B`` rounds of every row, and in the rest the rows
        whose offset ``(-c_j) % B`` is below ``k % B``."""
        if self.known_rows != self.run._size or not self.known_rows:
            self.learn()
        block, lag, hist = self.block, self.lag, self.hist
        top = -lag % block  # offset 0's bin; offsets below ``k % B`` count down from it
        if k == 1:
            return hist[top]
        total = self.run._size * (k // block)
        low = top - k % block + 1  # the bins ``(top - offset) % B``: a slice, two if it wraps
        if low >= 0:
            return total + sum(hist[low : top + 1])
        return total + sum(hist[: top + 1]) + sum(hist[low + block :])

    def kth_offset(self, j: int) -> int:
        """The ``j``-th smallest (from 0) offset ``(-c) % B`` over the rows (``np.partition``
        of the offsets), from the histogram."""
        if self.known_rows != self.run._size or not self.known_rows:
            self.learn()
        block, lag, hist = self.block, self.lag, self.hist
        for offset in range(block):
            count = hist[(-lag - offset) % block]
            if j < count:
                return offset
            j -= count
        raise ValueError(f"offset {j} past the {self.run._size} rows")

    def finished_rows(self) -> np.ndarray | list[int]:
        """Rows whose generated tokens reach their target, ascending. Where every row is
        known and none is past its target, those whose ``target - generated`` is the lag,
        found in the known rows' list (a scan in C, not three numpy calls)."""
        size, lag, left = self.run._size, self.lag, self.left
        if self.known_rows == size and size and self.fewest_left() == 0:
            if left.count(lag) == 1:
                return [left.index(lag)]
            return [row for row, key in enumerate(left) if key == lag]
        ints = self.run._ints
        done = ints[_GENERATED, :size] + self.lag >= ints[_TARGET, :size]
        rows: np.ndarray = done.nonzero()[0]
        return rows

    def row_values(self, row: int, stored: list[int] | None = None) -> list[int]:
        """Row ``row``'s id, computed, tokens, generated, target and held blocks (``stored``:
        its int columns as Python ints, where the caller read them)."""
        if stored is None:
            stored = self.run._ints[:, row].tolist()
        rid, computed, tokens, generated, target, held, _ = stored
        lag = self.lag
        computed += lag
        if row < self.held_rows:
            held = -(-computed // self.block)
        return [rid, computed, tokens + lag, generated + lag, target, held]

    def offset_counts(self) -> list[int]:
        """Known rows per offset ``(computed + lag) % B``: ``hist[(v - lag) % B]`` at ``v``."""
        top = -self.lag % self.block
        return self.hist[top:] + self.hist[:top]

    def holds_ceil(self) -> bool:
        """Every row holds ``ceil(computed / B)`` blocks (vLLM v1's decode rows do)."""
        if self.known_rows != self.run._size or not self.known_rows:
            self.learn()
        return self.ceil_held

    def emitted_at(self, rows: int) -> float | None:
        """The time rows ``[0, rows)`` all emitted their last token at, if lazily known."""
        return self.time_s if self.time_rows >= rows and rows else None

    # ---- what the fast paths write ----------------------------------------------------------

    def decode(self, k: int, new_blocks: int, held_rows: int) -> None:
        """Every row decodes ``k`` tokens (taking ``new_blocks``, ``crossings(k)``); rows
        ``[0, held_rows)`` then hold ``ceil(computed / B)`` blocks."""
        self.lag += k
        self.ceil_sum += new_blocks
        self.held_rows = held_rows
        self.pending = True

    def emitted(self, now: float) -> None:
        """Every row emitted its last token at ``now``."""
        self.time_rows, self.time_s = self.run._size, now
        self.pending = True

    def emitted_first(self, now: float, rows: int) -> None:
        """Rows ``[0, rows)`` emitted their last token at ``now`` (the others' times written)."""
        self.time_rows, self.time_s = rows, now
        self.pending = True

    def leave(self, row: int, stored: list[int] | None = None) -> None:
        """Row ``row`` is about to leave (its columns still in place; ``stored``: its int
        columns as Python ints, where the caller read them): drop it from the scalars and the
        stale prefixes, and write its worst gap from the ITL log."""
        if stored is None:
            stored = self.run._ints[:, row].tolist()
        if row < self.known_rows:
            del self.left[row]
            c = stored[_COMPUTED]
            self.computed_sum -= c
            self.hist[c % self.block] -= 1
            self.ceil_sum -= -(-(c + self.lag) // self.block)
            key = stored[_TARGET] - stored[_GENERATED]
            self.gone[key] = self.gone.get(key, 0) + 1
            self.known_rows -= 1
        if row < self.held_rows:
            self.held_rows -= 1
        if row < self.time_rows:
            self.time_rows -= 1
        self._write_itl(stored[_ID], stored[_ITL_FROM])

    def leave_tail(self, size: int) -> None:
        """Rows ``size ..`` are about to leave, the last first (``leave`` of each, their
        columns read in one call): a chain's victims."""
        tail = self.run._ints[:, size : self.run._size].tolist()
        ids, computed, itl_from = tail[_ID], tail[_COMPUTED], tail[_ITL_FROM]
        generated, target = tail[_GENERATED], tail[_TARGET]
        block, lag, hist, gone = self.block, self.lag, self.hist, self.gone
        known = self.known_rows
        for i in range(len(ids) - 1, -1, -1):
            row = size + i
            if row < known:
                c = computed[i]
                self.computed_sum -= c
                hist[c % block] -= 1
                self.ceil_sum -= -(-(c + lag) // block)
                key = target[i] - generated[i]
                gone[key] = gone.get(key, 0) + 1
                known -= 1
            if row < self.held_rows:
                self.held_rows -= 1
            if row < self.time_rows:
                self.time_rows -= 1
            self._write_itl(ids[i], itl_from[i])
        del self.left[known : self.known_rows]
        self.known_rows = known

    def leave_chain_tail(self, size: int, stored_sum: int, gaps: list[float]) -> None:
        """``leave_tail`` of a chain's victims (``engine/chain.py``; every row known) from the
        chain's survivors' stored computed sum and each victim's worst gap in it (``gaps``,
        -inf: none; the last row first), here joined by its worst gap in the ITL log, for the
        caller to hold back (``note_victims``). The ceil sum is left: the caller sets it."""
        run = self.run
        n = run._size
        flat, capacity = run._flat, run._capacity
        block, hist, gone, left = self.block, self.hist, self.gone, self.left
        for c in flat[_COMPUTED * capacity + size : _COMPUTED * capacity + n].tolist():
            hist[c % block] -= 1
        for key in reversed(left[size:]):  # the last row first, as ``leave_tail``
            gone[key] = gone.get(key, 0) + 1
        del left[size:]
        self.known_rows = size
        self.computed_sum = stored_sum
        self.held_rows -= max(0, min(self.held_rows, n) - size)
        self.time_rows -= max(0, min(self.time_rows, n) - size)
        if self.max_itl_s is None:
            return
        poss, vals = self._itl_pos, self._itl_val
        end = len(vals)
        start_at = _ITL_FROM * capacity + n - 1  # the last victim's ``_ITL_FROM``
        for v, gap in enumerate(gaps):  # row ``n - 1 - v``
            i = bisect_left(poss, flat[start_at - v])
            if i < end and not gap >= vals[i]:
                gaps[v] = vals[i]

    def note_victims(
        self, records: RequestRecords, ids: list[int], computed: list[int], gaps: list[float]
    ) -> None:
        """A chain's victims' ``Scheduler.preempt`` records (a preemption each, ``computed``
        tokens to recompute, and the worst gap ``np.fmax``-ed in where above -inf), held back
        and applied by ``flush_victims``: at ``VICTIMS_HELD`` victims, by ``flush_itl`` (the
        run's end, ``engine/run_result.py`` and ``engine/apart.py``), or by a reader mid-run."""
        if records is not self.victims_into:
            self.flush_victims()
            self.victims_into = records
        self.victim_ids += ids
        self.victim_computed += computed
        self.victim_gaps += gaps
        if len(self.victim_ids) >= VICTIMS_HELD:
            self.flush_victims()

    def flush_victims(self) -> None:
        """Apply the victims' held-back records (``note_victims``): the same integers and
        maxima as writing each at its preemption (sums and maxima commute; ``np.fmax``: a nan
        record gives way)."""
        rec = self.victims_into
        if rec is None or not self.victim_ids:
            return
        ids = np.array(self.victim_ids, dtype=np.int64)
        np.add.at(rec.num_preemptions, ids, 1)
        np.add.at(rec.recomputed_tokens, ids, np.array(self.victim_computed, dtype=np.int64))
        gaps = np.array(self.victim_gaps, dtype=np.float64)
        ran = gaps > -math.inf  # victims of a chain's first step ran no segment of it
        np.fmax.at(rec.max_itl_s, ids[ran], gaps[ran])
        self.victim_ids, self.victim_computed, self.victim_gaps = [], [], []

    # ---- the ITL log ------------------------------------------------------------------------

    def itl_mark(self, gap_s: float) -> None:
        """Every running row had a gap of ``gap_s`` (its worst so far may grow to it)."""
        vals, poss = self._itl_val, self._itl_pos
        while vals and vals[-1] <= gap_s:
            vals.pop()
            poss.pop()
        vals.append(gap_s)
        poss.append(self.itl_length)
        self.itl_length += 1
        if len(vals) > self._prune_at:
            self._prune()

    def itl_restart(self, first_row: int) -> None:
        """Rows ``[first_row, n)`` read only the log's entries from now on."""
        size = self.run._size
        if size == first_row + 1:  # one row (an admission step's usual): a scalar write
            self.run._flat[_ITL_FROM * self.run._capacity + first_row] = self.itl_length
        else:
            self.run._ints[_ITL_FROM, first_row:size] = self.itl_length

    def flush_itl(self) -> None:
        """Write every running row's pending worst gap and the victims' held-back records
        (the run's end)."""
        ints = self.run._ints
        for row in range(self.run._size):
            self._write_itl(int(ints[_ID, row]), int(ints[_ITL_FROM, row]))
            ints[_ITL_FROM, row] = self.itl_length
        self.flush_victims()

    def _write_itl(self, rid: int, start: int) -> None:
        if self.max_itl_s is None:
            return
        i = bisect_left(self._itl_pos, start)
        if i == len(self._itl_val):
            return
        worst = self._itl_val[i]  # the largest entry since ``start`` (a decreasing stack)
        if not self.max_itl_s[rid] >= worst:  # ``np.fmax``: nan (no gap yet) gives way
            self.max_itl_s[rid] = worst

    def _prune(self) -> None:
        """Drop the log's entries before the oldest a running row reads."""
        size = self.run._size
        oldest = int(self.run._ints[_ITL_FROM, :size].min()) if size else self.itl_length
        cut = bisect_left(self._itl_pos, oldest)
        del self._itl_pos[:cut], self._itl_val[:cut]
        self._prune_at = max(_PRUNE_AT, 2 * len(self._itl_val))
