"""The ITL histogram's exact moments: total weight, compensated sum, Welford mean and M2, range.

``ItlHistogram`` (``metrics/histogram.py``) queues each add as a small tuple and applies the
queue here when something reads the moments (or the queue is long): the fast engine adds a
series every stretch and a duration every admission step, and one loop over a queue costs less
than a method call per add. The updates are applied in the order of the adds, each with the
float operations the histogram used to run at once, so every moment is the same float:

- ``ONE``: ``weight`` samples of one duration (Welford's weighted update);
- ``ARITHMETIC``: ``weight`` samples of each ``first + i * step``, ``i < n`` (the series' mean
  and squared deviations ``step**2 * n * (n**2 - 1) / 12`` in closed form, merged with Chan,
  Golub and LeVeque's parallel update);
- ``MANY``: a batch of durations' range, weighted sum, weight, mean and M2 (computed at the
  add), merged the same way.

Sums are Neumaier-compensated, so the mean stays exact to ~1 ulp however long the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ONE, ARITHMETIC, MANY = 0, 1, 2
# (ONE, duration, weight) | (ARITHMETIC, first, step, n, weight, last)
# | (MANY, min, max, weighted sum, weight, mean, m2)
Update = tuple[float, ...]


@dataclass
class Moments:
    total_weight: float = 0.0
    sum_s: float = 0.0  # the compensated sum: ``sum_hi_s + sum_error_s``, read after ``apply``
    sum_hi_s: float = 0.0
    sum_error_s: float = 0.0
    mean_s: float = 0.0  # Welford running mean, used only to update ``m2_s2``
    m2_s2: float = 0.0  # sum of weight * (d - mean)^2
    min_s: float = math.inf
    max_s: float = -math.inf

    def apply(self, updates: list[Update]) -> None:
        """Apply queued updates in order (the module docstring)."""
        tw, hi, err = self.total_weight, self.sum_hi_s, self.sum_error_s
        mean, m2, low, high = self.mean_s, self.m2_s2, self.min_s, self.max_s
        for update in updates:
            kind = update[0]
            if kind == ONE:
                _, duration, weight = update
                low = duration if duration < low else low
                high = duration if duration > high else high
                value = duration * weight
                total = tw + weight
                if tw == 0.0:  # the first sample sets the mean exactly
                    mean = duration
                else:
                    delta = duration - mean
                    mean += delta * (weight / total)
                    m2 += weight * delta * (duration - mean)
                tw = total
            else:
                if kind == ARITHMETIC:
                    _, first, step, num, weight, last = update
                    low, high = min(low, first, last), max(high, first, last)
                    n = float(num)
                    part_mean = first + step * (n - 1.0) / 2.0
                    part_m2 = weight * step * step * n * (n * n - 1.0) / 12.0
                    part_weight = n * weight
                    value = part_mean * part_weight
                else:
                    _, batch_low, batch_high, value, part_weight, part_mean, part_m2 = update
                    low, high = min(low, batch_low), max(high, batch_high)
                if tw == 0.0:
                    tw, mean, m2 = part_weight, part_mean, part_m2
                else:
                    total = tw + part_weight
                    delta = part_mean - mean
                    mean += delta * (part_weight / total)
                    m2 += part_m2 + delta * delta * tw * part_weight / total
                    tw = total
            # Neumaier's compensated summation of ``value``.
            total_s = hi + value
            if abs(hi) >= abs(value):
                err += (hi - total_s) + value
            else:
                err += (value - total_s) + hi
            hi = total_s
        self.total_weight, self.sum_hi_s, self.sum_error_s = tw, hi, err
        self.mean_s, self.m2_s2, self.min_s, self.max_s = mean, m2, low, high
        self.sum_s = hi + err

    def merge(self, other: Moments) -> None:
        """Fold another histogram's (settled) moments into these."""
        self.min_s = min(self.min_s, other.min_s)
        self.max_s = max(self.max_s, other.max_s)
        for value in (other.sum_hi_s, other.sum_error_s):
            total_s = self.sum_hi_s + value
            if abs(self.sum_hi_s) >= abs(value):
                self.sum_error_s += (self.sum_hi_s - total_s) + value
            else:
                self.sum_error_s += (value - total_s) + self.sum_hi_s
            self.sum_hi_s = total_s
        self.sum_s = self.sum_hi_s + self.sum_error_s
        if self.total_weight == 0.0:
            self.total_weight, self.mean_s, self.m2_s2 = (
                other.total_weight,
                other.mean_s,
                other.m2_s2,
            )
            return
        total = self.total_weight + other.total_weight
        delta = other.mean_s - self.mean_s
        self.mean_s += delta * (other.total_weight / total)
        self.m2_s2 += other.m2_s2 + delta * delta * self.total_weight * other.total_weight / total
        self.total_weight = total
