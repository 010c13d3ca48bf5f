"""``ItlHistogram.add_many``'s update for a few durations, in Python floats (issue 10, ``long10x``).

A chunk step's emission adds the gaps of the rows that did not sample one step ago
(``engine/chunk_step.py``'s ``emit_rows``), a stretch's end the gaps of its other rows: one to
a few durations a call, some three thousand calls in ``long10x`` at 1,000 requests, each of
which cost ``add_many``'s dozen numpy calls (about 25 us) for a handful of floats. Below
``FEW_DURATIONS`` values, numpy's own reductions add in plain order (``np.add.reduce``
sums fewer than eight values left to right from zero; from eight, pairwise with eight
accumulators), so the same floats come from Python's:

- the least and greatest value (every value positive and finite: no zero's sign, nan or
  infinity to tell apart; elsewhere the arrays' path, which raises or propagates as before);
- the mean: the left-to-right sum over the count; ``m2``: the sum of each ``(v - mean) *
  (v - mean)`` (``** 2`` of an array is ``np.square``, one multiplication), left to right;
- the exact sum: ``math.fsum`` (``exact_sum``'s own answer below ``EXACT_SUM_MIN``);
- the bins: ``bisect_right`` over the edges, each duration's (``bin_index``, the one
  definition ``bins_within`` meets).

``tests/metrics/test_few_durations.py`` checks every field against the arrays' path.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np
import numpy.typing as npt

from inferplan.metrics.moments import MANY, Update

FEW_DURATIONS = 8  # values below which ``np.add.reduce`` sums left to right


def few_update(
    values: list[float], weight: float, edges: tuple[float, ...]
) -> tuple[Update, npt.NDArray[np.intp]] | None:
    """``ItlHistogram._many``'s update and bins for fewer than ``FEW_DURATIONS`` values; None
    where one is not positive and finite (the arrays' path decides)."""
    low_s, high_s = min(values), max(values)
    if not (low_s > 0.0 and high_s < math.inf):  # a nan fails ``low_s > 0`` or is not least
        return None
    if not all(v > 0.0 for v in values):  # a nan anywhere but at the least
        return None
    total = 0.0
    for v in values:
        total += v
    mean_s = total / len(values)
    m2 = 0.0
    for v in values:
        m2 += (v - mean_s) * (v - mean_s)
    update = (
        MANY,
        low_s,
        high_s,
        math.fsum(values) * weight,
        float(len(values)) * weight,
        mean_s,
        m2 * weight,
    )
    bins = np.array([bisect_right(edges, v) for v in values], dtype=np.intp)
    return update, bins
