"""The step-time model's caches: plain dicts that start over when full.

The roofline's pieces (``perf/roofline.py``), the attention core's (``perf/attention_pieces.py``)
and the step plans (``perf/step_seconds.py``) are cached under the batch shapes a run meets. A
long run above capacity meets new shapes until its end, so each cache is bounded: a new entry
into a full cache clears it first. Clearing costs only recomputation (every entry is a pure
function of its key), and keeps the look-up a plain ``dict.get``, the hot path's cost; the
entries a run still needs come back as it meets their shapes again.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def keep(cache: dict[K, V], key: K, value: V, limit: int) -> V:
    """``value``, stored in ``cache`` under ``key``; a ``cache`` that already holds ``limit``
    entries is cleared first."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value
