"""``add_many``'s batch update from its extremes (``metrics/histogram.py``): the bins searched
between the least and greatest durations' edges (``bins_within``), the exact sum's exponents
read from the extremes, and the mean as numpy's sum over the count, each the float or integer
the full pass gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferplan.metrics import histogram
from inferplan.metrics.exact_sum import EXACT_SUM_SPREAD, exact_sum
from inferplan.metrics.histogram import ItlHistogram, bins_of, bins_within


def _arrays(rng: np.random.Generator, edges: np.ndarray) -> list[np.ndarray]:
    """Durations as the engine makes them (a pass's few step lengths, ramps) and edge cases:
    values on edges, zeros, one value repeated, wide spreads, sizes around the thresholds."""
    out = []
    for size in (1, 2, 7, 300, 511, 512, 513, 2000, histogram.SEARCHED_BINS + 5):
        out.append(rng.uniform(0.01, 0.09, size))
        out.append(np.repeat(rng.uniform(0.02, 0.06, 4), -(-size // 4))[:size])
        out.append(rng.choice(edges[3000:3100], size))  # exactly on edges
        out.append(np.full(size, edges[4000]))
        out.append(np.exp(rng.uniform(-12.0, 4.0, size)))  # spread over many binades
        with_zero = rng.uniform(0.0, 1.0, size)
        with_zero[0] = 0.0
        out.append(with_zero)
    return out


def test_bins_within_are_the_searched_bins() -> None:
    grid = ItlHistogram().grid
    rng = np.random.default_rng(5)
    arrays = _arrays(rng, grid.edges)
    arrays.append(np.array([grid.edges[-1] * 4.0, grid.edges[0] / 4.0]))  # outside the grid
    for values in arrays:
        low, high = float(values.min()), float(values.max())
        got = bins_within(grid, values, low, high)
        assert got.dtype == np.intp
        assert np.array_equal(got, np.searchsorted(grid.edges, values, side="right"))
        assert np.array_equal(got, bins_of(grid, values))


def test_exact_sum_from_the_extremes_is_fsum() -> None:
    rng = np.random.default_rng(8)
    arrays = _arrays(rng, ItlHistogram().grid.edges)
    # Exponents spanning exactly the limit and one past it, with the extremes at the ends.
    for spread in (EXACT_SUM_SPREAD, EXACT_SUM_SPREAD + 1):
        values = rng.uniform(1.0, 2.0, 900)
        values[0], values[-1] = 0.75, math.ldexp(1.5, spread - 1)
        arrays.append(values)
    arrays.append(np.append(rng.uniform(0.1, 0.2, 600), math.inf))
    for values in arrays:
        low, high = float(values.min()), float(values.max())
        expected = math.fsum(values.tolist())
        assert exact_sum(values, low, high) == expected
        assert exact_sum(values) == expected


def test_a_batch_update_is_the_full_passes() -> None:
    """``_many``'s update and bins against those the full passes make (``values.mean()``,
    ``values.max()``, ``exact_sum`` without extremes, ``bins_of``)."""
    h = ItlHistogram()
    rng = np.random.default_rng(13)
    for values in _arrays(rng, h.grid.edges):
        many = h._many(values, 7.0)
        assert many is not None
        update, bins = many
        mean = float(values.mean())
        expected = (
            update[0],
            float(values.min()),
            float(values.max()),
            exact_sum(values) * 7.0,
            float(values.size) * 7.0,
            mean,
            float(((values - mean) ** 2).sum()) * 7.0,
        )
        assert update == expected
        assert np.array_equal(bins, bins_of(h.grid, values))


def test_a_negative_duration_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        ItlHistogram().add_many(np.array([0.1, -1e-9, 0.2]))
