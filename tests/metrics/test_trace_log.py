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


@pytest.mark.parametrize("cls", [StepTrace, StepTraceLog])
def test_records_in_groups_give_one_record_at_a_time(
    cls: type[StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record_each`` (a preemption chain's segments, one call per chain) and small
    ``record_many`` batches between single records: the same trace as one
    ``StepTrace.record`` per pair, batches crossing ``CHUNK``."""
    monkeypatch.setattr(trace_log, "CHUNK", 37)
    rng = np.random.default_rng(2)
    times = np.cumsum(rng.exponential(0.01, 1500)).tolist()
    blocks = rng.integers(0, 900, 1500).tolist()
    plain, grouped = StepTrace(1000, max_points=40), cls(1000, max_points=40)
    for now, used in zip(times, blocks, strict=True):
        plain.record(now, used)
    at = 0
    while at < len(times):
        size = int(rng.integers(1, 9))
        if size == 1:
            grouped.record(times[at], blocks[at])
        elif size == 2:  # kept with the single records by a log
            grouped.record_many(np.array(times[at : at + 2]), np.array(blocks[at : at + 2]))
        else:
            grouped.record_each(times[at : at + size], blocks[at : at + size])
        at += size
    assert grouped.summary() == plain.summary()
    assert grouped.num_records == 1500
    with pytest.raises(ValueError):
        grouped.record_each([times[-1] - 1.0], [3])
        grouped.summary()  # a log sees time going back when it applies the record
