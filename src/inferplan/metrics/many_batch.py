"""``add_many``'s updates made together for a batch of calls (issue 10, ``long10x``).

Above capacity with long outputs, every doomed-head pass (``engine/thrash.py``) adds its
steps' durations with one ``ItlHistogram.add_many``: some 2,600 calls at 1,000 requests, of
tens to thousands of durations each, whose ``MANY`` update (``histogram.py``'s ``_many``: the
extremes, numpy's pairwise mean and ``m2``, the exact sum, the bins) cost a dozen numpy calls
a call, 40-80 us. ``ItlBatch`` (``itl_log.py``) keeps each call's array and makes the updates
of all the calls of its batch here, in fewer calls, with the same floats:

- the mean and ``m2``: each call's own ``np.add.reduce`` (numpy's pairwise sum depends only on
  the values and their count, so a contiguous slice of the calls' concatenation sums to the
  same float as the call's own array), the deviations squared in one pass over the
  concatenation (``(v - mean) ** 2`` is one product per value, ``np.square``);
- the exact sum: every value scaled to an integer at its call's least binary exponent (one
  product by a power of two and one conversion over the concatenation, as ``exact_sum`` does
  per call) and the integers summed per call by ``np.add.reduceat`` (integer sums are exact in
  any order), rounded once: the correctly rounded sum, ``math.fsum``'s float, which
  ``exact_sum`` returns on both of its paths; a call whose exponents spread too far takes
  ``exact_sum`` itself;
- the bins: each call's own ``bins_within`` (a search of the few edges between its extremes:
  over the concatenation, whose extremes lie far apart, each value costs more).

Only calls of at least ``FEW_DURATIONS`` positive finite values come here (the others are
made at their call, as before). ``tests/metrics/test_many_batch.py`` checks every field
against ``_many``'s.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from inferplan.metrics.exact_sum import EXACT_SUM_SPREAD, exact_sum
from inferplan.metrics.histogram import BinGrid, bins_within
from inferplan.metrics.moments import MANY, Update

# A kept call: its values (1-D float64, at least ``FEW_DURATIONS``, every one positive and
# finite), its weight, and its least and greatest value.
Kept = tuple[npt.NDArray[np.float64], float, float, float]


def many_updates(kept: list[Kept], grid: BinGrid) -> list[tuple[Update, npt.NDArray[np.intp]]]:
    """Each kept call's ``add_many`` update and bins, in order: ``_many``'s floats."""
    arrays = [values for values, _, _, _ in kept]
    sizes = [len(values) for values in arrays]
    values_all = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    means = [float(np.add.reduce(values)) / values.size for values in arrays]
    squares = values_all - np.repeat(np.array(means), sizes)
    np.multiply(squares, squares, out=squares)  # ``(values - mean) ** 2``, call by call
    low_exps = [math.frexp(low_s)[1] for _, _, low_s, _ in kept]
    # Calls summed in integers (``exact_sum``'s test); the others scale by 0 and take
    # ``exact_sum`` below.
    in_ints = [
        math.frexp(high_s)[1] - low_exp <= EXACT_SUM_SPREAD and low_exp >= -960
        for (_, _, _, high_s), low_exp in zip(kept, low_exps, strict=True)
    ]
    scales = [
        math.ldexp(1.0, 53 - low_exp) if ok else 0.0
        for low_exp, ok in zip(low_exps, in_ints, strict=True)
    ]
    scaled = (values_all * np.repeat(np.array(scales), sizes)).astype(np.int64)
    starts = np.cumsum([0, *sizes[:-1]])
    high_sums = np.add.reduceat(scaled >> 31, starts).tolist()
    low_sums = np.add.reduceat(scaled & 0x7FFFFFFF, starts).tolist()
    out: list[tuple[Update, npt.NDArray[np.intp]]] = []
    start = 0
    for i, (values, weight, low_s, high_s) in enumerate(kept):
        end = start + sizes[i]
        if in_ints[i]:
            total = (int(high_sums[i]) << 31) + int(low_sums[i])
            sum_s = math.ldexp(float(total), low_exps[i] - 53)
        else:
            sum_s = exact_sum(values, low_s, high_s)
        update = (
            MANY,
            low_s,
            high_s,
            sum_s * weight,
            float(sizes[i]) * weight,
            means[i],
            float(np.add.reduce(squares[start:end])) * weight,
        )
        out.append((update, bins_within(grid, values, low_s, high_s)))
        start = end
    return out
