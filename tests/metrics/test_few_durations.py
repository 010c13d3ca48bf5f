"""``add_many``'s update for a few durations in Python floats (``metrics/few_durations.py``):
every field, and the bins, the floats and integers numpy's reductions give."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.metrics.few_durations import FEW_DURATIONS, few_update
from inferplan.metrics.histogram import ItlHistogram


def _arrays_update(h: ItlHistogram, values: np.ndarray, weight: float) -> tuple:
    """``ItlHistogram._many``'s update by its arrays' path (``FEW_DURATIONS`` lowered to 1)."""
    from inferplan.metrics import histogram

    saved = histogram.FEW_DURATIONS
    histogram.FEW_DURATIONS = 1
    try:
        many = h._many(values, weight)
    finally:
        histogram.FEW_DURATIONS = saved
    assert many is not None
    return many


def _cases(rng: np.random.Generator, edges: np.ndarray) -> list[np.ndarray]:
    out = []
    for size in range(1, FEW_DURATIONS):
        for _ in range(300):
            out.append(rng.uniform(0.0, 1.0, size) * 10.0 ** rng.uniform(-5.0, 1.0, size))
        out.append(rng.choice(edges[3000:3100], size))  # exactly on edges
        out.append(np.full(size, 0.1))
        out.append(np.exp(rng.uniform(-12.0, 4.0, size)))
    return out


@pytest.mark.parametrize("weight", [1.0, 3.0, 0.7])
def test_few_update_is_the_arrays_update(weight: float) -> None:
    h = ItlHistogram()
    rng = np.random.default_rng(11)
    for values in _cases(rng, h.grid.edges):
        few = few_update(values.tolist(), weight, h.grid.edges_list)
        assert few is not None
        update, bins = _arrays_update(h, values, weight)
        assert few[0] == update, values.tolist()  # every float, bit for bit (no nan here)
        assert few[1].dtype == bins.dtype
        assert few[1].tolist() == bins.tolist()


def test_few_update_leaves_zeros_nans_and_infinities_to_the_arrays() -> None:
    edges = ItlHistogram().grid.edges_list
    for values in ([0.0, 1.0], [1.0, -0.0], [1.0, float("nan")], [float("inf")], [-1.0]):
        assert few_update(values, 1.0, edges) is None
    h = ItlHistogram()
    with pytest.raises(ValueError):
        h.add_many(np.array([0.5, -1.0]))
    h.add_many(np.array([0.0, 0.5]))  # a zero: the arrays' path, as before
    assert h.total_weight == 2.0 and h.min_s == 0.0


def test_histogram_takes_the_few_path() -> None:
    """``add_many`` of a few durations gives the same histogram as the arrays' path."""
    rng = np.random.default_rng(3)
    few, arrays = ItlHistogram(), ItlHistogram()
    for _ in range(200):
        values = rng.uniform(1e-3, 2e-2, int(rng.integers(1, FEW_DURATIONS)))
        few.add_many(values, 2.0)
        update, bins = _arrays_update(arrays, values, 2.0)
        arrays._count_many(bins, 2.0)
        arrays._queue_update(update)
    assert few.counts.tolist() == arrays.counts.tolist()
    assert few._settled() == arrays._settled()
