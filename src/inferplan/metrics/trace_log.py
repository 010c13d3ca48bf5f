"""A KV usage trace that takes its records in batches: one replica run apart.

``StepTrace.record`` closes a segment per call (a handful of list appends and float
operations); the fast engine records once per event, about three times per request. A replica
simulated apart (``engine/apart.py``) records into a ``StepTraceLog`` instead, which only keeps
each ``(now, used blocks)`` and hands them to ``StepTrace.record_many`` every ``CHUNK`` records
and before anything reads the trace: the same state and the same floats as one ``record`` per
call (``record_many``'s contract), at a list append per call. A batch already in arrays (a
doomed-head pass's steps, ``engine/thrashrun.py``: hundreds to thousands a call) is kept as
its arrays, beside the single records before it, and joined with them when the log settles:
no list round trip per record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferplan.metrics.steptrace import KvUsageSummary, StepTrace

CHUNK = 1 << 14  # records kept before they are applied


class StepTraceLog(StepTrace):
    """``StepTrace`` whose records are applied a batch at a time (``settle``)."""

    def __init__(self, total_blocks: int, *, max_points: int = 500) -> None:
        super().__init__(total_blocks, max_points=max_points)
        self._times_s: list[float] = []
        self._blocks: list[int] = []
        # Batches kept before ``_times_s`` (each earlier single records' lists, then a batch's
        # arrays, in order) and how many records they hold.
        self._kept: list[tuple[Any, Any]] = []
        self._num_kept = 0

    def record(self, now_s: float, used_blocks: int) -> None:
        times = self._times_s
        times.append(now_s)
        self._blocks.append(used_blocks)
        if len(times) >= CHUNK:
            self.settle()

    def record_each(self, times_s: list[float], used_blocks: list[int]) -> None:
        if len(times_s) != len(used_blocks):
            raise ValueError("StepTraceLog: as many times as block counts")
        times = self._times_s
        times.extend(times_s)
        self._blocks.extend(used_blocks)
        if len(times) >= CHUNK:
            self.settle()

    def record_many(self, times_s: np.ndarray, used_blocks: np.ndarray) -> None:
        """Keep the batch as its arrays (copied where they are not float64 and int64 already:
        the caller must not change them), after the single records kept before it."""
        times = np.asarray(times_s, dtype=np.float64)
        blocks = np.asarray(used_blocks, dtype=np.int64)
        if len(times) != len(blocks):
            raise ValueError("StepTraceLog: as many times as block counts")
        if self._times_s:
            self._kept.append((self._times_s, self._blocks))
            self._num_kept += len(self._times_s)
            self._times_s, self._blocks = [], []
        self._kept.append((times, blocks))
        self._num_kept += len(times)
        if self._num_kept >= CHUNK:
            self.settle()

    def settle(self) -> None:
        """Apply the records kept so far, in order."""
        kept = self._kept
        if self._times_s:
            kept.append((self._times_s, self._blocks))
            self._times_s, self._blocks = [], []
        if not kept:
            return
        self._kept, self._num_kept = [], 0
        if len(kept) == 1:
            times = np.asarray(kept[0][0], dtype=np.float64)
            blocks = np.asarray(kept[0][1], dtype=np.int64)
        else:
            times = np.concatenate([np.asarray(t, dtype=np.float64) for t, _ in kept])
            blocks = np.concatenate([np.asarray(b, dtype=np.int64) for _, b in kept])
        self._apply(times, blocks)

    def _apply(self, times_s: np.ndarray, used_blocks: np.ndarray) -> None:
        """``StepTrace.record_many``, whose first record ever is ``StepTrace.record``'s (not
        this class's, which would only keep it)."""
        if len(times_s) and self.num_records == 0:
            StepTrace.record(self, float(times_s[0]), int(used_blocks[0]))
            times_s, used_blocks = times_s[1:], used_blocks[1:]
        super().record_many(times_s, used_blocks)

    def summary(self, end_s: float | None = None) -> KvUsageSummary | None:
        self.settle()
        return super().summary(end_s)
