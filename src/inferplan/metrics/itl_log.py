"""One replica's ITL adds, kept in order so that a run's histogram can be rebuilt exactly.

``ItlHistogram``'s bin counts are integer sums while every weight is an integer (the engine
adds one sample per running row per step), so they add up to the same floats in any order;
its moments are a fold of the updates in call order (``metrics/moments.py``), which floats make
order dependent in the last bits. Replicas simulated apart (``engine/apart.py``) each write an
``ItlLog``: every moment update kept, never applied, as rows of a float array
(``metrics/moment_rows.py``: packed every ``CHUNK`` updates, so a million requests' logs take
tens of MB, not hundreds, and pickle as arrays). ``replay_into`` then adds the counts to the
run's histogram and folds the rows into it in the order the interleaved event loop would have
made them, so mean and standard deviation are the same floats as the interleaved run's.

An add costs one tuple appended: a single duration's and a series' bins are counted a chunk at
a time when the chunk is packed (``np.searchsorted`` over the edges compares the same floats as
``add``'s ``bisect_right``; crossing series as ``series_bins.add_series_counts`` counts the
histogram's own queue), and whether every weight was an integer is asked of the chunk's weight
column. Where one was not, the counts are not exact in another order: ``is_integral`` says so
and the run falls back to the interleaved one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from inferplan.metrics.few_durations import FEW_DURATIONS
from inferplan.metrics.histogram import BinGrid, ItlHistogram, bins_of, count_series_in_order
from inferplan.metrics.many_batch import Kept, many_updates
from inferplan.metrics.moment_rows import WIDTH, apply_rows, pack
from inferplan.metrics.moments import ARITHMETIC, MANY, ONE, Moments, Update
from inferplan.metrics.series_bins import add_series_arrays, is_integral

# Where a kept ``add_many`` call's update and bins go until its batch makes them.
_KEPT: Update = (MANY, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)
_NO_BINS: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)

CHUNK = 1 << 16  # updates kept as tuples before they are packed into rows (and binned)
BATCH = 1 << 12  # ``ItlBatch``'s adds kept before they are counted and folded


class QueuedAdds(ItlHistogram):
    """``ItlHistogram`` whose single durations and series are kept as update tuples, in call
    order, and handed on ``limit`` at a time (``_flush``): ``ItlLog`` keeps them, ``ItlBatch``
    counts and folds them. The adds make the same checks as ``ItlHistogram``'s."""

    def __init__(self, grid: BinGrid | None = None, *, limit: int) -> None:
        super().__init__(grid)
        self._queue: list[Update] = []
        self._limit = limit

    def _flush(self) -> None:
        raise NotImplementedError

    def add(self, duration_s: float, weight: float = 1.0) -> None:
        """``ItlHistogram.add``: the same checks; counted when its queue is handed on."""
        if not duration_s >= 0.0:
            raise ValueError(f"ITL duration must be >= 0, got {duration_s}")
        if weight <= 0.0:
            return
        queue = self._queue
        queue.append((ONE, duration_s, weight))
        if len(queue) >= self._limit:
            self._flush()

    def add_arithmetic(
        self, first_s: float, step_s: float, num_steps: int, weight: float = 1.0
    ) -> None:
        """``ItlHistogram.add_arithmetic``: the same checks; counted when its queue is handed
        on."""
        if num_steps <= 0 or weight <= 0.0:
            return
        last_s = first_s + (num_steps - 1) * step_s
        if not (first_s >= 0.0 and last_s >= 0.0):
            raise ValueError(f"ITL durations must be >= 0, got {first_s} .. {last_s}")
        queue = self._queue
        queue.append((ARITHMETIC, first_s, step_s, num_steps, weight, last_s))
        if len(queue) >= self._limit:
            self._flush()

    def add_series(self, series: list[tuple[float, float, int, float]]) -> None:
        """``add_arithmetic`` of each entry, in order, in one call (a chain's segments): the
        same checks, the same tuples queued."""
        queue = self._queue
        for first_s, step_s, num_steps, weight in series:
            if num_steps <= 0 or weight <= 0.0:
                continue
            last_s = first_s + (num_steps - 1) * step_s
            if not (first_s >= 0.0 and last_s >= 0.0):
                raise ValueError(f"ITL durations must be >= 0, got {first_s} .. {last_s}")
            queue.append((ARITHMETIC, first_s, step_s, num_steps, weight, last_s))
        if len(queue) >= self._limit:
            self._flush()

    def add_updates(self, updates: list[Update]) -> None:
        """``ItlHistogram.add_updates``: the updates as ``add_arithmetic`` queues them, their
        caller having made its checks (``num_steps``, ``weight`` > 0, durations >= 0)."""
        queue = self._queue
        queue.extend(updates)
        if len(queue) >= self._limit:
            self._flush()


