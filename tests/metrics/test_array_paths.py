"""The metrics' array paths against the scalar ones they replace (kept as references): the
exact sum against ``math.fsum``, a batch's ``add_many`` bins counted in one ``np.bincount``
against one count per call, and a ``StepTraceLog`` keeping whole batches as arrays against
one ``StepTrace.record`` per pair."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferplan.metrics import histogram, trace_log
from inferplan.metrics.exact_sum import EXACT_SUM_MIN, exact_sum
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.itl_log import ItlBatch, count_bins
from inferplan.metrics.steptrace import StepTrace
from inferplan.metrics.trace_log import StepTraceLog


def _durations(rng: np.random.Generator, kind: int, size: int) -> np.ndarray:
    if kind == 0:  # step times of one regime
        return rng.uniform(0.01, 0.05, size)
    if kind == 1:  # a binade's full mantissas: the exact sum needs every bit
        return rng.uniform(0.5, 1.0, size) + rng.integers(0, 2, size) * 2.0**-53
    if kind == 2:  # zeros among them
        return np.where(rng.random(size) < 0.3, 0.0, rng.uniform(1e-3, 4e-3, size))
    if kind == 3:  # one value repeated: ties to even in the final rounding
        return np.full(size, 1.0 + 2.0**-52)
    if kind == 4:  # integers times a power of two, sums landing halfway between floats
        return rng.integers(2**52, 2**53, size) * 2.0**-60
    return rng.exponential(1.0, size) * 10.0 ** float(rng.integers(-7, 3))  # a wide spread


def test_the_exact_sum_is_fsum() -> None:
    rng = np.random.default_rng(5)
    for case in range(600):
        size = int(rng.integers(EXACT_SUM_MIN, 6000)) if case % 5 else EXACT_SUM_MIN
        values = _durations(rng, case % 6, size)
        assert exact_sum(values) == math.fsum(values.tolist()), case


def test_the_exact_sum_takes_its_integer_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cases above are not all fallbacks: with ``fsum`` made wrong, only the spread-out
    and short ones change."""
    rng = np.random.default_rng(6)
    values = _durations(rng, 1, 4000)
    want = math.fsum(values.tolist())
    monkeypatch.setattr(histogram.math, "fsum", lambda _: math.nan)
    assert exact_sum(values) == want
    assert math.isnan(exact_sum(values[: EXACT_SUM_MIN - 1]))
    assert math.isnan(exact_sum(np.array([1e-12, 1.0] * EXACT_SUM_MIN)))  # spread: ``fsum``


def test_one_bincount_counts_as_one_per_call() -> None:
    rng = np.random.default_rng(7)
    for case in range(40):
        grid = histogram.bin_grid()
        calls = [
            (rng.integers(4000, 4000 + int(rng.integers(1, 300)), int(rng.integers(1, 900))),
             float(rng.integers(1, 400)))
            for _ in range(int(rng.integers(1, 6)))
        ]  # fmt: skip
        plain, counts = ItlHistogram(grid), np.zeros(grid.num_bins)
        for bins, weight in calls:
            plain._count_many(bins, weight)
        count_bins(counts, calls)
        assert np.array_equal(counts, plain.counts), case


def test_a_batch_of_many_adds_is_the_histogram_of_one_add_each() -> None:
    """``ItlBatch`` (the simulator's histogram) with ``add_many`` calls among single adds and
    series: the same counts and moments as ``ItlHistogram`` adding each at its call."""
    rng = np.random.default_rng(8)
    plain, batch = ItlHistogram(), ItlBatch()
    for _ in range(700):
        kind = int(rng.integers(0, 3))
        if kind == 0:
            duration, weight = float(rng.uniform(0.01, 0.2)), float(rng.integers(1, 50))
            plain.add(duration, weight)
            batch.add(duration, weight)
        elif kind == 1:
            first, step = float(rng.uniform(0.01, 0.05)), float(rng.uniform(0.0, 1e-5))
            size, weight = int(rng.integers(1, 400)), float(rng.integers(1, 50))
            plain.add_arithmetic(first, step, size, weight)
            batch.add_arithmetic(first, step, size, weight)
        else:
            values = _durations(rng, int(rng.integers(0, 3)), int(rng.integers(1, 1500)))
            weight = float(rng.integers(1, 300))
            plain.add_many(values, weight)
            batch.add_many(values, weight)
    assert np.array_equal(batch.counts, plain.counts)
    assert batch._settled() == plain._settled()


@pytest.mark.parametrize("chunk", [37, 1 << 14])
def test_batches_kept_as_arrays_give_one_record_at_a_time(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large and small ``record_many`` batches (each a doomed-head pass's steps) between single
    records and ``record_each`` groups, crossing ``CHUNK`` or not: the same trace as one
    ``StepTrace.record`` per pair."""
    monkeypatch.setattr(trace_log, "CHUNK", chunk)
    rng = np.random.default_rng(9)
    total = 6000
    times = np.cumsum(rng.exponential(0.01, total) * (rng.random(total) > 0.05))
    blocks = rng.integers(0, 900, total)
    plain, log = StepTrace(1000, max_points=30), StepTraceLog(1000, max_points=30)
    for now, used in zip(times.tolist(), blocks.tolist(), strict=True):
        plain.record(now, used)
    at = 0
    while at < total:
        size = int(rng.choice([1, 3, 50, 700]))
        part_t, part_b = times[at : at + size].copy(), blocks[at : at + size].copy()
        if size == 1:
            log.record(float(part_t[0]), int(part_b[0]))
        elif size == 3:
            log.record_each(part_t.tolist(), part_b.tolist())
        else:
            log.record_many(part_t, part_b)
        assert log._num_kept < chunk  # applied once ``CHUNK`` records are kept: bounded
        at += size
    assert log.num_records + log._num_kept + len(log._times_s) == total
    assert log.summary() == plain.summary()
    assert log.summary(float(times[-1]) + 2.0) == plain.summary(float(times[-1]) + 2.0)
    assert log.num_records == plain.num_records == total
    assert log._area_block_s == plain._area_block_s


def test_a_batch_going_back_in_time_is_refused_when_applied() -> None:
    log = StepTraceLog(10)
    log.record(1.0, 2)
    log.record_many(np.array([2.0, 3.0]), np.array([3, 4]))
    log.record_many(np.array([2.5]), np.array([1]))
    with pytest.raises(ValueError):
        log.settle()
    with pytest.raises(ValueError):
        log.record_many(np.array([4.0, 5.0]), np.array([1]))
