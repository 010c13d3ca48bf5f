"""A ``StepTraceLog`` (a replica run apart) applies its records in batches: the same trace as
one ``StepTrace.record`` per call, whatever the batches, and the same error going backwards."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.metrics import trace_log
from inferplan.metrics.steptrace import StepTrace
from inferplan.metrics.trace_log import StepTraceLog


def test_batched_records_give_the_same_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_log, "CHUNK", 37)
    rng = np.random.default_rng(1)
    times = np.cumsum(rng.exponential(0.01, 3000) * (rng.random(3000) > 0.1))
    blocks = rng.integers(0, 900, 3000)
    plain, log = StepTrace(1000, max_points=50), StepTraceLog(1000, max_points=50)
    for now, used in zip(times[:2000].tolist(), blocks[:2000].tolist(), strict=True):
        plain.record(now, used)
        log.record(now, used)
    plain.record_many(times[2000:2500], blocks[2000:2500])
    log.record_many(times[2000:2500], blocks[2000:2500])
    for now, used in zip(times[2500:].tolist(), blocks[2500:].tolist(), strict=True):
        plain.record(now, used)
        log.record(now, used)
    assert log.summary() == plain.summary()
    assert log.summary(times[-1] + 1.0) == plain.summary(times[-1] + 1.0)
    assert log.num_records == plain.num_records == 3000


def test_a_first_batch_starts_the_trace_and_time_must_not_go_back() -> None:
    log = StepTraceLog(10)
    assert log.summary() is None
    log.record(2.0, 4)
    log.record(4.0, 8)
    summary = log.summary()
    assert summary is not None and summary.series_time_s == (2.0, 4.0)
    log.record(3.0, 1)
    with pytest.raises(ValueError):
        log.settle()
