"""Discrete distributions of request lengths: moments, quantiles, sampling and compaction.

Owns ``Pmf`` (sorted values with probabilities) and ``compact_token_pmf``, which shrinks a pmf
with tens of thousands of distinct token counts to a few thousand points so that it can be
bundled: values below ``exact_below_tokens`` stay exact; above it, values are pooled into
log-spaced bins (``bins_per_doubling`` per factor of two, so each bin spans under 0.6 % of its
value with the default 128) and each bin is represented by its probability-weighted mean, which
keeps the mean and moves any quantile by less than a bin's width. The largest value (a length cap
such as 32,768) is kept exactly.

Quantiles follow the inverse-CDF rule: the smallest value whose cumulative probability reaches q.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError
from inferplan.workload.request import FloatArray
from inferplan.workload.synthetic import Seed, check_count, make_rng


@dataclass(frozen=True)
class Pmf:
    """``probabilities[i]`` is the chance of ``values[i]``; values sorted and distinct."""

    values: FloatArray
    probabilities: FloatArray

    def mean(self) -> float:
        return float(np.dot(self.values, self.probabilities))

    def quantile(self, q: float) -> float:
        """The smallest value whose cumulative probability is at least ``q``."""
        cdf = np.cumsum(self.probabilities)
        index = int(np.searchsorted(cdf, q * cdf[-1], side="left"))
        return float(self.values[min(index, len(self.values) - 1)])

    def share_above(self, threshold: float) -> float:
        return float(self.probabilities[self.values > threshold].sum())

    def sample(self, num_samples: int, rng: Seed) -> FloatArray:
        """``num_samples`` independent draws, by inverting the CDF at uniform points."""
        num_samples = check_count(num_samples, "--num-prompts")
        cdf = np.cumsum(self.probabilities)
        points = make_rng(rng).random(num_samples) * cdf[-1]
        index = np.minimum(np.searchsorted(cdf, points, side="right"), len(cdf) - 1)
        return self.values[index]


def make_pmf(values: npt.ArrayLike, weights: npt.ArrayLike) -> Pmf:
    """A normalised ``Pmf`` from (possibly repeated, unsorted) values and non-negative weights."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if values.shape != weights.shape or values.ndim != 1:
        raise InferplanError("a length distribution needs as many probabilities as values")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(weights))):
        raise InferplanError("a length distribution has a non-finite value or probability")
    if np.any(weights < 0) or weights.sum() <= 0:
        raise InferplanError("a length distribution needs non-negative probabilities, not all 0")
    unique, inverse = np.unique(values, return_inverse=True)
    pooled = np.bincount(inverse, weights=weights, minlength=len(unique))
    is_kept = pooled > 0
    return Pmf(values=unique[is_kept], probabilities=pooled[is_kept] / pooled.sum())


def compact_token_pmf(
    pmf: Pmf, *, exact_below_tokens: int = 2048, bins_per_doubling: int = 128
) -> Pmf:
    """Pool values at or above ``exact_below_tokens`` into log-spaced bins (see module doc)."""
    values, probabilities = pmf.values, pmf.probabilities
    ratio = np.maximum(values, exact_below_tokens) / exact_below_tokens
    bins = np.floor(np.log2(ratio) * bins_per_doubling)
    group = np.where(values < exact_below_tokens, values, exact_below_tokens + bins)
    group[values == values.max()] = np.inf  # the cap keeps its own point
    unique, inverse = np.unique(group, return_inverse=True)
    mass = np.bincount(inverse, weights=probabilities, minlength=len(unique))
    moment = np.bincount(inverse, weights=values * probabilities, minlength=len(unique))
    return make_pmf(np.rint(moment / mass), mass)