class ItlLog(QueuedAdds):
    """An ITL histogram whose moment updates are kept, in order, instead of applied."""

    def __init__(self) -> None:
        super().__init__(limit=CHUNK)
        self._packed: list[npt.NDArray[np.float64]] = []
        self._num_packed = 0

    def _flush(self) -> None:
        self._pack()

    def _queue_update(self, update: Update) -> None:  # ``add_many``'s (binned at its call)
        self._queue.append(update)
        if len(self._queue) >= CHUNK:
            self._pack()

    def _pack(self) -> None:
        if self._queue:
            rows = pack(self._queue)
            self._bin(rows)
            self._packed.append(rows)
            self._num_packed += len(self._queue)
            self._queue = []

    def _bin(self, rows: npt.NDArray[np.float64]) -> None:
        """Add the bins of the rows' single durations and series (``add_many``'s batches were
        binned at their call) to the counts; note a weight that is not an integer."""
        if not integral_rows(rows):
            self._integral = False  # the counts below are then not exact in another order
        bin_rows(self._counts, self.grid, rows)

    @property
    def counts(self) -> npt.NDArray[np.float64]:
        """Weight per bin (the pending updates binned first)."""
        self._pack()
        return super().counts

    @property
    def num_updates(self) -> int:
        """Updates kept so far."""
        return self._num_packed + len(self._queue)

    def rows(self) -> npt.NDArray[np.float64]:
        """Every update kept, in order, one row each (``moment_rows.pack``)."""
        self._pack()
        if not self._packed:
            return np.zeros((0, WIDTH), dtype=np.float64)
        if len(self._packed) > 1:
            self._packed = [np.concatenate(self._packed)]
        return self._packed[0]

    @property
    def is_integral(self) -> bool:
        """Every weight so far was an integer: the counts add exactly in any order."""
        self._pack()
        return self._integral


# Fewer adds than this are replayed through ``ItlHistogram``'s own adds when a batch is applied
# early (a series added whole, a merge, a reading): the arrays' fixed cost is about a hundred
# single adds' (``long10x``, where long decodes add whole series between a few single adds).
SMALL_BATCH = 64


class ItlBatch(QueuedAdds):
    """``ItlHistogram`` whose single durations and series are kept as tuples and counted and
    folded ``BATCH`` at a time (the simulator's own histogram): the same counts and the same
    moment floats as adding each at its call.

    While every weight is an integer the batch's bins are counted in whole arrays
    (``bin_rows``: integer sums, exact in any order) and its moments folded by
    ``moment_rows.apply_rows`` (the same float operations in the same order as
    ``Moments.apply``); a batch with another weight is replayed through ``ItlHistogram``'s own
    adds, in order, and so is a batch of fewer than ``SMALL_BATCH`` adds. Every other verb and
    every reading applies the batch first, so the adds keep their order among all the
    histogram's updates."""

    def __init__(self, grid: BinGrid | None = None) -> None:
        super().__init__(grid, limit=BATCH)
        self._many_bins: list[tuple[npt.NDArray[np.intp], float]] = []  # ``add_many``'s
        # ``add_many`` calls whose update and bins are made with the batch's others
        # (``many_batch.py``): each kept call, and where its update and bins go in the queue
        # and in ``_many_bins``.
        self._kept: list[Kept] = []
        self._kept_at: list[tuple[int, int]] = []

    def _flush(self) -> None:
        self.apply_batch()

    def _make_kept(self) -> None:
        """The kept ``add_many`` calls' updates and bins, in their places."""
        queue, many_bins = self._queue, self._many_bins
        made = many_updates(self._kept, self.grid)
        for (update, bins), (at, bins_at), (_, weight, _, _) in zip(
            made, self._kept_at, self._kept, strict=True
        ):
            queue[at] = update
            many_bins[bins_at] = (bins, weight)
        self._kept, self._kept_at = [], []

    def apply_batch(self) -> None:
        """Count and fold the adds kept so far, after every update made before them."""
        batch = self._queue
        if not batch:
            return
        if self._kept:
            self._make_kept()
        self._queue = []
        many, self._many_bins = self._many_bins, []
        many.reverse()  # popped in order by the replay below
        if len(batch) >= SMALL_BATCH and self._integral:
            rows = pack(batch)
            if integral_rows(rows) and all(is_integral(weight) for _, weight in many):
                bin_rows(self._counts, self.grid, rows)
                count_bins(self._counts, many)  # integer sums: exact in any order
                apply_rows(ItlHistogram._settled(self), rows)
                return
        for update in batch:  # in order, through the histogram's own adds
            if update[0] == ONE:
                ItlHistogram.add(self, update[1], update[2])
            elif update[0] == ARITHMETIC:
                _, first_s, step_s, num_steps, weight, _ = update
                ItlHistogram.add_arithmetic(self, first_s, step_s, int(num_steps), weight)
            else:  # ``add_many``'s, its counts then its moments
                self._count_many(*many.pop())
                ItlHistogram._queue_update(self, update)

    @property
    def counts(self) -> npt.NDArray[np.float64]:
        self.apply_batch()
        return super().counts

    def _settled(self) -> Moments:
        self.apply_batch()
        return super()._settled()

    def add_many(self, durations_s: npt.NDArray[np.float64], weight: float = 1.0) -> None:
        """``ItlHistogram.add_many``: the same checks; its moment update joins the batch in
        order, its bins kept beside it until the batch is applied. An array of at least
        ``FEW_DURATIONS`` positive finite values is kept as it is (the caller must not change
        it) and its update made with the batch's others (``many_batch.py``: the same
        floats)."""
        values = np.asarray(durations_s, dtype=np.float64)
        queue = self._queue
        if values.ndim == 1 and values.size >= FEW_DURATIONS:
            low_s = float(np.minimum.reduce(values))  # ``_many``'s check, at the call
            if not low_s >= 0.0:
                raise ValueError("ITL durations must be >= 0")
            high_s = float(np.maximum.reduce(values))
            if low_s > 0.0 and high_s < math.inf:  # made with the batch (``_make_kept``)
                self._kept.append((values, weight, low_s, high_s))
                self._kept_at.append((len(queue), len(self._many_bins)))
                queue.append(_KEPT)
                self._many_bins.append((_NO_BINS, weight))
                if len(queue) >= BATCH:
                    self.apply_batch()
                return
        many = self._many(values, weight)
        if many is not None:
            queue.append(many[0])
            self._many_bins.append((many[1], weight))
            if len(queue) >= BATCH:
                self.apply_batch()

    def merge(self, other: ItlHistogram) -> None:
        self.apply_batch()
        super().merge(other)


