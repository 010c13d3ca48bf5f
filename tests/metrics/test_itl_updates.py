"""``add_updates``: a preemption chain's segments handed over as the update tuples
``add_arithmetic`` makes (``engine/chainlinks.py``): the same counts and moment floats as
``add_arithmetic`` of each, in order, in the histogram, the batch and the log."""

from __future__ import annotations

import random
from dataclasses import astuple

import numpy as np
import pytest

from inferplan.metrics import itl_log
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.itl_log import ItlBatch, ItlLog, replay_into
from inferplan.metrics.moments import ARITHMETIC


def _segments(seed: int, num: int) -> list[tuple[float, float, int, float]]:
    """Series as a chain makes them: rising steps over 1 to 300 terms, integer weights."""
    rng = random.Random(seed)
    out = []
    for _ in range(num):
        step = rng.choice([0.0, 1e-7, 4e-6, 4e-4])
        out.append((rng.uniform(2e-3, 0.05), step, rng.randint(1, 300), float(rng.randint(1, 64))))
    return out


@pytest.mark.parametrize("cls", [ItlHistogram, ItlLog, ItlBatch])
def test_updates_in_groups_equal_series_one_at_a_time(
    cls: type[ItlHistogram], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of 1-14 updates between single adds, crossing ``BATCH`` and ``CHUNK``."""
    monkeypatch.setattr(itl_log, "BATCH", 97)
    monkeypatch.setattr(itl_log, "CHUNK", 89)
    segments = _segments(5, 1200)
    hist, grouped = ItlHistogram(), cls()
    rng = random.Random(9)
    at = num_singles = 0
    while at < len(segments):
        size = rng.randint(1, 14)
        group = segments[at : at + size]
        for first, step, num, weight in group:
            hist.add_arithmetic(first, step, num, weight)
        grouped.add_updates([(ARITHMETIC, f, s, n, w, f + (n - 1) * s) for f, s, n, w in group])
        single = rng.uniform(1e-4, 0.05)
        hist.add(single, 3.0)
        grouped.add(single, 3.0)
        at += size
        num_singles += 1
    if isinstance(grouped, ItlLog):
        assert grouped.num_updates == len(segments) + num_singles
        rebuilt = ItlHistogram()
        replay_into(rebuilt, grouped.counts, [grouped.rows()])
        grouped = rebuilt
    assert hist.total_weight > 0.0
    assert np.array_equal(grouped.counts, hist.counts)
    assert astuple(grouped._settled()) == astuple(hist._settled())
