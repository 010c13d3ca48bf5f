"""The running set of one replica: the requests that hold KV, as numpy columns in list order.

vLLM v1 keeps ``running`` as a list in admission order; a preemption victim is its last element.
Here each column is a numpy array in that same order, so a step's bookkeeping is vectorised:
``num_computed`` (KV tokens computed), ``num_tokens`` (prompt + generated, the tokens that must be
computed before the next sample), ``num_generated``, ``target`` (output tokens asked for),
``held_blocks`` and ``last_token_s``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_COLUMNS = ("ids", "num_computed", "num_tokens", "num_generated", "target", "held_blocks")


class RunningSet:
    """Requests holding KV on a replica, in admission order."""

    def __init__(self) -> None:
        self.ids: IntArray = np.zeros(0, dtype=np.int64)
        self.num_computed: IntArray = np.zeros(0, dtype=np.int64)
        self.num_tokens: IntArray = np.zeros(0, dtype=np.int64)
        self.num_generated: IntArray = np.zeros(0, dtype=np.int64)
        self.target: IntArray = np.zeros(0, dtype=np.int64)
        self.held_blocks: IntArray = np.zeros(0, dtype=np.int64)
        self.last_token_s: FloatArray = np.zeros(0, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.ids)

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
        for name, value in zip(
            _COLUMNS,
            (request_id, num_computed, num_tokens, num_generated, target, held_blocks),
            strict=True,
        ):
            setattr(self, name, np.append(getattr(self, name), np.int64(value)))
        self.last_token_s = np.append(self.last_token_s, last_token_s)

    def keep(self, mask: BoolArray) -> None:
        """Drop the rows where ``mask`` is False (finished or preempted requests)."""
        for name in (*_COLUMNS, "last_token_s"):
            setattr(self, name, getattr(self, name)[mask])

    def pop_last(self) -> tuple[int, int, int, int]:
        """Remove the last-admitted request: (id, num_computed, num_tokens, held_blocks)."""
        row = (
            int(self.ids[-1]),
            int(self.num_computed[-1]),
            int(self.num_tokens[-1]),
            int(self.held_blocks[-1]),
        )
        keep = np.ones(len(self), dtype=np.bool_)
        keep[-1] = False
        self.keep(keep)
        return row

    def row(self, request_id: int) -> int:
        return int(np.flatnonzero(self.ids == request_id)[0])

    @property
    def all_decoding(self) -> bool:
        """Every request needs exactly one token and has sampled before: no prefill chunk is
        pending (a prompt whose last chunk is one token is still a prefill: it emits the first
        token)."""
        return bool(
            np.all(self.num_tokens - self.num_computed == 1) and np.all(self.num_generated > 0)
        )
