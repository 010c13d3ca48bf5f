"""The ITL moments' fold over packed rows (metrics/moment_rows.py) is ``Moments.apply`` bit for
bit: every field, in any split into blocks, with integer and fractional weights."""

from __future__ import annotations

import random
from dataclasses import astuple

import numpy as np
import pytest

from inferplan.metrics.moment_rows import apply_rows, pack, unpack
from inferplan.metrics.moments import ARITHMETIC, MANY, ONE, Moments, Update


def _updates(seed: int, num: int, fractional: bool) -> list[Update]:
    rng = random.Random(seed)
    out: list[Update] = []
    for _ in range(num):
        weight = rng.uniform(0.1, 5.0) if fractional else float(rng.randint(1, 64))
        kind = rng.random()
        if kind < 0.4:
            out.append((ONE, rng.uniform(1e-4, 0.05), weight))
        elif kind < 0.9:
            first, step, n = (
                rng.uniform(1e-3, 0.05),
                rng.choice([1e-7, -1e-7, 3e-6]),
                rng.randint(1, 30),
            )
            out.append((ARITHMETIC, first, step, n, weight, first + (n - 1) * step))
        else:
            values = [rng.uniform(1e-3, 0.05) for _ in range(4)]
            mean = sum(values) / 4
            m2 = sum((v - mean) ** 2 for v in values) * weight
            out.append((MANY, min(values), max(values), sum(values) * weight, 4 * weight, mean, m2))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_rows_fold_as_tuples(seed: int) -> None:
    updates = _updates(seed, 1500, fractional=seed % 2 == 1)
    by_tuples = Moments()
    by_tuples.apply(updates)
    rows = pack(updates)
    assert unpack(rows) == [tuple(float(x) for x in u) for u in updates]
    by_rows = Moments()
    cut = random.Random(seed).randint(0, len(updates))
    apply_rows(by_rows, rows[:cut])
    apply_rows(by_rows, rows[cut:])
    assert astuple(by_rows) == astuple(by_tuples)


def test_a_reordered_fold_differs() -> None:
    """The fold is order dependent in the last bits (so the test above can tell)."""
    updates = _updates(7, 1500, fractional=True)
    forward, backward = Moments(), Moments()
    apply_rows(forward, pack(updates))
    apply_rows(backward, pack(updates[::-1]))
    assert forward.total_weight == pytest.approx(backward.total_weight)
    assert astuple(forward) != astuple(backward)


def test_a_zero_duration_keeps_its_sign_via_the_tuples() -> None:
    updates: list[Update] = [(ONE, 0.01, 2.0), (ONE, -0.0, 1.0), (ONE, 0.0, 1.0)]
    by_tuples, by_rows = Moments(), Moments()
    by_tuples.apply(updates)
    apply_rows(by_rows, pack(updates))
    assert astuple(by_rows) == astuple(by_tuples)
    assert np.signbit(by_rows.min_s) == np.signbit(by_tuples.min_s)
