"""The contract between the simulator and any step-time model (analytic or measured)."""

from __future__ import annotations

from typing import Protocol

from inferplan.perf.batch import StepBatch, StepTime


class StepTimeModel(Protocol):
    """Step times for one replica. Both calls are O(1) in the batch size."""

    def step_time(self, batch: StepBatch) -> StepTime:
        """Time and breakdown of one engine step."""
        ...

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        """``(a, b, limit)``: a pure-decode step of ``num_seqs`` sequences attending to ``C``
        tokens in total takes ``a + b*C`` seconds while ``context_tokens <= C < limit``."""
        ...
