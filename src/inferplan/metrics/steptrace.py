"""KV-cache occupancy over time, with memory bounded however long the run.

``StepTrace`` owns the time-weighted KV usage of one pool of blocks (one replica, or a cluster
summed by its caller). The engine calls ``record(now_s, used_blocks)`` whenever usage may have
changed (every step in exact mode, every event in fast mode); the value holds until the next
call, i.e. usage is a step function of time. From that it keeps, in bounded memory and O(1)
amortised time per call:

- the exact time-weighted mean and the maximum of ``used_blocks / total_blocks``;
- a downsampled series for plots of at most ``max_points`` segments. Raw segments are merged
  pairwise (time-weighted mean, max of maxima) whenever the buffer reaches twice the cap, so the
  series stays evenly downsampled in *record count* and each point keeps its segment's peak.

The mean covers ``[first record, end]``, where ``end`` is ``summary(end_s)``'s argument or the last
record. Fragmentation and other per-step gauges are not tracked here (yet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KvUsageSummary:
    """Fractions of the KV blocks in use: time-weighted mean, maximum, and a plot series.

    ``series_time_s[j]`` starts segment ``j``; ``series_mean[j]`` / ``series_max[j]`` are the
    time-weighted mean and the peak usage fraction over that segment.
    """

    mean: float
    max: float
    series_time_s: tuple[float, ...]
    series_mean: tuple[float, ...]
    series_max: tuple[float, ...]


class StepTrace:
    """Time-weighted KV block usage of a pool of ``total_blocks`` blocks."""

    def __init__(self, total_blocks: int, *, max_points: int = 500) -> None:
        if total_blocks <= 0:
            raise ValueError(f"total_blocks must be positive, got {total_blocks}")
        if max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {max_points}")
        self.total_blocks = total_blocks
        self.max_points = max_points
        self.num_records = 0
        self._last_s = math.nan
        self._last_blocks = 0
        self._max_blocks = 0
        self._area_block_s = 0.0  # integral of used blocks over closed segments
        self._start_s = math.nan
        # Closed segments: start time, end time, integral of used blocks, peak used blocks.
        self._seg_start_s: list[float] = []
        self._seg_end_s: list[float] = []
        self._seg_area_block_s: list[float] = []
        self._seg_peak_blocks: list[int] = []

    def __reduce__(self) -> tuple[object, ...]:
        # ``engine/apart.py``'s workers send traces back; compiled with mypyc (``native.py``),
        # an instance unpickles only through its constructor, then takes its state.
        return (type(self), (self.total_blocks,), self.__getstate__())

    def record(self, now_s: float, used_blocks: int) -> None:
        """From ``now_s`` on, ``used_blocks`` blocks are in use. Time must not go backwards."""
        if self.num_records == 0:
            self._start_s = now_s
        else:
            last_s = self._last_s
            if now_s < last_s:
                raise ValueError(f"StepTrace: time went backwards ({now_s} < {last_s})")
            # Close the segment that started at the last record.
            last_blocks = self._last_blocks
            area = last_blocks * (now_s - last_s)
            self._area_block_s += area
            self._seg_start_s.append(last_s)
            self._seg_end_s.append(now_s)
            self._seg_area_block_s.append(area)
            self._seg_peak_blocks.append(last_blocks)
            if len(self._seg_start_s) >= 2 * self.max_points:
                self._halve()
        self._last_s = now_s
        self._last_blocks = used_blocks
        if used_blocks > self._max_blocks:
            self._max_blocks = used_blocks
        self.num_records += 1

    def record_each(self, times_s: list[float], used_blocks: list[int]) -> None:
        """``record`` of each ``(times_s[i], used_blocks[i])`` in order (a preemption chain's
        few records, ``engine/chain.py``: one call per chain)."""
        for now_s, blocks in zip(times_s, used_blocks, strict=True):
            self.record(now_s, blocks)

    def record_many(self, times_s: np.ndarray, used_blocks: np.ndarray) -> None:
        """``record`` of each ``(times_s[i], used_blocks[i])`` in order, in one call: the same
        state and the same floats (each segment's area is the same product, the running area
        a sequential sum, ``np.add.accumulate``; the buffer halves where ``record`` would)."""
        if len(times_s) and self.num_records == 0:
            self.record(float(times_s[0]), int(used_blocks[0]))
            times_s, used_blocks = times_s[1:], used_blocks[1:]
        if not len(times_s):
            return
        starts = np.concatenate(([self._last_s], times_s[:-1]))
        if bool((times_s < starts).any()):
            raise ValueError("StepTrace: time went backwards")
        peaks = np.concatenate(([self._last_blocks], used_blocks[:-1])).astype(np.int64)
        areas = peaks * (times_s - starts)
        self._area_block_s = float(
            np.add.accumulate(np.concatenate(([self._area_block_s], areas)))[-1]
        )
        if len(times_s) >= 2 * self.max_points:  # several halvings: in arrays
            self._extend_halving(starts, times_s, areas, peaks)
        else:
            self._extend(starts.tolist(), times_s.tolist(), areas.tolist(), peaks.tolist())
        self._last_s = float(times_s[-1])
        self._last_blocks = int(used_blocks[-1])
        self._max_blocks = max(self._max_blocks, int(used_blocks.max()))
        self.num_records += len(times_s)

    def _extend(
        self,
        start_list: list[float],
        end_list: list[float],
        area_list: list[float],
        peak_list: list[int],
    ) -> None:
        """Append closed segments, halving the buffer wherever ``record`` would."""
        done = 0
        while done < len(start_list):
            end = done + 2 * self.max_points - len(self._seg_start_s)
            self._seg_start_s.extend(start_list[done:end])
            self._seg_end_s.extend(end_list[done:end])
            self._seg_area_block_s.extend(area_list[done:end])
            self._seg_peak_blocks.extend(peak_list[done:end])
            done = end
            if len(self._seg_start_s) >= 2 * self.max_points:
                self._halve()

    def _extend_halving(
        self, starts: np.ndarray, ends: np.ndarray, areas: np.ndarray, peaks: np.ndarray
    ) -> None:
        """``_extend`` of many segments with the buffer kept in arrays between its halvings:
        each halving merges the same pairs with the same one addition (``_pairwise``). Only
        the areas are merged halving by halving (a sum's floats depend on its pairs); each
        merged segment is a run of the buffer's and the new segments, whose first is tracked
        (``first``), so its start, end and peak are read once at the end: the run's first
        start and last end (``_pairwise``'s picks) and its peak (a maximum of integers, the
        same in any grouping)."""
        full = 2 * self.max_points
        num_old = len(self._seg_start_s)
        start = np.concatenate((np.asarray(self._seg_start_s, dtype=np.float64), starts))
        stop = np.concatenate((np.asarray(self._seg_end_s, dtype=np.float64), ends))
        peak = np.concatenate((np.asarray(self._seg_peak_blocks, dtype=np.int64), peaks))
        area = np.asarray(self._seg_area_block_s, dtype=np.float64)
        index = np.arange(len(start))  # each buffer entry's first segment in ``start``
        first = index[:num_old]
        done, total = 0, len(starts)
        while done < total:
            end = done + full - len(area)
            area = np.concatenate((area, areas[done:end]))
            first = np.concatenate((first, index[num_old + done : num_old + end]))
            done = end
            if len(area) >= full:  # ``_pairwise`` of an even count
                area = area[0::2] + area[1::2]
                first = first[0::2]
        last = np.empty_like(first)  # each entry's last segment: before the next one's first
        last[:-1] = first[1:] - 1
        last[-1] = len(start) - 1
        self._seg_start_s, self._seg_end_s = start[first].tolist(), stop[last].tolist()
        self._seg_area_block_s = area.tolist()
        self._seg_peak_blocks = np.maximum.reduceat(peak, first).tolist()

    def _halve(self) -> None:
        merged = _pairwise(
            self._seg_start_s, self._seg_end_s, self._seg_area_block_s, self._seg_peak_blocks
        )
        self._seg_start_s, self._seg_end_s, self._seg_area_block_s, self._seg_peak_blocks = merged

    def summary(self, end_s: float | None = None) -> KvUsageSummary | None:
        """Usage up to ``end_s`` (default: the last record); ``None`` if nothing was recorded."""
        if self.num_records == 0:
            return None
        end = self._last_s if end_s is None else max(end_s, self._last_s)
        starts, ends = list(self._seg_start_s), list(self._seg_end_s)
        areas, peaks = list(self._seg_area_block_s), list(self._seg_peak_blocks)
        tail_area = self._last_blocks * (end - self._last_s)
        starts.append(self._last_s)
        ends.append(end)
        areas.append(tail_area)
        peaks.append(self._last_blocks)
        while len(starts) > self.max_points:
            starts, ends, areas, peaks = _pairwise(starts, ends, areas, peaks)
        total = float(self.total_blocks)
        span_s = end - self._start_s
        if span_s > 0.0:
            mean_blocks = (self._area_block_s + tail_area) / span_s
        else:
            mean_blocks = float(self._last_blocks)
        series_mean = [
            (a / (e - s) if e > s else float(p)) / total
            for s, e, a, p in zip(starts, ends, areas, peaks, strict=True)
        ]
        return KvUsageSummary(
            mean=mean_blocks / total,
            max=self._max_blocks / total,
            series_time_s=tuple(starts),
            series_mean=tuple(series_mean),
            series_max=tuple(p / total for p in peaks),
        )


def _pairwise(
    starts: list[float], ends: list[float], areas: list[float], peaks: list[int]
) -> tuple[list[float], list[float], list[float], list[int]]:
    """Merge neighbouring segments two by two (the last one alone if the count is odd), in
    numpy: each pair's area is the same one addition (areas are >= 0, so ``sum``'s start at
    0 changes no bit), its peak the same maximum."""
    count = len(starts)
    if count < 2:
        return list(starts), list(ends), [0 + a for a in areas], list(peaks)
    pairs = count // 2
    area, peak = np.asarray(areas), np.asarray(peaks, dtype=np.int64)
    merged_areas = area[0 : 2 * pairs : 2] + area[1 : 2 * pairs : 2]
    merged_peaks = np.maximum(peak[0 : 2 * pairs : 2], peak[1 : 2 * pairs : 2])
    merged_ends = ends[1::2]
    if count % 2:  # the last segment alone
        merged_areas = np.append(merged_areas, 0 + areas[-1])
        merged_peaks = np.append(merged_peaks, peaks[-1])
        merged_ends.append(ends[-1])
    return starts[::2], merged_ends, merged_areas.tolist(), merged_peaks.tolist()


def combine_usage(summaries: list[KvUsageSummary]) -> KvUsageSummary | None:
    """Several equal replicas' KV usage as one fleet: ``mean`` is the average of their
    time-weighted means (equal pools, so the fleet's used fraction); ``max`` and the series'
    maxima are the busiest replica's (a replica runs out alone, not the fleet). The series is on
    the union of the replicas' segment starts, each replica read at the segment it is in."""
    if not summaries:
        return None
    if len(summaries) == 1:
        return summaries[0]
    grid = np.unique(np.concatenate([np.asarray(s.series_time_s) for s in summaries]))
    means, maxima = [], []
    for s in summaries:
        starts = np.asarray(s.series_time_s)
        index = np.clip(np.searchsorted(starts, grid, side="right") - 1, 0, len(starts) - 1)
        means.append(np.asarray(s.series_mean)[index])
        maxima.append(np.asarray(s.series_max)[index])
    return KvUsageSummary(
        mean=float(np.mean([s.mean for s in summaries])),
        max=float(max(s.max for s in summaries)),
        series_time_s=tuple(grid.tolist()),
        series_mean=tuple(np.mean(means, axis=0).tolist()),
        series_max=tuple(np.max(maxima, axis=0).tolist()),
    )
