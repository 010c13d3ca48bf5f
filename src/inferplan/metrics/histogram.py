"""Inter-token latency (ITL) accumulator: a log-binned, weighted histogram with exact moments.

vLLM's benchmark pools every gap between consecutive streamed chunks over all requests and takes
numpy percentiles of the pool. A simulator cannot keep hundreds of millions of gaps, so the engine
feeds them here as they happen: ``add`` for one step's duration, and ``add_arithmetic`` for a whole
pure-decode stretch whose step times grow linearly (the fast engine of the design), in
closed form, touching only the bins the stretch crosses.

Resolution. Bins are log-spaced, ``BINS_PER_DECADE`` per decade between ``LOW_S`` and ``HIGH_S``
(plus an underflow and an overflow bin), so each bin spans a relative width of
``10 ** (1 / 1200) - 1``, about 0.192 %. ``quantile`` reproduces ``np.percentile``'s linear
interpolation between order statistics, with each order statistic placed inside its own bin, so
for unit weights a quantile is within one bin width (0.192 % relative) of ``np.percentile`` of
the pooled samples. Below ``LOW_S`` and above ``HIGH_S`` the error is bounded by the exact minimum
and maximum instead. ``mean`` and ``std`` are exact (not binned): the histogram keeps the total
weight, a compensated (Neumaier) weighted sum for the mean, and the sum of squared deviations
from a Welford running mean, merged with Chan et al.'s parallel update (the squared deviations of
an arithmetic series are ``step**2 * n * (n**2 - 1) / 12``, which never cancels).

Exact mode == fast mode. The bin of a duration ``d`` is one pure function, ``bisect_right`` over
the shared edge list (``np.searchsorted(..., side="right")`` in the vector path, which compares
the same floats). ``add_arithmetic(first_s, step_s, n, w)`` counts, for each bin edge ``e`` it
crosses, how many ``d_i = first_s + i * step_s`` lie below ``e``, estimating the index in closed
form and then correcting it by evaluating ``d_i`` with the same float expression the caller of
``add`` would use. So bin counts are identical (exactly, for integer weights) to calling
``add(first_s + i * step_s, w)`` for each ``i``; mean and variance agree to rounding (~1e-13).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

LOW_S = 1e-6
HIGH_S = 1e4
BINS_PER_DECADE = 1200
BIN_RELATIVE_WIDTH = 10.0 ** (1.0 / BINS_PER_DECADE) - 1.0  # about 0.00192


@dataclass(frozen=True)
class BinGrid:
    """Shared, immutable bin edges. Bin ``b`` holds durations with ``edges[b-1] <= d < edges[b]``;
    bin 0 is everything below ``edges[0]``, the last bin everything at or above ``edges[-1]``."""

    edges: npt.NDArray[np.float64]
    edges_list: tuple[float, ...]

    @property
    def num_bins(self) -> int:
        return len(self.edges_list) + 1


@cache
def bin_grid(
    low_s: float = LOW_S, high_s: float = HIGH_S, bins_per_decade: int = BINS_PER_DECADE
) -> BinGrid:
    """The grid for these parameters, built once per process and shared by every histogram."""
    num_decades = math.log10(high_s / low_s)
    num_edges = round(num_decades * bins_per_decade) + 1
    edges = low_s * np.power(10.0, np.arange(num_edges, dtype=np.float64) / bins_per_decade)
    edges.setflags(write=False)
    return BinGrid(edges=edges, edges_list=tuple(edges.tolist()))


def bin_index(grid: BinGrid, duration_s: float) -> int:
    """The one definition of which bin a duration falls in (both add paths rely on it)."""
    return bisect_right(grid.edges_list, duration_s)


def _count_below(
    edges: npt.NDArray[np.float64], first_s: float, step_s: float, num_steps: int
) -> npt.NDArray[np.int64]:
    """For each edge ``e``: how many of ``first_s + i * step_s`` (i < num_steps) are ``< e``.

    The sequence is monotone in ``i`` (float rounding is monotone), so the answer is a prefix
    (``step_s > 0``) or a suffix (``step_s < 0``) length. We look for the first index ``i`` whose
    value is on the far side of ``e`` (``>= e`` when increasing, ``< e`` when decreasing): a
    closed-form guess, checked and nudged by evaluating the exact float expression at it and its
    neighbour; where rounding makes the guess far off (steps below one ulp), a binary search.
    """
    increasing = step_s > 0

    def is_past(i: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        value_s = first_s + i.astype(np.float64) * step_s
        return value_s >= edges if increasing else value_s < edges

    guess = np.clip(np.ceil((edges - first_s) / step_s), 0, num_steps).astype(np.int64)
    for _ in range(4):
        too_low = (guess < num_steps) & ~is_past(np.minimum(guess, num_steps - 1))
        too_high = (guess > 0) & is_past(np.maximum(guess - 1, 0))
        if not (too_low.any() or too_high.any()):
            break
        guess = guess + too_low.astype(np.int64) - too_high.astype(np.int64)
    else:
        guess = _first_past(is_past, len(edges), num_steps)
    return guess if increasing else num_steps - guess


SCALAR_EDGES = 16  # below this many edges crossed, plain Python beats the vector path


def _count_below_few(
    edges: tuple[float, ...], first_s: float, step_s: float, num_steps: int
) -> list[int]:
    """``_count_below`` for a few edges, with the same float expression per index."""
    out = []
    for edge in edges:
        guess = min(max(math.ceil((edge - first_s) / step_s), 0), num_steps)
        if step_s > 0:  # past the edge: first_s + i * step_s >= edge
            while guess < num_steps and not first_s + float(guess) * step_s >= edge:
                guess += 1
            while guess > 0 and first_s + float(guess - 1) * step_s >= edge:
                guess -= 1
            out.append(guess)
        else:  # past the edge: first_s + i * step_s < edge
            while guess < num_steps and not first_s + float(guess) * step_s < edge:
                guess += 1
            while guess > 0 and first_s + float(guess - 1) * step_s < edge:
                guess -= 1
            out.append(num_steps - guess)
    return out


def _first_past(
    is_past: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]],
    num_edges: int,
    num_steps: int,
) -> npt.NDArray[np.int64]:
    """Vector binary search: per edge, the first ``i`` in ``[0, num_steps]`` that ``is_past``."""
    low = np.zeros(num_edges, dtype=np.int64)
    high = np.full(num_edges, num_steps, dtype=np.int64)
    while np.any(low < high):
        mid = (low + high) // 2
        past = is_past(np.minimum(mid, num_steps - 1)) & (low < high)
        high = np.where(past, mid, high)
        low = np.where(past | (low >= high), low, mid + 1)
    return low


class ItlHistogram:
    """Weighted inter-token latencies: log-binned counts plus exact weight, mean and variance."""

    def __init__(self, grid: BinGrid | None = None) -> None:
        self.grid = grid if grid is not None else bin_grid()
        self.counts = np.zeros(self.grid.num_bins, dtype=np.float64)
        self.total_weight = 0.0
        self._sum_s = 0.0  # Neumaier-compensated weighted sum: _sum_s + _sum_error_s
        self._sum_error_s = 0.0
        self._mean_s = 0.0  # Welford running mean, used only to update _m2_s2
        self._m2_s2 = 0.0  # sum of weight * (d - mean)^2
        self.min_s = math.inf
        self.max_s = -math.inf

    # ----- verbs -----------------------------------------------------------------------------

    def add(self, duration_s: float, weight: float = 1.0) -> None:
        """Record ``weight`` samples of one duration (e.g. one decode step seen by a batch)."""
        if not duration_s >= 0.0:
            raise ValueError(f"ITL duration must be >= 0, got {duration_s}")
        if weight <= 0.0:
            return
        self.counts[bisect_right(self.grid.edges_list, duration_s)] += weight  # bin_index
        if duration_s < self.min_s:
            self.min_s = duration_s
        if duration_s > self.max_s:
            self.max_s = duration_s
        self._add_to_sum(duration_s * weight)
        # Welford's weighted update; the first sample sets the mean exactly.
        total = self.total_weight + weight
        if self.total_weight == 0.0:
            self._mean_s = duration_s
        else:
            delta = duration_s - self._mean_s
            self._mean_s += delta * (weight / total)
            self._m2_s2 += weight * delta * (duration_s - self._mean_s)
        self.total_weight = total

    def add_arithmetic(
        self, first_s: float, step_s: float, num_steps: int, weight: float = 1.0
    ) -> None:
        """Record ``weight`` samples of each ``first_s + i * step_s`` for ``i < num_steps``.

        Costs O(bins crossed), not O(num_steps); bin counts equal ``num_steps`` calls to ``add``.
        """
        if num_steps <= 0 or weight <= 0.0:
            return
        last_s = first_s + (num_steps - 1) * step_s
        if not (first_s >= 0.0 and last_s >= 0.0):
            raise ValueError(f"ITL durations must be >= 0, got {first_s} .. {last_s}")
        edges = self.grid.edges_list
        first_bin = bisect_right(edges, first_s)  # bin_index, inline (called every stretch)
        last_bin = bisect_right(edges, last_s)
        if first_bin == last_bin:
            self.counts[first_bin] += num_steps * weight
        else:
            low, high = min(first_bin, last_bin), max(first_bin, last_bin)
            if high - low <= SCALAR_EDGES:
                previous = 0
                for offset, count in enumerate(
                    [*_count_below_few(edges[low:high], first_s, step_s, num_steps), num_steps]
                ):
                    self.counts[low + offset] += (count - previous) * weight
                    previous = count
            else:
                below = _count_below(self.grid.edges[low:high], first_s, step_s, num_steps)
                bounds = np.concatenate(([0], below, [num_steps]))
                self.counts[low : high + 1] += np.diff(bounds).astype(np.float64) * weight
        self.min_s = min(self.min_s, first_s, last_s)
        self.max_s = max(self.max_s, first_s, last_s)
        # Mean and squared deviations of an arithmetic series, in closed form (both non-negative).
        n = float(num_steps)
        series_mean_s = first_s + step_s * (n - 1.0) / 2.0
        series_m2_s2 = weight * step_s * step_s * n * (n * n - 1.0) / 12.0
        self._add_to_sum(series_mean_s * (n * weight))
        self._combine(n * weight, series_mean_s, series_m2_s2)

    def add_many(self, durations_s: npt.NDArray[np.float64], weight: float = 1.0) -> None:
        """Record ``weight`` samples of each duration (vectorised; bins as ``add`` would pick
        them)."""
        values = np.asarray(durations_s, dtype=np.float64)
        if values.size == 0:
            return
        if not np.all(values >= 0.0):
            raise ValueError("ITL durations must be >= 0")
        bins = np.searchsorted(self.grid.edges, values, side="right")
        self.counts += np.bincount(bins, minlength=self.grid.num_bins).astype(np.float64) * weight
        self.min_s = min(self.min_s, float(values.min()))
        self.max_s = max(self.max_s, float(values.max()))
        self._add_to_sum(math.fsum(values.tolist()) * weight)
        mean_s = float(values.mean())
        m2_s2 = float(((values - mean_s) ** 2).sum()) * weight
        self._combine(float(values.size) * weight, mean_s, m2_s2)

    def merge(self, other: ItlHistogram) -> None:
        """Fold ``other`` into this histogram (e.g. per-replica histograms into a cluster one)."""
        if other.grid is not self.grid and other.grid.edges_list != self.grid.edges_list:
            raise ValueError("cannot merge ITL histograms with different bin grids")
        if other.total_weight == 0.0:
            return
        self.counts += other.counts
        self.min_s = min(self.min_s, other.min_s)
        self.max_s = max(self.max_s, other.max_s)
        self._add_to_sum(other._sum_s)
        self._add_to_sum(other._sum_error_s)
        self._combine(other.total_weight, other._mean_s, other._m2_s2)

    def _add_to_sum(self, value_s: float) -> None:
        """Neumaier's compensated summation, so the mean stays exact to ~1 ulp however long."""
        total_s = self._sum_s + value_s
        if abs(self._sum_s) >= abs(value_s):
            self._sum_error_s += (self._sum_s - total_s) + value_s
        else:
            self._sum_error_s += (value_s - total_s) + self._sum_s
        self._sum_s = total_s

    def _combine(self, weight: float, mean_s: float, m2_s2: float) -> None:
        """Chan, Golub and LeVeque's parallel update of (weight, running mean, M2)."""
        if self.total_weight == 0.0:
            self.total_weight, self._mean_s, self._m2_s2 = weight, mean_s, m2_s2
            return
        total = self.total_weight + weight
        delta = mean_s - self._mean_s
        self._mean_s += delta * (weight / total)
        self._m2_s2 += m2_s2 + delta * delta * self.total_weight * weight / total
        self.total_weight = total

    # ----- readings --------------------------------------------------------------------------

    @property
    def sum_s(self) -> float:
        """Weighted sum of all durations."""
        return self._sum_s + self._sum_error_s

    def mean(self) -> float:
        """Exact weighted mean (``nan`` when empty)."""
        return self.sum_s / self.total_weight if self.total_weight > 0.0 else math.nan

    def std(self) -> float:
        """Exact weighted population standard deviation, like ``np.std`` (``nan`` when empty)."""
        if self.total_weight <= 0.0:
            return math.nan
        return math.sqrt(max(self._m2_s2, 0.0) / self.total_weight)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (0 <= q <= 1) with ``np.percentile``'s linear interpolation.

        The order statistic of (fractional) rank ``r`` is placed in its bin at
        ``(r - weight_below + 0.5) / bin_weight`` of the way across, clipped to the observed
        range; the first and last order statistics are the exact minimum and maximum. See the
        module docstring for the resolution. ``nan`` when empty.
        """
        return float(self.quantiles(np.asarray([q], dtype=np.float64))[0])

    def quantiles(self, qs: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Vector form of ``quantile``."""
        q = np.asarray(qs, dtype=np.float64)
        if np.any((q < 0.0) | (q > 1.0)):
            raise ValueError(f"quantiles must lie in [0, 1], got {q}")
        if self.total_weight <= 0.0:
            return np.full(q.shape, np.nan)
        rank = q * max(self.total_weight - 1.0, 0.0)
        low_rank = np.floor(rank)
        high_rank = np.minimum(low_rank + 1.0, max(self.total_weight - 1.0, 0.0))
        low = self._order_statistic(low_rank)
        high = self._order_statistic(high_rank)
        return low + (high - low) * (rank - low_rank)

    def _order_statistic(self, rank: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        cumulative = np.cumsum(self.counts)
        bins = np.searchsorted(cumulative, rank, side="right")
        bins = np.minimum(bins, len(cumulative) - 1)
        below = np.where(bins > 0, cumulative[np.maximum(bins - 1, 0)], 0.0)
        in_bin = self.counts[bins]
        fraction = np.clip((rank - below + 0.5) / np.where(in_bin > 0, in_bin, 1.0), 0.0, 1.0)
        edges = self.grid.edges
        lower = np.where(bins > 0, edges[np.maximum(bins - 1, 0)], self.min_s)
        upper = np.where(bins < len(edges), edges[np.minimum(bins, len(edges) - 1)], self.max_s)
        value = np.clip(lower + (upper - lower) * fraction, self.min_s, self.max_s)
        # The extreme order statistics are known exactly.
        value = np.where(rank <= 0.0, self.min_s, value)
        return np.where(rank >= self.total_weight - 1.0, self.max_s, value)
