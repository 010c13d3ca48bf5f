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


def _column(name: str) -> Any:
    def get(self: RunningSet) -> Any:
        return self._buffers[name][: self._size]

    def put(self: RunningSet, values: Any) -> None:
        self._buffers[name][: self._size] = values

    return property(get, put)


class RunningSet:
    """Requests holding KV on a replica, in admission order."""

    ids: IntArray = _column("ids")
    num_computed: IntArray = _column("num_computed")
    num_tokens: IntArray = _column("num_tokens")
    num_generated: IntArray = _column("num_generated")
    target: IntArray = _column("target")
    held_blocks: IntArray = _column("held_blocks")
    last_token_s: FloatArray = _column("last_token_s")

    def __init__(self, capacity: int = 64) -> None:
        self._size = 0
        self._buffers: dict[str, np.ndarray] = {
            name: np.zeros(capacity, dtype=np.float64 if name == "last_token_s" else np.int64)
            for name in _COLUMNS
        }

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
        row = self._size
        values = (request_id, num_computed, num_tokens, num_generated, target, held_blocks)
        for name, value in zip(_INT_COLUMNS, values, strict=True):
            self._buffers[name][row] = value
        self._buffers["last_token_s"][row] = last_token_s
        self._size += 1

    def keep(self, mask: BoolArray) -> None:
        """Drop the rows where ``mask`` is False (finished or preempted requests)."""
        kept = int(mask.sum())
        for buffer in self._buffers.values():
            buffer[:kept] = buffer[: self._size][mask]
        self._size = kept

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
        self._size = size - 1

    def pop_last(self) -> tuple[int, int, int, int]:
        """Remove the last-admitted request: (id, num_computed, num_tokens, held_blocks)."""
        last = self._size - 1
        b = self._buffers
        row = (
            int(b["ids"][last]),
            int(b["num_computed"][last]),
            int(b["num_tokens"][last]),
            int(b["held_blocks"][last]),
        )
        self._size = last
        return row

    @property
    def all_decoding(self) -> bool:
        """Every request needs exactly one token and has sampled before: no prefill chunk is
        pending (a prompt whose last chunk is one token is still a prefill: it emits the first
        token)."""
        return bool(
            np.all(self.num_tokens - self.num_computed == 1) and np.all(self.num_generated > 0)
        )
