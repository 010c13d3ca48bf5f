"""``add_many``'s updates made together for a batch of calls (``metrics/many_batch.py``): every
field and every bin ``ItlHistogram._many`` gives, and an ``ItlBatch`` equal to a histogram fed
call by call."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.itl_log import ItlBatch
from inferplan.metrics.many_batch import many_updates


def _calls(rng: np.random.Generator, edges: np.ndarray) -> list[np.ndarray]:
    """Arrays of 8 to 3,000 positive values: a pass's rising steps, wide spreads (past the
    integer sum's exponent spread), values on bin edges, one value repeated, tiny values."""
    out = []
    for _ in range(40):
        size = int(rng.integers(8, 3000))
        out.append(0.02 + 1e-6 * np.arange(size) + rng.uniform(0.0, 1e-3, size))
        out.append(rng.uniform(0.0, 1.0, size) * 10.0 ** rng.uniform(-5.0, 1.0, size))
        out.append(rng.choice(edges[3000:3100], size))
        out.append(np.full(size, 0.1))
        out.append(np.exp(rng.uniform(-2.0, 0.5, size)))
    out.append(np.full(9, 5e-300))  # below ``exact_sum``'s exponent floor
    return out


@pytest.mark.parametrize("weight", [1.0, 7.0, 0.7])
def test_many_updates_are_the_calls_updates(weight: float) -> None:
    h = ItlHistogram()
    rng = np.random.default_rng(5)
    calls = _calls(rng, h.grid.edges)
    for first in range(0, len(calls), 37):  # batches of several calls, and of one
        group = calls[first : first + 37] if first % 2 else calls[first : first + 1]
        kept = [(v, weight, float(v.min()), float(v.max())) for v in group]
        made = many_updates(kept, h.grid)
        assert len(made) == len(group)
        for values, (update, bins) in zip(group, made, strict=True):
            many = h._many(values, weight)
            assert many is not None
            assert update == many[0], values[:4].tolist()  # every float, bit for bit
            assert bins.tolist() == many[1].tolist()


def _feed(h: ItlHistogram, rng: np.random.Generator, calls: list[np.ndarray]) -> None:
    for i, values in enumerate(calls):
        h.add(float(rng.uniform(0.01, 0.1)), 3.0)
        if i % 3 == 0:
            h.add_arithmetic(0.03, 1e-5, 40, 2.0)
        h.add_many(values, float(1 + i % 5))
        if i % 7 == 0:
            h.add_many(values[:3], 2.0)  # a few: made at the call


def test_batch_equals_the_histogram_call_by_call() -> None:
    rng = np.random.default_rng(9)
    calls = _calls(rng, ItlHistogram().grid.edges)
    plain, batch = ItlHistogram(), ItlBatch()
    _feed(plain, np.random.default_rng(1), calls)
    _feed(batch, np.random.default_rng(1), calls)
    assert batch.counts.tolist() == plain.counts.tolist()
    assert batch.mean() == plain.mean() and batch.std() == plain.std()
    assert (batch.total_weight, batch.min_s, batch.max_s, batch.sum_s) == (
        plain.total_weight,
        plain.min_s,
        plain.max_s,
        plain.sum_s,
    )
    assert batch.quantile(0.5) == plain.quantile(0.5)


def test_batch_checks_at_the_call() -> None:
    batch = ItlBatch()
    with pytest.raises(ValueError):
        batch.add_many(np.array([0.5] * 9 + [-1.0]))
    with pytest.raises(ValueError):
        batch.add_many(np.array([0.5] * 9 + [math.nan]))
    batch.add_many(np.array([0.0] + [0.5] * 9))  # a zero: made at the call, as before
    batch.add_many(np.array([0.25] * 10))  # kept, then made when read
    assert batch.total_weight == 20.0 and batch.min_s == 0.0 and batch.max_s == 0.5


@pytest.mark.parametrize("spread", [8, 9, 10, 11, 12])
def test_the_integer_sum_ends_at_its_spread(spread: int) -> None:
    """Values from 1 to just below ``2 ** (spread + 1)`` (binary exponents ``spread`` apart,
    the top mantissa all ones): summed in integers up to ``EXACT_SUM_SPREAD``, past it by
    ``exact_sum`` (an integer sum there would overflow int64 at the top value)."""
    top = math.ldexp(1.0, spread + 1) * (1.0 - 2.0**-53)
    values = np.array([1.0, 1.5, 3.0 + 2.0**-40, 7.25, 2.0**-30 + 1.0, 1.0, 1.25, top])
    h = ItlHistogram()
    ((update, bins),) = many_updates([(values, 2.0, 1.0, top)], h.grid)
    many = h._many(values, 2.0)
    assert many is not None and update == many[0] and bins.tolist() == many[1].tolist()
    assert update[3] == math.fsum(values.tolist()) * 2.0
