"""The running set of one replica: the requests that hold KV, as numpy columns in list order.

vLLM v1 keeps ``running`` as a list in admission order; a preemption victim is its last element.
Here each column is a numpy array in that same order, so a step's bookkeeping is vectorised:
``num_computed`` (KV tokens computed), ``num_tokens`` (prompt + generated, the tokens that must be
computed before the next sample), ``num_generated``, ``target`` (output tokens asked for),
``held_blocks`` and ``last_token_s``. Columns live in buffers that grow by doubling, so admitting
a request costs O(1); each column attribute is a view of its buffer's live rows, and assigning
to it writes into the buffer. The int columns are the rows of one 2-D buffer, so moving rows
(a finish, a preemption) or a stretch's increment is one numpy call, not one per column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_INT_COLUMNS = ("ids", "num_computed", "num_tokens", "num_generated", "target", "held_blocks")
_COLUMNS = (*_INT_COLUMNS, "last_token_s")
# Rows of the int buffer that a decode step (or a stretch of ``k``) raises together.
_DECODE_ROWS = slice(_INT_COLUMNS.index("num_computed"), _INT_COLUMNS.index("num_generated") + 1)
# Rows a sampled token raises (the prefill or decode that computed it is already counted).
_SAMPLE_ROWS = slice(_INT_COLUMNS.index("num_tokens"), _INT_COLUMNS.index("num_generated") + 1)


class RunningSet:
    """Requests holding KV on a replica, in admission order."""

    # Views of the buffers' live rows, rebound whenever the size or a buffer changes; assigning
    # to one writes into its buffer (``__setattr__``).
    ids: IntArray
    num_computed: IntArray
    num_tokens: IntArray
    num_generated: IntArray
    target: IntArray
    held_blocks: IntArray
    last_token_s: FloatArray
    _size: int
    _ints: npt.NDArray[np.int64]  # (column, row): the int columns, in ``_INT_COLUMNS`` order
    _times: FloatArray
    _rows: list[tuple[str, np.ndarray]]  # each column's name and its whole 1-D buffer
    _live: npt.NDArray[np.int64]  # ``_ints``' live rows

    def __init__(self, capacity: int = 64) -> None:
        # The int columns are the rows of one buffer (a shift, a compaction or a stretch's
        # increment is one numpy call for all of them), the token times a buffer of their own.
        self._set_buffers(
            np.zeros((len(_INT_COLUMNS), capacity), dtype=np.int64),
            np.zeros(capacity, dtype=np.float64),
        )
        self._resize(0)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _COLUMNS:
            getattr(self, name)[:] = value
        else:
            object.__setattr__(self, name, value)

    def _resize(self, size: int) -> None:
        """Set the number of live rows and rebind the column views to them."""
        fields = self.__dict__  # plain attributes, written past ``__setattr__``
        fields["_size"] = size
        fields["_live"] = self._ints[:, :size]
        for name, row in self._rows:
            fields[name] = row[:size]

    def _set_buffers(self, ints: np.ndarray, times: np.ndarray) -> None:
        """Adopt new buffers (and their rows, each a column's 1-D buffer)."""
        fields = self.__dict__
        fields["_ints"], fields["_times"] = ints, times
        fields["_rows"] = [*zip(_INT_COLUMNS, ints, strict=True), ("last_token_s", times)]

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
            ints = np.zeros((len(_INT_COLUMNS), 2 * row), dtype=np.int64)
            ints[:, :row] = self._ints[:, :row]
            times = np.zeros(2 * row, dtype=np.float64)
            times[:row] = self._times[:row]
            self._set_buffers(ints, times)
        self._ints[:, row] = (
            request_id,
            num_computed,
            num_tokens,
            num_generated,
            target,
            held_blocks,
        )
        self._times[row] = last_token_s
        self._resize(row + 1)

    def decode(self, steps: int) -> None:
        """Every row computes, emits and holds ``steps`` more tokens (``num_computed``,
        ``num_tokens`` and ``num_generated`` each grow by ``steps``), in one numpy call."""
        self._live[_DECODE_ROWS] += steps

    def sample(self) -> None:
        """Every row samples one token: ``num_tokens`` and ``num_generated`` grow by one."""
        self._live[_SAMPLE_ROWS] += 1

    def keep(self, mask: BoolArray) -> None:
        """Drop the rows where ``mask`` is False (finished or preempted requests)."""
        kept = int(mask.sum())
        size = self._size
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

    def drop_row(self, row: int) -> None:
        """Drop one row, shifting the rows after it down."""
        size = self._size
        if row < size - 1:
            self._ints[:, row : size - 1] = self._ints[:, row + 1 : size]
            self._times[row : size - 1] = self._times[row + 1 : size]
        self._resize(size - 1)

    def row_values(self, row: int) -> list[int]:
        """One row's int columns as Python ints: id, num_computed, num_tokens, num_generated,
        target, held_blocks."""
        values: list[int] = self._ints[:, row].tolist()
        return values

    def pop(self, row: int) -> tuple[int, int, int, int]:
        """Remove the request at ``row``: (id, num_computed, num_tokens, held_blocks)."""
        rid, computed, tokens, _, _, held = self._ints[:, row].tolist()
        self.drop_row(row)
        return rid, computed, tokens, held

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` rows (the last admitted leave, as preemption victims)."""
        assert 0 <= size <= self._size
        self._resize(size)

    @property
    def all_decoding(self) -> bool:
        """Every request needs exactly one token and has sampled before: no prefill chunk is
        pending (a prompt whose last chunk is one token is still a prefill: it emits the first
        token)."""
        return bool(
            (self.num_tokens - self.num_computed == 1).all() and (self.num_generated > 0).all()
        )
