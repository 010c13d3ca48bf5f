"""The running set of one replica: the requests that hold KV, as numpy columns in list order.

vLLM v1 keeps ``running`` as a list in admission order; a preemption victim is its last element.
Here each column is a numpy array in that same order, so a step's bookkeeping is vectorised:
``num_computed`` (KV tokens computed), ``num_tokens`` (prompt + generated, the tokens that must be
computed before the next sample), ``num_generated``, ``target`` (output tokens asked for),
``held_blocks`` and ``last_token_s``. Columns live in buffers that grow by doubling, so admitting
a request costs O(1); the int columns are the rows of one 2-D buffer, so moving rows (a finish, a
preemption) is one numpy call, not one per column. The live rows start at a column ``_start`` of
the buffers (``_ints``, ``_times`` and ``_flat`` view them from there): the first row leaves by
moving ``_start`` on, without shifting the others (FIFO: the oldest row is often the one that
finishes, e.g. 80 % of Vidur's trace regime's finishes); the freed front is reused by moving
the rows back to column 0 when the buffers' end is reached (``_grow``).

Decode rows are implicit between events (``engine/implicit.py``, issue 10): a stretch of ``k``
decode steps raises a counter instead of the columns, and the block-crossing histogram, the total
context, the fewest tokens left and each request's worst gap are scalars kept up to date, so the
fast paths touch no column. Reading a column (``num_computed`` and the other lazy ones below)
writes the pending decode steps into it first and lets the caller write it: the general paths
(the scheduler's pass, chains, doomed cycles, preemption) see plain columns, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from inferplan.engine.implicit import ImplicitRows

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# ``itl_from`` (last): the position in the ITL log from which a row's worst gap is pending.
_INT_COLUMNS = (
    "ids", "num_computed", "num_tokens", "num_generated", "target", "held_blocks", "itl_from",
)  # fmt: skip
# Columns that pending decode steps, held blocks or token times make stale until read.
_LAZY = ("num_computed", "num_tokens", "num_generated", "held_blocks", "last_token_s")
# Rows of the int buffer that a decode step (or a stretch of ``k``) raises together.
_DECODE_ROWS = slice(_INT_COLUMNS.index("num_computed"), _INT_COLUMNS.index("num_generated") + 1)
# Rows a sampled token raises (the prefill or decode that computed it is already counted).
_SAMPLE_ROWS = slice(_INT_COLUMNS.index("num_tokens"), _INT_COLUMNS.index("num_generated") + 1)


def _lazy_column(name: str) -> property:
    """A column that pending implicit decode state is written into before it is read; the
    reader may write it, so the implicit scalars are rebuilt from the columns afterwards."""

    index = _INT_COLUMNS.index(name) if name in _INT_COLUMNS else None

    def get(self: RunningSet) -> Any:
        rows = self.rows
        if rows.pending:
            rows.settle()
        rows.forget()
        if index is None:
            return self._times[: self._size]
        return self._ints[index, : self._size]

    def set_(self: RunningSet, value: Any) -> None:
        get(self)[:] = value

    return property(get, set_)


class RunningSet:
    """Requests holding KV on a replica, in admission order."""

    num_computed = _lazy_column("num_computed")
    num_tokens = _lazy_column("num_tokens")
    num_generated = _lazy_column("num_generated")
    held_blocks = _lazy_column("held_blocks")
    last_token_s = _lazy_column("last_token_s")
    rows: ImplicitRows  # the implicit decode state (``engine/implicit.py``)
    # Each column reads as a view of its buffer's live rows; assigning to one writes into the
    # buffer (its property's setter). ``ids`` and ``target`` never go stale.
    _size: int
    _ints: npt.NDArray[np.int64]  # (column, row): the int columns, in ``_INT_COLUMNS`` order
    _times: FloatArray
    _capacity: int  # the buffers' row stride (``_base``'s columns; rows from ``_start`` on)
    _flat: memoryview  # ``_ints`` flat: column ``c``, row ``r`` at ``c * _capacity + r``
    _base: npt.NDArray[np.int64]  # the whole int buffer; ``_ints`` is ``_base[:, _start:]``
    _time_base: FloatArray  # the whole token time buffer; ``_times`` is its ``[_start:]``
    _base_flat: memoryview  # ``_base`` flat; ``_flat`` is its ``[_start:]``
    _start: int  # the buffers' column of row 0

    def __init__(
        self, capacity: int = 64, block_size: int = 0, max_itl_s: FloatArray | None = None
    ) -> None:
        """``block_size``: a uniform pool's block size (every crossing costs one block), which
        lets stretches keep the rows implicit (0: they read the columns); ``max_itl_s``: the
        records' worst gaps, written when a row leaves (``ImplicitRows``' ITL log)."""
        self.rows = ImplicitRows(self, block_size, max_itl_s)
        # Set to a list by a caller that wants the rows ``append`` adds, as stored (each
        # ``_INT_COLUMNS``' values; ``engine/implicit_step.py``), without reading them back.
        self.appended: list[tuple[int, ...]] | None = None
        # The int columns are the rows of one buffer (a shift, a compaction or a stretch's
        # increment is one numpy call for all of them), the token times a buffer of their own.
        self._set_buffers(
            np.zeros((len(_INT_COLUMNS), capacity), dtype=np.int64),
            np.zeros(capacity, dtype=np.float64),
        )
        self._resize(0)

    def _resize(self, size: int) -> None:
        """Set the number of live rows (each column reads as a view of them)."""
        self._size = size

    @property
    def _live(self) -> npt.NDArray[np.int64]:
        """``_ints``' live rows."""
        return self._ints[:, : self._size]

    @property
    def ids(self) -> IntArray:
        return self._ints[0, : self._size]

    @ids.setter
    def ids(self, value: Any) -> None:
        self._ints[0, : self._size] = value

    @property
    def target(self) -> IntArray:
        return self._ints[4, : self._size]

    @target.setter
    def target(self, value: Any) -> None:
        self._ints[4, : self._size] = value

    def _set_buffers(self, ints: np.ndarray, times: np.ndarray) -> None:
        """Adopt new buffers, row 0 at their column 0 (and their rows, each a column's 1-D
        buffer). ``_flat`` views ``_ints``' memory as a flat buffer (``_ints[c, row]`` is
        ``_flat[c * _capacity + row]``): a value read or written through it is a Python int,
        without a numpy scalar or index (``append``, ``stored_row``; the same values)."""
        self._base, self._time_base = ints, times
        self._capacity = ints.shape[1]
        self._base_flat = ints.reshape(-1).data
        self._set_start(0)

    def _set_start(self, start: int) -> None:
        """Row 0 at the buffers' column ``start``: the views from there (``_flat[c *
        _capacity + row]`` is ``_base[c, start + row]``: the stride stays the buffer's)."""
        self._start = start
        self._ints = self._base[:, start:]
        self._times = self._time_base[start:]
        self._flat = self._base_flat[start:]

    def _grow(self, size: int, rows: int) -> None:
        """Room for ``rows`` rows after the ``size`` live ones: the live rows moved back to
        column 0 where the front freed by ``drop_row`` holds them all (so a move is paid by at
        least ``size`` rows appended since the last), else buffers doubled (at least once, as
        before there was a front: the same capacities where no row left from it) until they
        fit."""
        start = self._start
        if start >= size and size + rows <= self._capacity:
            if size:
                self._base[:, :size] = self._base[:, start : start + size]
                self._time_base[:size] = self._time_base[start : start + size]
            self._set_start(0)
            return
        capacity = 2 * self._capacity  # doubled at least once: the end was reached
        while size + rows > capacity:
            capacity *= 2
        ints = np.zeros((len(_INT_COLUMNS), capacity), dtype=np.int64)
        ints[:, :size] = self._ints[:, :size]
        times = np.zeros(capacity, dtype=np.float64)
        times[:size] = self._times[:size]
        self._set_buffers(ints, times)

    def __getstate__(self) -> dict[str, Any]:
        """A copy's state without the views (a memoryview cannot be copied): made again for
        the copy's own buffers by ``__setstate__``."""
        state = dict(self.__dict__)
        for name in ("_ints", "_times", "_flat", "_base_flat"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._base_flat = self._base.reshape(-1).data
        self._set_start(self._start)

    def __len__(self) -> int:
        return self._size

    def append(
        self,
        request_id: int,
        num_computed: int,
        num_tokens: int,
        num_generated: int,
        target: int,
        held_blocks: int,
        last_token_s: float,
    ) -> None:
        row = self._size
        if row == len(self._times):
            self._grow(row, 1)
        rows = self.rows
        lag = rows.lag  # stored decode columns lag the pending decode steps
        stored = (
            request_id,
            num_computed - lag,
            num_tokens - lag,
            num_generated - lag,
            target,
            held_blocks,
            rows.itl_length,
        )
        # Each ``_INT_COLUMNS``' value at ``column * capacity + row``, unrolled (per admission).
        flat, capacity = self._flat, self._capacity
        flat[row] = request_id
        flat[capacity + row] = stored[1]
        flat[2 * capacity + row] = stored[2]
        flat[3 * capacity + row] = stored[3]
        flat[4 * capacity + row] = target
        flat[5 * capacity + row] = held_blocks
        flat[6 * capacity + row] = stored[6]
        self._times[row] = last_token_s
        if self.appended is not None:
            self.appended.append(stored)
        self._size = row + 1

    def extend(self, new: list[tuple[int, int, int, int, int]], last_token_s: float) -> None:
        """``append`` of each of these rows with no computed tokens, in order, all with one
        last token time: (id, num_tokens, num_generated, target, held_blocks) each (a waiting
        pass's admissions, ``engine/plain_admission.py``): the same buffers and ``appended``."""
        row = size = self._size
        if size + len(new) > len(self._times):
            self._grow(size, len(new))
        rows, appended = self.rows, self.appended
        lag, itl_from = rows.lag, rows.itl_length  # stored decode columns lag the decode steps
        flat, capacity = self._flat, self._capacity
        for request_id, num_tokens, num_generated, target, held_blocks in new:
            stored = (request_id, -lag, num_tokens - lag, num_generated - lag, target)
            flat[row] = request_id
            flat[capacity + row] = -lag
            flat[2 * capacity + row] = stored[2]
            flat[3 * capacity + row] = stored[3]
            flat[4 * capacity + row] = target
            flat[5 * capacity + row] = held_blocks
            flat[6 * capacity + row] = itl_from
            if appended is not None:
                appended.append((*stored, held_blocks, itl_from))
            row += 1
        self._times[size:row] = last_token_s
        self._size = row

    def decode(self, steps: int) -> None:
        """Every row computes, emits and holds ``steps`` more tokens (``num_computed``,
        ``num_tokens`` and ``num_generated`` each grow by ``steps``), in one numpy call."""
        self.rows.settle()
        self.rows.forget()
        self._live[_DECODE_ROWS] += steps

    def sample(self) -> None:
        """Every row samples one token: ``num_tokens`` and ``num_generated`` grow by one."""
        self.rows.settle()
        self.rows.forget()
        self._live[_SAMPLE_ROWS] += 1

    def keep(self, mask: BoolArray) -> None:
        """Drop the rows where ``mask`` is False (finished or preempted requests)."""
        rows = self.rows
        rows.settle()
        rows.forget()
        kept = int(mask.sum())
        size = self._size
        for row in np.flatnonzero(~mask).tolist():
            rows.leave(row)
        self._ints[:, :kept] = self._ints[:, :size][:, mask]
        self._times[:kept] = self._times[:size][mask]
        self._resize(kept)

    def drop(self, rows: IntArray) -> None:
        """Drop the rows at these ascending indices; one row by shifting the rest down."""
        if len(rows) != 1:
            mask = np.ones(self._size, dtype=np.bool_)
            mask[rows] = False
            self.keep(mask)
            return
        self.drop_row(int(rows[0]))

    def drop_row(self, row: int, stored: list[int] | None = None) -> None:
        """Drop one row, shifting the rows after it down (the implicit state follows;
        ``stored``: its int columns as Python ints, where the caller read them); the first
        row by moving row 0 on (``_start``), the others unmoved."""
        size, rows = self._size, self.rows
        # Token times all pending (every row emitted at ``rows.time_s``): nothing to shift.
        times_pending = rows.time_rows >= size
        rows.leave(row, stored)
        if row == 0 and size > 1:
            start = self._start + 1
            self._start = start
            self._ints = self._base[:, start:]
            self._times = self._time_base[start:]
            self._flat = self._base_flat[start:]
        elif row < size - 1:
            self._ints[:, row : size - 1] = self._ints[:, row + 1 : size]
            if not times_pending:
                self._times[row : size - 1] = self._times[row + 1 : size]
        self._size = size - 1

    def row_values(self, row: int) -> list[int]:
        """One row's int columns as Python ints: id, num_computed, num_tokens, num_generated,
        target, held_blocks."""
        return self.rows.row_values(row)

    def stored_row(self, row: int) -> list[int]:
        """One row's int columns as stored (the decode columns minus the pending lag), as
        Python ints: for ``ImplicitRows.row_values`` and ``drop_row``."""
        stored: list[int] = self._flat[row :: self._capacity].tolist()
        return stored

    def pop(self, row: int) -> tuple[int, int, int, int]:
        """Remove the request at ``row``: (id, num_computed, num_tokens, held_blocks)."""
        rid, computed, tokens, _, _, held = self.rows.row_values(row)
        self.drop_row(row)
        return rid, computed, tokens, held

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` rows (the last admitted leave, as preemption victims)."""
        assert 0 <= size <= self._size
        rows = self.rows
        rows.settle()
        rows.forget()
        for row in range(size, self._size):
            rows.leave(row)
        self._resize(size)

    def drop_tail(self, size: int) -> None:
        """Keep the first ``size`` rows as ``truncate`` does, with the implicit state kept
        (the rows leave from the tail, each dropped from the scalars and stale prefixes)."""
        if size < self._size:
            self.rows.leave_tail(size)
        self._resize(size)

    def drop_chain_tail(self, size: int, stored_sum: int, gaps: list[float]) -> None:
        """Keep the first ``size`` rows where a chain preempted the rest (``engine/chain.py``):
        ``ImplicitRows.leave_chain_tail`` from the chain's survivors' stored computed sum and
        its victims' worst gaps (the last row first; joined there by their ITL log's)."""
        self.rows.leave_chain_tail(size, stored_sum, gaps)
        self._size = size

    @property
    def all_decoding(self) -> bool:
        """Every request needs exactly one token and has sampled before: no prefill chunk is
        pending (a prompt whose last chunk is one token is still a prefill: it emits the first
        token). Pending decode steps change neither test's columns' difference nor the sign."""
        live, lag = self._live, self.rows.lag
        computed, tokens, generated = live[1], live[2], live[3]
        return bool(((tokens - computed) == 1).all() and (generated > -lag).all())
