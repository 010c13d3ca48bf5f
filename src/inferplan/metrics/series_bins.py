"""Bin counts of many increasing arithmetic series at once (``ItlHistogram``'s deferred bins).

A pure-decode stretch feeds the ITL histogram the series ``first + i * step`` (``i < k``) with a
weight; when it crosses bin edges, which edges it crosses and how many terms lie below each
decide its counts. ``ItlHistogram.add_arithmetic`` used to find them per stretch (a closed-form
guess per crossed edge, checked by evaluating the term's float expression); with integer weights
the counts are sums of integers, exact in any order below 2**53, so the histogram queues the
crossing series and ``add_series_counts`` bins a whole queue with one set of numpy calls: the
same guesses and checks per (series, edge), element-wise, so the counts are the same integers.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# A queued series: first term, step (> 0), number of terms, weight (an integer), and the bins
# of its first and last terms (``bisect_right`` over the edges; first < last).
Series = tuple[float, float, int, float, int, int]

_CORRECTIONS = 4  # guess corrections before the scalar search takes over (steps below an ulp)


def add_series_counts(
    counts: npt.NDArray[np.float64], edges: npt.NDArray[np.float64], series: list[Series]
) -> None:
    """Add every queued series' bin counts to ``counts`` (in place)."""
    if not series:
        return
    first, step, num, weight, low, high = (np.array(col) for col in zip(*series, strict=True))
    add_series_arrays(counts, edges, first, step, num, weight, low, high)


def add_series_arrays(
    counts: npt.NDArray[np.float64],
    edges: npt.NDArray[np.float64],
    first: npt.NDArray[np.float64],
    step: npt.NDArray[np.float64],
    num: npt.NDArray[np.int64],
    weight: npt.NDArray[np.float64],
    low: npt.NDArray[np.int64],
    high: npt.NDArray[np.int64],
) -> None:
    """``add_series_counts`` of series given as columns (``Series``' fields, one array each)."""
    if not len(first):
        return
    num, low, high = num.astype(np.int64), low.astype(np.int64), high.astype(np.int64)
    crossed = high - low  # edges ``low .. high - 1`` lie inside each series' range
    starts = np.cumsum(crossed) - crossed
    owner = np.repeat(np.arange(len(first)), crossed)
    edge = low[owner] + (np.arange(int(crossed.sum())) - starts[owner])
    below = _terms_below(edges[edge], first[owner], step[owner], num[owner])
    # Bin ``edge`` holds the terms below its upper edge and not below the one before it.
    previous = np.empty_like(below)
    previous[1:] = below[:-1]
    previous[starts] = 0
    last = below[starts + crossed - 1]
    np.add.at(counts, edge, (below - previous).astype(np.float64) * weight[owner])
    np.add.at(counts, high, (num - last).astype(np.float64) * weight)


def _terms_below(
    edge: npt.NDArray[np.float64],
    first: npt.NDArray[np.float64],
    step: npt.NDArray[np.float64],
    num: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Per element: how many of ``first + i * step`` (``i < num``, ``step > 0``) are ``< edge``,
    found as the first ``i`` whose term is ``>= edge``: a closed-form guess, corrected by
    evaluating the term's float expression at it and its neighbour (``histogram._count_below``
    element-wise); where rounding leaves it far off, a scalar search per element."""

    def past(i: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        value: npt.NDArray[np.bool_] = first + i.astype(np.float64) * step >= edge
        return value

    guess = np.clip(np.ceil((edge - first) / step), 0, num).astype(np.int64)
    for _ in range(_CORRECTIONS):
        too_low = (guess < num) & ~past(np.minimum(guess, num - 1))
        too_high = (guess > 0) & past(np.maximum(guess - 1, 0))
        if not (too_low.any() or too_high.any()):
            return guess
        guess += too_low.astype(np.int64) - too_high.astype(np.int64)
    unsettled = ((guess < num) & ~past(np.minimum(guess, num - 1))) | (
        (guess > 0) & past(np.maximum(guess - 1, 0))
    )
    for j in np.flatnonzero(unsettled).tolist():
        guess[j] = _first_past(float(edge[j]), float(first[j]), float(step[j]), int(num[j]))
    return guess


def _first_past(edge: float, first: float, step: float, num: int) -> int:
    """The first ``i`` in ``[0, num]`` with ``first + i * step >= edge`` (bisection)."""
    low, high = 0, num
    while low < high:
        mid = (low + high) // 2
        if first + float(mid) * step >= edge:
            high = mid
        else:
            low = mid + 1
    return low


def is_integral(weight: float) -> bool:
    """Whether ``weight`` is a whole number (its counts then add exactly in any order)."""
    return math.isfinite(weight) and float(weight).is_integer()
