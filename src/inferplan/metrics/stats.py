"""Small statistics helpers shared by the summaries, and the JSON number convention.

Owns two formats:

- vLLM's ``--save-result`` statistic keys: ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and
  ``p<NN>_<m>_ms``, with ``NN`` written as vLLM writes it (``str(int(p))`` when ``p`` is whole,
  else ``str(p)``: 99 -> "p99", 99.9 -> "p99.9"). Values are numpy's: ``np.mean``, ``np.median``,
  population ``np.std`` and ``np.percentile`` (linear interpolation), of seconds, times 1000
  (``vllm-0.11.0:vllm/benchmarks/serve.py``, ``calculate_metrics``).
- inferplan's spread ``{"mean", "p50", "p90", "p99"}`` in seconds (inferplan's JSON convention).

Where vLLM reports 0 for a statistic of no samples, inferplan reports ``None``: every number that
leaves this package goes through ``json_number``, which maps NaN and infinities to ``None`` so
``json.dumps(..., allow_nan=False)`` always succeeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from inferplan.metrics.histogram import ItlHistogram

MS_PER_S = 1000.0
SPREAD_PERCENTILES = (50.0, 90.0, 99.0)


def json_number(value: float | np.floating | None) -> float | None:
    """A plain float, or ``None`` for missing, NaN or infinite values."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or ``None`` when the denominator is not positive."""
    return json_number(numerator / denominator) if denominator > 0 else None


def percentile_label(percentile: float) -> str:
    """vLLM's spelling of a percentile in a key: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(percentile)) if int(percentile) == percentile else str(percentile)


def vllm_stats(
    metric: str, values_s: npt.NDArray[np.float64], percentiles: Sequence[float]
) -> dict[str, float | None]:
    """vLLM's statistic keys for per-request values in seconds (``None`` for no samples)."""
    keys = _vllm_keys(metric, percentiles)
    if len(values_s) == 0:
        return dict.fromkeys(keys)
    numbers = [
        np.mean(values_s),
        np.median(values_s),
        np.std(values_s),
        *(np.percentile(values_s, p) for p in percentiles),
    ]
    return {key: json_number(value * MS_PER_S) for key, value in zip(keys, numbers, strict=True)}


def histogram_stats(
    metric: str, histogram: ItlHistogram, percentiles: Sequence[float]
) -> dict[str, float | None]:
    """vLLM's statistic keys from a binned histogram (exact mean and std, binned quantiles)."""
    keys = _vllm_keys(metric, percentiles)
    fractions = [0.5, *(p / 100.0 for p in percentiles)]
    quantiles = histogram.quantiles(fractions)
    numbers = [histogram.mean(), quantiles[0], histogram.std(), *quantiles[1:]]
    return {key: json_number(value * MS_PER_S) for key, value in zip(keys, numbers, strict=True)}


def _vllm_keys(metric: str, percentiles: Sequence[float]) -> list[str]:
    return [
        f"mean_{metric}_ms",
        f"median_{metric}_ms",
        f"std_{metric}_ms",
        *(f"p{percentile_label(p)}_{metric}_ms" for p in percentiles),
    ]


def spread(values_s: npt.NDArray[np.float64]) -> dict[str, float | None]:
    """``{"mean", "p50", "p90", "p99"}`` of values in seconds; all ``None`` for no samples."""
    keys = ["mean", *(f"p{percentile_label(p)}" for p in SPREAD_PERCENTILES)]
    if len(values_s) == 0:
        return dict.fromkeys(keys)
    numbers = [np.mean(values_s), *np.percentile(values_s, SPREAD_PERCENTILES)]
    return {key: json_number(value) for key, value in zip(keys, numbers, strict=True)}