def integral_rows(rows: npt.NDArray[np.float64]) -> bool:
    """Whether every single duration's and series' weight among ``rows`` is an integer."""
    kind = rows[:, 0]
    weights = np.where(kind == ONE, rows[:, 2], rows[:, 4])[kind != MANY]
    return bool(np.all(np.isfinite(weights) & (weights == np.floor(weights))))


def count_bins(
    counts: npt.NDArray[np.float64], many: list[tuple[npt.NDArray[np.intp], float]]
) -> None:
    """Add each ``(bins, weight)``'s ``weight`` per entry of ``bins`` to ``counts`` in one
    ``np.bincount`` (the batch's ``add_many`` calls; integer weights: the per-bin sums are
    integers, the same floats as one ``ItlHistogram._count_many`` per call)."""
    if not many:
        return
    if len(many) == 1:
        bins = many[0][0]
        weights = np.full(len(bins), many[0][1], dtype=np.float64)
    else:
        bins = np.concatenate([b for b, _ in many])
        lengths = [len(b) for b, _ in many]
        weights = np.repeat(np.array([w for _, w in many], dtype=np.float64), lengths)
    counts += np.bincount(bins, weights=weights, minlength=len(counts))


def bin_rows(counts: npt.NDArray[np.float64], grid: BinGrid, rows: npt.NDArray[np.float64]) -> None:
    """Add the bins of the rows' single durations and series to ``counts``, as ``add`` and
    ``add_arithmetic`` pick them (``np.searchsorted`` compares the same floats as their
    ``bisect_right``); exact in any order while every weight is an integer."""
    kind, edges = rows[:, 0], grid.edges
    one, series = rows[kind == ONE], rows[kind == ARITHMETIC]
    bins = bins_of(grid, one[:, 1])
    counts += np.bincount(bins, weights=one[:, 2], minlength=len(counts))
    first, step, num, weight, last = (series[:, i] for i in range(1, 6))
    first_bin = bins_of(grid, first)
    last_bin = bins_of(grid, last)
    same = first_bin == last_bin
    counts += np.bincount(first_bin[same], weights=num[same] * weight[same], minlength=len(counts))
    rising = ~same & (step > 0.0)
    add_series_arrays(
        counts, edges, first[rising], step[rising], num[rising].astype(np.int64),
        weight[rising], first_bin[rising], last_bin[rising],
    )  # fmt: skip
    for j in np.flatnonzero(~same & ~rising).tolist():  # falling series: rare, one by one
        count_series_in_order(
            counts,
            grid,
            (
                float(first[j]), float(step[j]), int(num[j]), float(weight[j]),
                int(first_bin[j]), int(last_bin[j]),
            ),
        )  # fmt: skip


def replay_into(
    hist: ItlHistogram,
    counts: npt.NDArray[np.float64],
    blocks: Iterable[npt.NDArray[np.float64]],
) -> None:
    """Add ``counts`` (integral) to ``hist``'s bins and fold the blocks of update rows in
    order, as if every add had been made on ``hist`` itself."""
    hist.counts[:] += counts
    for rows in blocks:
        hist.apply_update_rows(rows)
