"""An exact float sum of many non-negative durations in a few vector operations: the same float
as ``math.fsum`` (the correctly rounded sum), for the histogram's exact moments
(``histogram.py`` ``ItlHistogram.add_many``)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

EXACT_SUM_MIN = 512  # durations from which ``exact_sum`` sums in integers (fewer: ``fsum``)
EXACT_SUM_SPREAD = 9  # widest spread of binary exponents summed in integers (bits of headroom)


def exact_sum(
    values: npt.NDArray[np.float64], low_s: float | None = None, high_s: float | None = None
) -> float:
    """``math.fsum`` of finite values ``>= 0`` (the correctly rounded sum, so the same float),
    for many values in a few vector operations instead of a Python float per value.

    Each value is ``m * 2**(e - 53)`` with an integer ``m < 2**53`` (``np.frexp``); where the
    exponents span at most ``EXACT_SUM_SPREAD``, every ``m`` shifted to the smallest exponent
    fits 62 bits, its high and low 31 bits are summed apart in int64 (exact below 2**31
    values), and the exact total, a Python integer, is rounded once by ``float`` (correctly
    rounded, ties to even, as ``fsum``) and scaled by a power of two (exact in the normal
    range). Otherwise, and for a few values, ``math.fsum`` itself. ``low_s``, ``high_s``: the
    values' least and greatest where the caller has them; where the least is positive their
    exponents are the extremes of the values' (a binary exponent never falls as a positive
    value grows), read without a pass over the array."""
    if len(values) < EXACT_SUM_MIN:
        return math.fsum(values.tolist())
    if low_s is not None and high_s is not None and low_s > 0.0:
        low_exp = math.frexp(low_s)[1]
        spread = math.frexp(high_s)[1] - low_exp  # an infinite ``high_s``: fsum below
        if spread > EXACT_SUM_SPREAD or low_exp < -960 or not math.isfinite(high_s):
            return math.fsum(values.tolist())
        # Each ``m * 2**(e - 53)`` times ``2**(53 - low_exp)`` is ``m << (e - low_exp)``, an
        # integer below 2**62: the product by a power of two is exact, so is its conversion.
        scaled = (values * math.ldexp(1.0, 53 - low_exp)).astype(np.int64)
    else:
        mantissas, exponents = np.frexp(values)
        low_exp = int(exponents.min())
        spread = int(exponents.max()) - low_exp
        high_s = float(values.max())
        if spread > EXACT_SUM_SPREAD or low_exp < -960 or not math.isfinite(high_s):
            return math.fsum(values.tolist())
        shifts = exponents - low_exp
        scaled = (mantissas * 9007199254740992.0).astype(np.int64) << shifts  # ``m`` at low
    total = (int((scaled >> 31).sum()) << 31) + int((scaled & 0x7FFFFFFF).sum())
    return math.ldexp(float(total), low_exp - 53)
