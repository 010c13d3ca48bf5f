"""StepTrace: time-weighted KV usage, its maximum, and the capped plot series."""

import numpy as np
import pytest

from inferplan.metrics.steptrace import StepTrace


def test_time_weighted_mean_and_max_by_hand() -> None:
    trace = StepTrace(total_blocks=100)
    trace.record(0.0, 10)  # 10 blocks for 1 s
    trace.record(1.0, 50)  # 50 blocks for 2 s
    trace.record(3.0, 20)  # 20 blocks for 1 s (until end_s)
    summary = trace.summary(end_s=4.0)
    assert summary is not None
    assert summary.mean == pytest.approx((10 * 1 + 50 * 2 + 20 * 1) / 4 / 100)
    assert summary.max == 0.5
    assert summary.series_time_s == (0.0, 1.0, 3.0)
    assert summary.series_mean == pytest.approx((0.1, 0.5, 0.2))
    assert summary.series_max == pytest.approx((0.1, 0.5, 0.2))


def test_default_end_is_the_last_record() -> None:
    trace = StepTrace(total_blocks=10)
    trace.record(2.0, 4)
    trace.record(4.0, 8)
    summary = trace.summary()
    assert summary is not None
    assert summary.mean == pytest.approx(0.4)  # the last value held for no time
    assert summary.max == pytest.approx(0.8)


def test_single_record_and_same_time_records() -> None:
    trace = StepTrace(total_blocks=8)
    trace.record(5.0, 2)
    summary = trace.summary()
    assert summary is not None and summary.mean == 0.25
    trace.record(5.0, 6)  # same instant: a zero-length segment still counts for the max
    trace.record(6.0, 4)
    summary = trace.summary()
    assert summary is not None
    assert summary.max == 0.75
    assert summary.mean == pytest.approx(6 / 8)


def test_empty_trace_and_bad_inputs() -> None:
    assert StepTrace(total_blocks=4).summary() is None
    with pytest.raises(ValueError):
        StepTrace(total_blocks=0)
    trace = StepTrace(total_blocks=4)
    trace.record(1.0, 1)
    with pytest.raises(ValueError):
        trace.record(0.5, 1)


def test_series_is_capped_and_preserves_mean_and_peak() -> None:
    rng = np.random.default_rng(3)
    total_blocks = 1000
    trace = StepTrace(total_blocks=total_blocks, max_points=50)
    times_s = np.cumsum(rng.exponential(0.01, size=20_001))
    used = rng.integers(0, total_blocks + 1, size=len(times_s))
    for now_s, blocks in zip(times_s.tolist(), used.tolist(), strict=True):
        trace.record(now_s, blocks)
    summary = trace.summary()
    assert summary is not None
    durations_s = np.diff(times_s)
    expected_mean = np.sum(used[:-1] * durations_s) / (times_s[-1] - times_s[0]) / total_blocks
    assert summary.mean == pytest.approx(expected_mean, rel=1e-9)
    assert summary.max == used.max() / total_blocks
    assert len(summary.series_time_s) <= 50
    assert summary.series_time_s[0] == times_s[0]
    assert list(summary.series_time_s) == sorted(summary.series_time_s)
    assert max(summary.series_max) == summary.max
    # The series' segments tile the run, so their time-weighted mean is the overall mean.
    starts = np.asarray(summary.series_time_s)
    ends = np.append(starts[1:], times_s[-1])
    series_mean = np.sum(np.asarray(summary.series_mean) * (ends - starts)) / (ends[-1] - starts[0])
    assert series_mean == pytest.approx(summary.mean, rel=1e-9)


def test_combined_replicas_average_the_mean_and_keep_the_busiest_peak() -> None:
    from inferplan.metrics.steptrace import KvUsageSummary, combine_usage

    a = KvUsageSummary(0.2, 0.5, (0.0, 10.0), (0.1, 0.3), (0.2, 0.5))
    b = KvUsageSummary(0.4, 0.9, (0.0, 5.0), (0.4, 0.4), (0.9, 0.6))
    both = combine_usage([a, b])
    assert both is not None
    assert both.mean == pytest.approx(0.3)
    assert both.max == 0.9
    assert both.series_time_s == (0.0, 5.0, 10.0)
    # At 0 s: a in its first segment (0.1), b in its first (0.4); at 5 s: a still first, b second;
    # at 10 s: a second (0.3), b second (0.4).
    assert both.series_mean == pytest.approx((0.25, 0.25, 0.35))
    assert both.series_max == (0.9, 0.6, 0.6)
    assert combine_usage([a]) is a
    assert combine_usage([]) is None
