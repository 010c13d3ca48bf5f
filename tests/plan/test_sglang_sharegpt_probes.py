"""``scripts/sglang_sharegpt_probes.py``: the slowed-prefill wrapper and the measured peaks."""

from __future__ import annotations

from types import ModuleType

import pytest

from inferplan.perf.batch import StepBatch, StepTime
from inferplan.plan.published import bundled_published

from .fit_script import load_script


def probes() -> ModuleType:
    return load_script("sglang_sharegpt_probes")


class Fixed:
    """A step model: 1 s + 1 ms a prefill token + 10 ms a decoding sequence; the line
    ``a + b C`` of a batch is (its step time, 1e-6, 100)."""

    marker = "inner"

    def step_time(self, batch: StepBatch) -> StepTime:
        total = 1.0 + 1e-3 * batch.prefill_tokens + 1e-2 * batch.num_decode_seqs
        return StepTime(total, {"compute": total})

    def batch_line(self, batch: StepBatch) -> tuple[float, float, float]:
        return self.step_time(batch).total_s, 1e-6, 100.0


def test_only_prefill_only_steps_are_scaled() -> None:
    slow = probes().SlowPrefill(Fixed(), 2.0)
    prefill = StepBatch(prefill_tokens=1000, num_prefill_seqs=4)
    decode = StepBatch(num_decode_seqs=10, decode_context_tokens=500)
    mixed = StepBatch(prefill_tokens=1000, num_prefill_seqs=4, num_decode_seqs=10)
    assert slow.step_time(prefill).total_s == pytest.approx(4.0)  # (1 + 1) x 2
    assert slow.step_time(prefill).by_bound_s["compute"] == pytest.approx(4.0)
    assert slow.step_time(decode).total_s == pytest.approx(1.1)
    assert slow.step_time(mixed).total_s == pytest.approx(2.1)  # a mixed step is not a prefill
    assert slow.batch_line(prefill) == pytest.approx((4.0, 2e-6, 100.0))  # the limit is kept
    assert slow.batch_line(decode) == pytest.approx((1.1, 1e-6, 100.0))
    assert slow.marker == "inner"  # everything else is the wrapped model's


def test_measured_peaks_name_every_sharegpt_burst() -> None:
    """The table holds one peak per bundled SGLang ShareGPT run sent at once, no more."""
    module = probes()
    runs = {
        row.case_id.removeprefix("gpustack-")
        for row in bundled_published()
        if row.engine == "sglang" and row.dataset == "sharegpt" and not row.max_concurrency
    }
    assert set(module.MEASURED_PEAK_TOK_S) == runs
    assert module.MEASURED_PEAK_TOK_S["deepseek-r1-h200-sglang-f4139a"] == 9699.0
