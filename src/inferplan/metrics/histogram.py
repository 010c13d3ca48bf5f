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
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import numpy.typing as npt

from inferplan.metrics.exact_sum import exact_sum
from inferplan.metrics.few_durations import FEW_DURATIONS, few_update
from inferplan.metrics.moment_rows import apply_rows
from inferplan.metrics.moments import ARITHMETIC, MANY, ONE, Moments, Update
from inferplan.metrics.series_bins import Series, add_series_counts, is_integral

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
    padded_edges: npt.NDArray[np.float64]  # ``-inf``, the edges, nan (``bins_of``)
    bins_per_decade: float  # edges per decade (``bins_of``'s guess)
    log10_low: float  # ``log10(edges[0])`` (``bins_of``'s guess)

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
    padded = np.concatenate(([-np.inf], edges, [np.nan]))  # nothing is below or at either
    padded.setflags(write=False)
    return BinGrid(
        edges=edges,
        edges_list=tuple(edges.tolist()),
        padded_edges=padded,
        bins_per_decade=float(bins_per_decade),
        log10_low=math.log10(low_s),
    )


GUESSED_BINS = 384  # durations from which ``bins_of`` guesses (fewer: a binary search each)


def bins_of(grid: BinGrid, durations_s: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    """``np.searchsorted(grid.edges, durations_s, side="right")`` of durations ``>= 0``: each
    bin guessed from the duration's logarithm (the edges are log-spaced), checked against the
    two edges around it and nudged; a duration still unresolved after two nudges is searched.
    The answer meets ``edges[b - 1] <= d < edges[b]``, which defines the searched one."""
    if len(durations_s) < GUESSED_BINS:
        return np.searchsorted(grid.edges, durations_s, side="right")
    edges = grid.padded_edges  # ``-inf``, the edges, nan: bin ``b`` lies in ``[b, b + 1)``
    num_edges = len(edges) - 2
    with np.errstate(divide="ignore"):  # a zero duration: ``-inf``, clipped to bin 0
        guess = (np.log10(durations_s) - grid.log10_low) * grid.bins_per_decade
    bins = np.clip(guess + 1.0, 0.0, float(num_edges)).astype(np.intp)
    for _ in range(2):
        low = durations_s < edges[bins]
        high = durations_s >= edges[bins + 1]
        if not (low.any() or high.any()):
            return bins
        bins += high
        bins -= low
    wrong = (durations_s < edges[bins]) | (durations_s >= edges[bins + 1])
    if wrong.any():
        bins[wrong] = np.searchsorted(grid.edges, durations_s[wrong], side="right")
    return bins


SEARCHED_BINS = 4096  # durations below which ``bins_within`` searches (more: ``bins_of``)


def bins_within(
    grid: BinGrid, durations_s: npt.NDArray[np.float64], low_s: float, high_s: float
) -> npt.NDArray[np.intp]:
    """``bins_of`` of durations whose extremes are ``low_s`` and ``high_s``: below
    ``SEARCHED_BINS`` of them, a search of the edges between the extremes' bins only (each
    count: the window's plus the edges below it), three calls where ``bins_of`` makes twenty."""
    if len(durations_s) >= SEARCHED_BINS:
        return bins_of(grid, durations_s)
    edges = grid.edges_list
    low, high = bisect_right(edges, low_s), bisect_right(edges, high_s)
    bins: npt.NDArray[np.intp] = grid.edges[low:high].searchsorted(durations_s, side="right")
    bins += low
    return bins


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
QUEUED_SERIES = 256  # crossing series queued before their bins are counted together
QUEUED_UPDATES = 256  # moment updates queued before they are applied


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


def count_series_in_order(counts: npt.NDArray[np.float64], grid: BinGrid, series: Series) -> None:
    """Add one series' bin counts to ``counts`` at once (any step sign, any weight): the bins
    ``add`` would pick for each of its terms (``_count_below`` per crossed edge)."""
    first_s, step_s, num_steps, weight, first_bin, last_bin = series
    low, high = min(first_bin, last_bin), max(first_bin, last_bin)
    if high - low <= SCALAR_EDGES:
        previous = 0
        edges = grid.edges_list[low:high]
        for offset, count in enumerate(
            [*_count_below_few(edges, first_s, step_s, num_steps), num_steps]
        ):
            counts[low + offset] += (count - previous) * weight
            previous = count
    else:
        below = _count_below(grid.edges[low:high], first_s, step_s, num_steps)
        bounds = np.concatenate(([0], below, [num_steps]))
        counts[low : high + 1] += np.diff(bounds).astype(np.float64) * weight


class ItlHistogram:
    """Weighted inter-token latencies: log-binned counts plus exact weight, mean and variance."""

    def __init__(self, grid: BinGrid | None = None) -> None:
        self.grid = grid if grid is not None else bin_grid()
        self._counts = np.zeros(self.grid.num_bins, dtype=np.float64)
        # Series whose bins are not counted yet (``metrics/series_bins.py``), queued while every
        # weight so far is an integer: the counts are then integer sums, exact in any order.
        self._queued: list[Series] = []
        self._integral = True
        # Moment updates not applied yet, in call order (``metrics/moments.py``): applied,
        # with the same float operations in the same order, before anything reads them.
        self._updates: list[Update] = []
        self._moments = Moments()

    @property
    def counts(self) -> npt.NDArray[np.float64]:
        """Weight per bin (the queued series' bins counted first)."""
        self._count_queued()
        return self._counts

    def _settled(self) -> Moments:
        """The moments with every queued update applied."""
        if self._updates:
            self._moments.apply(self._updates)
            self._updates.clear()
        return self._moments

    @property
    def total_weight(self) -> float:
        return self._settled().total_weight

    @property
    def min_s(self) -> float:
        return self._settled().min_s

    @property
    def max_s(self) -> float:
        return self._settled().max_s

    def _count_queued(self) -> None:
        if self._queued:
            add_series_counts(self._counts, self.grid.edges, self._queued)
            self._queued.clear()

    def _note_weight(self, weight: float) -> None:
        """A fractional weight ends queueing: counts are added in order from here on."""
        if self._integral and not is_integral(weight):
            self._count_queued()
            self._integral = False

    # ----- verbs -----------------------------------------------------------------------------

    def add(self, duration_s: float, weight: float = 1.0) -> None:
        """Record ``weight`` samples of one duration (e.g. one decode step seen by a batch)."""
        if not duration_s >= 0.0:
            raise ValueError(f"ITL duration must be >= 0, got {duration_s}")
        if weight <= 0.0:
            return
        self._note_weight(weight)
        self._counts[bisect_right(self.grid.edges_list, duration_s)] += weight  # bin_index
        self._queue_update((ONE, duration_s, weight))

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
        self._note_weight(weight)
        edges = self.grid.edges_list
        first_bin = bisect_right(edges, first_s)  # bin_index, inline (called every stretch)
        last_bin = bisect_right(edges, last_s)
        if first_bin == last_bin:
            self._counts[first_bin] += num_steps * weight
        elif self._integral and step_s > 0.0:  # counted with others (``counts``)
            self._queued.append((first_s, step_s, num_steps, weight, first_bin, last_bin))
            if len(self._queued) >= QUEUED_SERIES:
                self._count_queued()
        else:
            count_series_in_order(
                self._counts, self.grid, (first_s, step_s, num_steps, weight, first_bin, last_bin)
            )
        self._queue_update((ARITHMETIC, first_s, step_s, num_steps, weight, last_s))

    def add_series(self, series: list[tuple[float, float, int, float]]) -> None:
        """``add_arithmetic(first_s, step_s, num_steps, weight)`` of each entry, in order (a
        preemption chain's segments, ``engine/chain.py``: one call per chain)."""
        for first_s, step_s, num_steps, weight in series:
            self.add_arithmetic(first_s, step_s, num_steps, weight)

    def add_updates(self, updates: list[Update]) -> None:
        """``add_arithmetic`` of each ``(ARITHMETIC, first, step, num_steps, weight, last)``
        update, in order: a preemption chain's segments (``engine/chainlinks.py``), made and
        checked as ``add_arithmetic`` makes them (``num_steps``, ``weight`` > 0)."""
        for _, first_s, step_s, num_steps, weight, _ in updates:
            self.add_arithmetic(first_s, step_s, int(num_steps), weight)

    def add_many(self, durations_s: npt.NDArray[np.float64], weight: float = 1.0) -> None:
        """Record ``weight`` samples of each duration (vectorised; bins as ``add`` would pick
        them)."""
        many = self._many(durations_s, weight)
        if many is not None:
            self._count_many(many[1], weight)
            self._queue_update(many[0])

    def _many(
        self, durations_s: npt.NDArray[np.float64], weight: float
    ) -> tuple[Update, npt.NDArray[np.intp]] | None:
        """``add_many``'s moment update and the durations' bins (None: no durations)."""
        values = np.asarray(durations_s, dtype=np.float64)
        if values.size == 0:
            return None
        if values.size < FEW_DURATIONS and values.ndim == 1:  # in Python floats: the same
            few = few_update(values.tolist(), weight, self.grid.edges_list)
            if few is not None:
                return few
        low_s = float(np.minimum.reduce(values))  # ``values.min()``
        if not low_s >= 0.0:  # a nan too, as ``np.all(values >= 0.0)``
            raise ValueError("ITL durations must be >= 0")
        high_s = float(np.maximum.reduce(values))
        # ``values.mean()``: numpy's own sum (pairwise) over the count, the same division
        mean_s = float(np.add.reduce(values)) / values.size
        m2_s2 = float(np.add.reduce((values - mean_s) ** 2)) * weight
        update = (
            MANY,
            low_s,
            high_s,
            exact_sum(values, low_s, high_s) * weight,
            float(values.size) * weight,
            mean_s,
            m2_s2,
        )
        return update, bins_within(self.grid, values, low_s, high_s)

    def _count_many(self, bins: npt.NDArray[np.intp], weight: float) -> None:
        """``add_many``'s counts: ``weight`` per duration in its bin."""
        self._note_weight(weight)
        self._counts += np.bincount(bins, minlength=self.grid.num_bins).astype(np.float64) * weight

    def _queue_update(self, update: Update) -> None:
        updates = self._updates
        updates.append(update)
        if len(updates) >= QUEUED_UPDATES:
            self._settled()

    def apply_update_rows(self, rows: npt.NDArray[np.float64]) -> None:
        """Apply moment updates made elsewhere, packed as rows (``metrics/moment_rows.py``),
        in order, as if this histogram's adds had made them (``metrics/itl_log.py``: replicas
        simulated apart)."""
        apply_rows(self._settled(), rows)

    def merge(self, other: ItlHistogram) -> None:
        """Fold ``other`` into this histogram (e.g. per-replica histograms into a cluster one)."""
        if other.grid is not self.grid and other.grid.edges_list != self.grid.edges_list:
            raise ValueError("cannot merge ITL histograms with different bin grids")
        if other.total_weight == 0.0:
            return
        if not other._integral:  # its counts may be fractional: add in order from here on
            self._note_weight(math.nan)
        self._counts += other.counts
        self._settled().merge(other._settled())

    def scaled(self, factor: float) -> ItlHistogram:
        """A copy whose every sample weighs ``factor`` (> 0) times as much: the same
        distribution, ``factor`` times the weight (``plan/chat_stream.py`` takes samples out
        in proportion)."""
        if not factor > 0.0:
            raise ValueError(f"factor must be positive, got {factor}")
        out = ItlHistogram(self.grid)
        out._counts = self.counts * factor
        out._integral = False
        m = self._settled()
        out._moments = replace(
            m,
            total_weight=m.total_weight * factor,
            sum_s=m.sum_s * factor,
            sum_hi_s=m.sum_hi_s * factor,
            sum_error_s=m.sum_error_s * factor,
            m2_s2=m.m2_s2 * factor,
        )
        return out

    # ----- readings --------------------------------------------------------------------------

    @property
    def sum_s(self) -> float:
        """Weighted sum of all durations."""
        return self._settled().sum_s

    def mean(self) -> float:
        """Exact weighted mean (``nan`` when empty)."""
        return self.sum_s / self.total_weight if self.total_weight > 0.0 else math.nan

    def std(self) -> float:
        """Exact weighted population standard deviation, like ``np.std`` (``nan`` when empty)."""
        moments = self._settled()
        if moments.total_weight <= 0.0:
            return math.nan
        return math.sqrt(max(moments.m2_s2, 0.0) / moments.total_weight)

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
