"""ItlHistogram: quantiles against numpy, exact moments, add == add_arithmetic, merge."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.metrics import histogram
from inferplan.metrics.histogram import (
    BIN_RELATIVE_WIDTH,
    ItlHistogram,
    bin_grid,
    bin_index,
)


def one_by_one(first_s: float, step_s: float, num_steps: int, weight: float) -> ItlHistogram:
    histogram = ItlHistogram()
    for i in range(num_steps):
        histogram.add(first_s + i * step_s, weight)
    return histogram


def closed_form(first_s: float, step_s: float, num_steps: int, weight: float) -> ItlHistogram:
    histogram = ItlHistogram()
    histogram.add_arithmetic(first_s, step_s, num_steps, weight)
    return histogram


def assert_same(fast: ItlHistogram, exact: ItlHistogram) -> None:
    np.testing.assert_array_equal(fast.counts, exact.counts)
    assert fast.total_weight == exact.total_weight
    assert fast.min_s == exact.min_s
    assert fast.max_s == exact.max_s
    assert fast.sum_s == pytest.approx(exact.sum_s, rel=1e-12, abs=1e-300)
    # The closed form is the spread of the real series; ``add`` sees each term rounded to the
    # nearest float and accumulates Welford rounding, which matters only when the spread is a
    # few ulps of the values themselves: agree to 1e-9 relative, or 1e-9 of the largest value.
    assert fast.std() == pytest.approx(exact.std(), rel=1e-9, abs=1e-9 * exact.max_s)


def test_quantiles_match_numpy_percentile_within_one_bin() -> None:
    rng = np.random.default_rng(7)
    samples_s = rng.lognormal(mean=math.log(0.03), sigma=0.8, size=100_000)
    histogram = ItlHistogram()
    for value in samples_s.tolist():
        histogram.add(value)
    percentiles = [0.0, 0.1, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 100.0]
    expected = np.percentile(samples_s, percentiles)
    got = histogram.quantiles(np.asarray(percentiles) / 100.0)
    np.testing.assert_allclose(got, expected, rtol=BIN_RELATIVE_WIDTH, atol=0.0)
    assert histogram.quantile(0.5) == pytest.approx(np.median(samples_s), rel=BIN_RELATIVE_WIDTH)


def test_mean_and_std_are_exact_not_binned() -> None:
    rng = np.random.default_rng(1)
    samples_s = rng.uniform(0.01, 0.05, size=5_000)
    weights = rng.integers(1, 9, size=5_000).astype(float)
    histogram = ItlHistogram()
    for value, weight in zip(samples_s.tolist(), weights.tolist(), strict=True):
        histogram.add(value, weight)
    mean_s = np.average(samples_s, weights=weights)
    std_s = math.sqrt(np.average((samples_s - mean_s) ** 2, weights=weights))
    assert histogram.mean() == pytest.approx(mean_s, rel=1e-12)
    assert histogram.std() == pytest.approx(std_s, rel=1e-9)
    assert histogram.total_weight == weights.sum()


def test_identical_samples_have_zero_spread() -> None:
    histogram = ItlHistogram()
    for _ in range(1000):
        histogram.add(0.0237, 3.0)
    assert histogram.std() == 0.0
    assert histogram.mean() == pytest.approx(0.0237, rel=1e-15)
    assert histogram.quantile(0.99) == 0.0237  # clipped to the observed range


def test_empty_histogram_reads_nan() -> None:
    histogram = ItlHistogram()
    assert math.isnan(histogram.mean())
    assert math.isnan(histogram.std())
    assert math.isnan(histogram.quantile(0.5))


def test_underflow_and_overflow_stay_within_observed_range() -> None:
    histogram = ItlHistogram()
    histogram.add(0.0, 1.0)
    histogram.add(2e-7, 1.0)
    histogram.add(5e4, 1.0)
    assert histogram.quantile(0.0) == 0.0
    assert histogram.quantile(1.0) <= 5e4
    assert histogram.quantile(1.0) >= 1e4
    assert 0.0 <= histogram.quantile(0.5) <= 1e-6


def test_bad_inputs() -> None:
    histogram = ItlHistogram()
    with pytest.raises(ValueError):
        histogram.add(-1.0)
    with pytest.raises(ValueError):
        histogram.add(math.nan)
    with pytest.raises(ValueError):
        histogram.add_arithmetic(0.01, -0.01, 5)  # reaches -0.03
    with pytest.raises(ValueError):
        histogram.quantile(1.5)
    other = ItlHistogram(bin_grid(1e-6, 1e4, 100))
    other.add(1.0)
    with pytest.raises(ValueError):
        histogram.merge(other)


def test_no_steps_or_no_weight_is_a_no_op() -> None:
    histogram = ItlHistogram()
    histogram.add_arithmetic(0.01, 0.001, 0, 4.0)
    histogram.add_arithmetic(0.01, 0.001, 10, 0.0)
    histogram.add(0.01, 0.0)
    assert histogram.total_weight == 0.0
    assert not histogram.counts.any()


@pytest.mark.parametrize(
    ("first_s", "step_s", "num_steps"),
    [
        (0.02, 1.3e-6, 5000),  # a realistic decode stretch crossing ~100 bins
        (0.5, -1e-4, 4000),  # decreasing
        (1.0, 1e-19, 2000),  # steps far below one ulp: rounding decides the crossings
        (1e-7, 3e-7, 3000),  # starts in the underflow bin
        (9990.0, 0.01, 2000),  # ends in the overflow bin
    ],
)
def test_arithmetic_equals_one_by_one_examples(
    first_s: float, step_s: float, num_steps: int
) -> None:
    fast = closed_form(first_s, step_s, num_steps, 3.0)
    assert_same(fast, one_by_one(first_s, step_s, num_steps, 3.0))


def test_arithmetic_exactly_on_bin_edges() -> None:
    edges = bin_grid().edges
    first_s = float(edges[6000])
    step_s = float(edges[6001] - edges[6000]) / 7.0
    assert_same(closed_form(first_s, step_s, 500, 1.0), one_by_one(first_s, step_s, 500, 1.0))
    step_s = float(edges[6001] - edges[6000])  # lands on (or next to) every later edge
    assert_same(closed_form(first_s, step_s, 300, 2.0), one_by_one(first_s, step_s, 300, 2.0))


edge_values = st.integers(0, len(bin_grid().edges) - 1).map(lambda k: float(bin_grid().edges[k]))
first_values = st.one_of(st.floats(0.0, 20.0, allow_subnormal=False), edge_values)
# Steps below 1e-30 s are unphysical and make squared deviations underflow to zero.
step_values = st.one_of(
    st.floats(-1e-2, 1e-2).filter(lambda step_s: abs(step_s) >= 1e-30),
    st.floats(1e-18, 1e-12),
    st.just(0.0),
)


@settings(max_examples=150, deadline=None)
@given(
    first_s=first_values,
    step_s=step_values,
    num_steps=st.integers(1, 400),
    weight=st.integers(1, 64),
    before_s=st.lists(st.floats(1e-5, 1.0), max_size=3),
)
def test_arithmetic_equals_one_by_one_property(
    first_s: float, step_s: float, num_steps: int, weight: int, before_s: list[float]
) -> None:
    if first_s + (num_steps - 1) * step_s < 0.0:
        step_s = -step_s
    fast, exact = ItlHistogram(), ItlHistogram()
    for value in before_s:  # both start from the same non-empty state
        fast.add(value)
        exact.add(value)
    fast.add_arithmetic(first_s, step_s, num_steps, float(weight))
    for i in range(num_steps):
        exact.add(first_s + i * step_s, float(weight))
    assert_same(fast, exact)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=200))
def test_bin_index_is_monotone(values: list[float]) -> None:
    grid = bin_grid()
    ordered = sorted(values)
    bins = [bin_index(grid, value) for value in ordered]
    assert bins == sorted(bins)
    np.testing.assert_array_equal(np.searchsorted(grid.edges, ordered, side="right"), bins)


def random_histogram(seed: int) -> ItlHistogram:
    rng = np.random.default_rng(seed)
    histogram = ItlHistogram()
    for value in rng.exponential(0.02, size=300).tolist():
        histogram.add(value, float(rng.integers(1, 5)))
    histogram.add_arithmetic(float(rng.uniform(0.01, 0.03)), 1e-5, 200, 4.0)
    return histogram


def test_merge_is_associative_and_matches_pooling() -> None:
    a, b, c = (random_histogram(seed) for seed in (1, 2, 3))
    left = random_histogram(1)
    left.merge(b)
    left.merge(c)  # (a + b) + c
    right_tail = random_histogram(2)
    right_tail.merge(c)
    right = random_histogram(1)
    right.merge(right_tail)  # a + (b + c)
    np.testing.assert_array_equal(left.counts, right.counts)
    np.testing.assert_array_equal(left.counts, a.counts + b.counts + c.counts)
    assert left.total_weight == right.total_weight
    assert left.mean() == pytest.approx(right.mean(), rel=1e-13)
    assert left.std() == pytest.approx(right.std(), rel=1e-12)
    assert left.quantile(0.99) == right.quantile(0.99)
    assert left.min_s == min(a.min_s, b.min_s, c.min_s)
    assert left.max_s == max(a.max_s, b.max_s, c.max_s)


def test_merge_into_empty_copies() -> None:
    source = random_histogram(4)
    target = ItlHistogram()
    target.merge(source)
    target.merge(ItlHistogram())
    np.testing.assert_array_equal(target.counts, source.counts)
    assert target.mean() == source.mean()
    assert target.std() == source.std()


def test_long_stretch_matches_vectorised_reference() -> None:
    """A million-step stretch: counts equal binning every term (numpy does the same float ops)."""
    first_s, step_s, num_steps = 0.011, 3.7e-8, 1_000_000
    histogram = closed_form(first_s, step_s, num_steps, 2.0)
    terms_s = first_s + np.arange(num_steps, dtype=np.float64) * step_s
    bins = np.searchsorted(bin_grid().edges, terms_s, side="right")
    expected = 2.0 * np.bincount(bins, minlength=len(histogram.counts)).astype(np.float64)
    np.testing.assert_array_equal(histogram.counts, expected)
    assert histogram.mean() == pytest.approx(float(np.mean(terms_s)), rel=1e-12)
    assert histogram.std() == pytest.approx(float(np.std(terms_s)), rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(
    durations=st.lists(st.floats(1e-5, 10.0), min_size=1, max_size=40),
    weight=st.sampled_from([1.0, 3.0, 117.0]),
)
def test_weighted_add_many_equals_adds(durations: list[float], weight: float) -> None:
    """``add_many(d, w)`` (a batch's steps, every row one sample each) == ``add(d_i, w)`` each."""
    one_by_one, batched = ItlHistogram(), ItlHistogram()
    for d in durations:
        one_by_one.add(d, weight)
    batched.add_many(np.array(durations), weight)
    np.testing.assert_array_equal(batched.counts, one_by_one.counts)
    assert batched.total_weight == one_by_one.total_weight
    assert batched.sum_s == pytest.approx(one_by_one.sum_s, rel=1e-12)
    assert batched.mean() == pytest.approx(one_by_one.mean(), rel=1e-12)
    assert batched.std() == pytest.approx(one_by_one.std(), rel=1e-6, abs=1e-12)
    assert (batched.min_s, batched.max_s) == (one_by_one.min_s, one_by_one.max_s)


@settings(max_examples=60, deadline=None)
@given(
    series=st.lists(
        st.tuples(
            first_values,
            st.one_of(st.floats(1e-7, 1e-2), st.floats(1e-18, 1e-12)),
            st.integers(1, 300),
            st.integers(1, 9),
        ),
        min_size=1,
        max_size=12,
    ),
    fraction_at=st.integers(0, 12),
)
def test_queued_series_count_as_one_by_one(
    series: list[tuple[float, float, int, int]], fraction_at: int
) -> None:
    """Crossing series queued and binned together (``metrics/series_bins.py``) give the counts
    of adding every term, also when a fractional weight arrives part way (queueing stops)."""
    queued, exact = ItlHistogram(), ItlHistogram()
    for index, (first_s, step_s, num_steps, weight) in enumerate(series):
        if index == fraction_at:
            queued.add(0.02, 0.25)
            exact.add(0.02, 0.25)
        queued.add_arithmetic(first_s, step_s, num_steps, float(weight))
        for i in range(num_steps):
            exact.add(first_s + i * step_s, float(weight))
    np.testing.assert_array_equal(queued.counts, exact.counts)
    assert queued.total_weight == exact.total_weight


def test_queued_series_spanning_many_bins() -> None:
    """Long stretches (hundreds of edges each), queued past the queue's size: the counts equal
    binning every term."""
    histogram, terms, weights = ItlHistogram(), [], []
    rng = np.random.default_rng(3)
    for _ in range(300):
        first_s, step_s = float(rng.uniform(0.005, 0.05)), float(rng.uniform(1e-7, 4e-6))
        num_steps, weight = int(rng.integers(1, 400)), float(rng.integers(1, 300))
        histogram.add_arithmetic(first_s, step_s, num_steps, weight)
        terms.append(first_s + np.arange(num_steps, dtype=np.float64) * step_s)
        weights.append(np.full(num_steps, weight))
    bins = np.searchsorted(bin_grid().edges, np.concatenate(terms), side="right")
    expected = np.bincount(bins, np.concatenate(weights), minlength=len(histogram.counts))
    np.testing.assert_array_equal(histogram.counts, expected)


@pytest.mark.parametrize("guess_from", [0, 384])
def test_bins_guessed_from_the_logarithm_are_the_searched_bins(
    guess_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bins_of`` (the vector adds' bins) against ``np.searchsorted`` over the edges: every
    edge, the floats just below and above each, zero, the smallest float, infinity, durations
    far outside the grid, and log-uniform durations over fourteen decades."""
    monkeypatch.setattr(histogram, "GUESSED_BINS", guess_from)
    grid = bin_grid()
    edges = grid.edges
    rng = np.random.default_rng(4)
    cases = [
        edges,
        np.nextafter(edges, 0.0),
        np.nextafter(edges, np.inf),
        np.array([0.0, 5e-324, 1e-9, 1e4, 1e5, 1.7e308, np.inf]),
        10.0 ** rng.uniform(-8.0, 6.0, 20_000),
        rng.uniform(0.02, 0.03, 500),
        np.empty(0),
    ]
    for durations in cases:
        expected = np.searchsorted(edges, durations, side="right")
        np.testing.assert_array_equal(histogram.bins_of(grid, durations), expected)
