"""The ITL moments' fold (``metrics/moments.py``) over updates kept as rows of a float array.

Replicas simulated apart (``engine/apart.py``) hand their ITL moment updates back to the parent
process, which applies them in the interleaved loop's order. As Python tuples a million
requests' updates (about 2.8 per request) cost hundreds of MB and seconds to pickle and fold,
so each update is a row of ``WIDTH`` float64s (``pack``: the tuple's fields, zero-padded;
exact, since counts and weights are integers far below 2**53) and ``apply_rows`` folds a block
of rows with the same float operations, in the same order, as ``Moments.apply``:

- the total weight and the Neumaier sum (its running sum, and its running error from each
  step's compensation term) are sequential sums, ``np.add.accumulate``, which adds in order;
- every per-update term (a series' mean and squared deviations, the ratio of its weight to
  the new total) is element-wise arithmetic in the same order of operations;
- only Welford's running mean depends on its own last value, so it alone is a Python loop,
  one multiply-add per update; the squared deviations' terms then follow element-wise, and
  their running sum is a sequential sum again.

The minimum and maximum are order-free, except for the sign of a zero, so a block with a zero
duration is folded by ``Moments.apply`` itself; so is a first update into empty moments (it
sets the mean instead of merging).
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import numpy.typing as npt

from inferplan.metrics.moments import ARITHMETIC, ONE, Moments, Update

WIDTH = 7  # the widest update (``MANY``) and its kind


def pack(updates: list[Update]) -> npt.NDArray[np.float64]:
    """``updates`` as rows of ``WIDTH`` floats, each zero-padded after its own fields."""
    sizes = np.fromiter(map(len, updates), dtype=np.int64, count=len(updates))
    flat = np.fromiter(chain.from_iterable(updates), dtype=np.float64, count=int(sizes.sum()))
    rows = np.zeros((len(updates), WIDTH), dtype=np.float64)
    rows[np.arange(WIDTH) < sizes[:, None]] = flat  # row-major, as ``flat`` runs
    return rows


def unpack(rows: npt.NDArray[np.float64]) -> list[Update]:
    """The tuples ``pack`` was given (for ``Moments.apply``)."""
    size = {ONE: 3, ARITHMETIC: 6}
    return [tuple(row[: size.get(int(row[0]), WIDTH)]) for row in rows.tolist()]


def apply_rows(moments: Moments, rows: npt.NDArray[np.float64]) -> None:
    """``moments.apply(unpack(rows))``, in whole arrays (the module docstring)."""
    if not len(rows):
        return
    if moments.total_weight == 0.0:  # the first update sets the mean
        moments.apply(unpack(rows[:1]))
        rows = rows[1:]
        if not len(rows):
            return
    columns = np.ascontiguousarray(rows.T)  # one field per row: element-wise on contiguous data
    terms = _terms(columns)
    if terms is None:
        moments.apply(unpack(rows))
        return
    low, high, value, weight, target = terms
    totals = np.add.accumulate(np.concatenate(([moments.total_weight], weight)))
    before, total = totals[:-1], totals[1:]
    ratio = weight / total
    means = _running_means(moments.mean_s, target, ratio)
    delta = target - np.concatenate(([moments.mean_s], means[:-1]))
    is_one = columns[0] == ONE
    one_term = (columns[2] * delta) * (target - means)
    merge_term = _part_m2(columns) + delta * delta * before * weight / total
    m2_terms = np.where(is_one, one_term, merge_term)
    hi_err = _neumaier(moments.sum_hi_s, moments.sum_error_s, value)
    moments.total_weight = float(total[-1])
    moments.mean_s = float(means[-1])
    moments.m2_s2 = float(np.add.accumulate(np.concatenate(([moments.m2_s2], m2_terms)))[-1])
    moments.sum_hi_s, moments.sum_error_s = hi_err
    moments.sum_s = moments.sum_hi_s + moments.sum_error_s
    moments.min_s = min(moments.min_s, float(low.min()))
    moments.max_s = max(moments.max_s, float(high.max()))


_Terms = tuple[npt.NDArray[np.float64], ...]


def _terms(columns: npt.NDArray[np.float64]) -> _Terms | None:
    """Per update (``columns``: the rows transposed): its lowest and highest duration, its
    weighted sum, its weight and the mean it pulls towards, as ``Moments.apply`` computes
    them; None where a duration is zero."""
    kind, a, b, c, d, e = columns[:6]
    is_one, is_series = kind == ONE, kind == ARITHMETIC
    n = c
    series_mean = a + b * (n - 1.0) / 2.0
    series_weight = n * d
    low = np.where(is_one, a, np.where(is_series, np.minimum(a, e), a))
    high = np.where(is_one, a, np.where(is_series, np.maximum(a, e), b))
    if np.any(low == 0.0) or np.any(high == 0.0):
        return None
    target = np.where(is_one, a, np.where(is_series, series_mean, e))
    weight = np.where(is_one, b, np.where(is_series, series_weight, d))
    value = np.where(is_one, a * b, np.where(is_series, series_mean * series_weight, c))
    return low, high, value, weight, target


def _part_m2(columns: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A series' or a batch's own squared deviations (``Moments.apply``'s ``part_m2``)."""
    kind, step, n, weight = columns[0], columns[2], columns[3], columns[4]
    series = weight * step * step * n * (n * n - 1.0) / 12.0
    return np.where(kind == ARITHMETIC, series, columns[6])


def _running_means(
    mean: float, targets: npt.NDArray[np.float64], ratios: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Welford's running mean after each update: ``mean += (target - mean) * ratio``
    (a comprehension: its append is one opcode, not a call; over the arrays' memoryviews,
    which yield Python floats as they go, where ``tolist`` would first build two lists)."""
    out = [
        mean := mean + (target - mean) * ratio
        for target, ratio in zip(
            np.ascontiguousarray(targets).data,
            np.ascontiguousarray(ratios).data,
            strict=True,
        )
    ]
    return np.asarray(out, dtype=np.float64)


def _neumaier(hi: float, err: float, values: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Neumaier's compensated sum of ``values`` after ``hi + err``: the running sum and its
    running error, each a sequential sum."""
    sums = np.add.accumulate(np.concatenate(([hi], values)))
    previous, current = sums[:-1], sums[1:]
    compensation = np.where(
        np.abs(previous) >= np.abs(values),
        (previous - current) + values,
        (values - current) + previous,
    )
    error = np.add.accumulate(np.concatenate(([err], compensation)))
    return float(sums[-1]), float(error[-1])
