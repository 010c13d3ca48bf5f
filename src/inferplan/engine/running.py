"""The running set of one replica: the requests that hold KV, as numpy columns in list order.

vLLM v1 keeps ``running`` as a list in admission order; a preemption victim is its last element.
Here each column is a numpy array in that same order, so a step's bookkeeping is vectorised:
``num_computed`` (KV tokens computed), ``num_tokens`` (prompt + generated, the tokens that must be
computed before the next sample), ``num_generated``, ``target`` (output tokens asked for),
``held_blocks`` and ``last_token_s``. Columns live in buffers that grow by doubling, so admitting
a request costs O(1); each column attribute is a view of its buffer's live rows, and assigning
to it writes into the buffer.
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

    def __init__(self, capacity: int = 64) -> None:
        self._buffers: dict[str, np.ndarray] = {
            name: np.zeros(capacity, dtype=np.float64 if name == "last_token_s" else np.int64)
            for name in _COLUMNS
        }
        self._resize(0)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _COLUMNS:
            self._buffers[name][: self._size] = value
        else:
            object.__setattr__(self, name, value)

    def _resize(self, size: int) -> None:
        """Set the number of live rows and rebind the column views to them."""
        fields = self.__dict__  # plain attributes, written past ``__setattr__``
        fields["_size"] = size
        for name, buffer in self._buffers.items():
            fields[name] = buffer[:size]

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
        if self._size == len(self._buffers["ids"]):
            for name, buffer in self._buffers.items():
                grown = np.zeros(2 * len(buffer), dtype=buffer.dtype)
                grown[: self._size] = buffer[: self._size]
                self._buffers[name] = grown
        row, b = self._size, self._buffers
        b["ids"][row] = request_id
        b["num_computed"][row] = num_computed
        b["num_tokens"][row] = num_tokens
        b["num_generated"][row] = num_generated
        b["target"][row] = target
        b["held_blocks"][row] = held_blocks
        b["last_token_s"][row] = last_token_s
        self._resize(row + 1)

    def keep(self, mask: BoolArray) -> None:
        """Drop the rows where ``mask`` is False (finished or preempted requests)."""
        kept = int(mask.sum())
        for buffer in self._buffers.values():
            buffer[:kept] = buffer[: self._size][mask]
        self._resize(kept)

    def drop(self, rows: IntArray) -> None:
        """Drop the rows at these ascending indices; one row by shifting the rest down."""
        if len(rows) != 1:
            mask = np.ones(self._size, dtype=np.bool_)
            mask[rows] = False
            self.keep(mask)
            return
        row, size = int(rows[0]), self._size
        for buffer in self._buffers.values():
            buffer[row : size - 1] = buffer[row + 1 : size]
        self._resize(size - 1)

    def pop(self, row: int) -> tuple[int, int, int, int]:
        """Remove the request at ``row``: (id, num_computed, num_tokens, held_blocks)."""
        b = self._buffers
        values = (
            int(b["ids"][row]),
            int(b["num_computed"][row]),
            int(b["num_tokens"][row]),
            int(b["held_blocks"][row]),
        )
        if row == self._size - 1:
            self._resize(row)
        else:
            self.drop(np.array([row], dtype=np.int64))
        return values

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
