"""A KV usage trace that takes its records in batches: one replica run apart.

``StepTrace.record`` closes a segment per call (a handful of list appends and float
operations); the fast engine records once per event, about three times per request. A replica
simulated apart (``engine/apart.py``) records into a ``StepTraceLog`` instead, which only keeps
each ``(now, used blocks)`` and hands them to ``StepTrace.record_many`` every ``CHUNK`` records
and before anything reads the trace: the same state and the same floats as one ``record`` per
call (``record_many``'s contract), at a list append per call.
"""

from __future__ import annotations

import numpy as np

from inferplan.metrics.steptrace import KvUsageSummary, StepTrace

CHUNK = 1 << 14  # records kept before they are applied


class StepTraceLog(StepTrace):
    """``StepTrace`` whose records are applied a batch at a time (``settle``)."""

    def __init__(self, total_blocks: int, *, max_points: int = 500) -> None:
        super().__init__(total_blocks, max_points=max_points)
        self._times_s: list[float] = []
        self._blocks: list[int] = []

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
        # Kept with the single records (a doomed-head run's few hundred, ``engine/thrash.py``):
        # applied ``CHUNK`` at a time, the buffer's halvings run in arrays (``StepTrace``).
        self.record_each(
            np.asarray(times_s, dtype=np.float64).tolist(),
            np.asarray(used_blocks, dtype=np.int64).tolist(),
        )

    def settle(self) -> None:
        """Apply the records kept so far, in order."""
        if self._times_s:
            times = np.asarray(self._times_s, dtype=np.float64)
            blocks = np.asarray(self._blocks, dtype=np.int64)
            self._times_s, self._blocks = [], []
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
