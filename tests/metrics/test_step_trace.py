"""StepTrace: time-weighted KV usage, its maximum, and the capped plot series."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.metrics.steptrace import StepTrace, _pairwise
from native_mode import attributes


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


def _pairwise_reference(
    starts: list[float], ends: list[float], areas: list[float], peaks: list[int]
) -> tuple[list[float], list[float], list[float], list[int]]:
    """``_pairwise`` as first written (lists), the reference for its numpy form."""
    idx = range(0, len(starts), 2)
    return (
        [starts[k] for k in idx],
        [ends[min(k + 1, len(ends) - 1)] for k in idx],
        [sum(areas[k : k + 2]) for k in idx],
        [max(peaks[k : k + 2]) for k in idx],
    )


@settings(max_examples=60, deadline=None)
@given(
    max_points=st.integers(1, 12),
    batches=st.lists(
        st.lists(st.tuples(st.floats(0.0, 1e3), st.integers(0, 10**6)), max_size=40),
        min_size=1,
        max_size=6,
    ),
)
def test_record_many_is_one_record_per_pair(
    max_points: int, batches: list[list[tuple[float, int]]]
) -> None:
    """``record_many`` leaves the state ``record`` of each pair in order leaves, to the bit
    (the running area, the segments through every halving, the peak, the last record), and
    ``_pairwise`` equals its list form."""
    one, many = StepTrace(10**6, max_points=max_points), StepTrace(10**6, max_points=max_points)
    now = 0.0
    for batch in batches:
        times = now + np.cumsum([dt for dt, _ in batch])
        blocks = np.array([b for _, b in batch], dtype=np.int64)
        now = float(times[-1]) if len(times) else now
        for t, b in zip(times.tolist(), blocks.tolist(), strict=True):
            one.record(t, b)
        many.record_many(times, blocks)
        state_one, state_many = attributes(one), attributes(many)
        assert state_one == state_many or _same_nan(state_one, state_many)
    assert one.summary() == many.summary()
    segments = (one._seg_start_s, one._seg_end_s, one._seg_area_block_s, one._seg_peak_blocks)
    assert _pairwise(*segments) == _pairwise_reference(*segments)


def _same_nan(a: dict[str, object], b: dict[str, object]) -> bool:
    """Equal, where nan (no record yet) equals nan."""
    return all(x == y or (x != x and y != y) for x, y in zip(a.values(), b.values(), strict=True))


def test_record_many_refuses_time_going_backwards() -> None:
    trace = StepTrace(total_blocks=10)
    trace.record(2.0, 4)
    with pytest.raises(ValueError, match="backwards"):
        trace.record_many(np.array([3.0, 1.0]), np.array([1, 2]))


@settings(max_examples=60, deadline=None)
@given(
    segments=st.lists(
        st.tuples(st.floats(0.0, 1e3), st.floats(0.0, 1e9), st.integers(0, 10**6)), max_size=30
    )
)
def test_pairwise_in_numpy_equals_its_list_form(segments: list[tuple[float, float, int]]) -> None:
    """Any count of segments (odd: the last one alone), bit for bit and with the same types."""
    # Python floats, as the trace holds (``tolist``; compiled, a ``float`` is never numpy's).
    starts = np.cumsum([0.0] + [s for s, _, _ in segments[:-1]]).tolist()[: len(segments)]
    ends = [s + 1.0 for s in starts]
    areas, peaks = [a for _, a, _ in segments], [p for _, _, p in segments]
    merged, reference = (
        _pairwise(starts, ends, areas, peaks),
        _pairwise_reference(starts, ends, areas, peaks),
    )
    assert merged == reference
    assert [type(x) for column in merged for x in column] == [
        type(x) for column in reference for x in column
    ]


@pytest.mark.parametrize("max_points", [1, 3, 7, 500])
def test_many_halvings_in_one_batch_are_one_record_each(max_points: int) -> None:
    """``record_many``'s array path (``_extend_halving``: only the areas merged halving by
    halving, each merged segment's start, end and peak read from its run of segments at the
    end) against one ``record`` a pair, to the bit: batches of many halvings each, after a
    buffer of every parity, with repeated times (zero-length segments) and falling peaks."""
    rng = np.random.default_rng(20)
    one, many = StepTrace(10**6, max_points=max_points), StepTrace(10**6, max_points=max_points)
    now = 0.0
    for size in [1, 2 * max_points + 1, 3, 40 * max_points + 7, 2 * max_points, 11 * max_points]:
        steps = rng.random(size) * (rng.random(size) < 0.8)  # some zero-length segments
        times = now + np.cumsum(steps)
        blocks = rng.integers(0, 10**5, size).astype(np.int64)
        now = float(times[-1])
        for t, b in zip(times.tolist(), blocks.tolist(), strict=True):
            one.record(t, b)
        many.record_many(times, blocks)
        assert attributes(one) == attributes(many)
    assert one.summary() == many.summary()
