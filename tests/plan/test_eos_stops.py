"""Early EOS stops in ``random`` runs: a constant per-token hazard (plan/eos_stops.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferplan.plan.eos_stops import (
    early_stop_lengths,
    expected_length,
    random_outputs,
    stop_hazard,
)
from inferplan.plan.published import bundled_published


def test_expected_length_by_hand() -> None:
    # p = 1/2, at most 3 tokens: 1 + 1/2 + 1/4
    assert expected_length(0.5, 3) == pytest.approx(1.75)
    assert expected_length(0.0, 100) == 100.0
    assert expected_length(1.0, 100) == 1.0
    # one stop in a hundred thousand tokens barely shortens 100-token requests
    assert expected_length(1e-5, 100) == pytest.approx(100 - 1e-5 * 100 * 99 / 2, rel=1e-6)


def test_stop_hazard_inverts_the_mean() -> None:
    assert stop_hazard(1.75, 3) == pytest.approx(0.5, abs=1e-12)
    assert stop_hazard(100.0, 100) == 0.0 and stop_hazard(1.0, 100) == 1.0
    p = stop_hazard(97.03, 100)  # GLM-4.6 on 4 H200, `32000/100`
    assert expected_length(p, 100) == pytest.approx(97.03, abs=1e-9)
    assert stop_hazard(99.0, 100) < stop_hazard(98.0, 100)  # a lower mean stops more often


def test_lengths_are_the_stratified_quantiles() -> None:
    # p = 1/2: P(G <= 1) = 1/2, so u = 1/4 -> 1 token, u = 3/4 -> 2 tokens (cap 3)
    lengths = early_stop_lengths(3, 1.75, 2, np.random.default_rng(0))
    assert sorted(lengths.tolist()) == [1, 2]
    # u = (i + 1/2) / 4 -> ceil(log2(1 / (1 - u))): 1, 1, 2, 3 (capped)
    assert sorted(early_stop_lengths(3, 1.75, 4, np.random.default_rng(0)).tolist()) == [1, 1, 2, 3]


def test_a_run_keeps_its_mean_and_bounds() -> None:
    lengths = early_stop_lengths(100, 97.03, 100, np.random.default_rng(5))
    assert lengths.min() >= 1 and lengths.max() == 100
    assert abs(lengths.mean() - 97.03) < 0.1
    assert 3 <= np.count_nonzero(lengths < 100) <= 9  # ~6 % of requests stop early
    again = early_stop_lengths(100, 97.03, 100, np.random.default_rng(5))
    assert np.array_equal(lengths, again)
    assert np.array_equal(
        early_stop_lengths(100, 100.0, 7, np.random.default_rng(0)), np.full(7, 100)
    )


def test_random_outputs_only_where_the_mean_is_short() -> None:
    rows = [r for r in bundled_published() if r.dataset == "random" and r.engine == "sglang"]
    short = next(r for r in rows if r.output_len_mean and r.output_len_mean < (r.output_len or 0))
    full = next(r for r in rows if r.output_len_mean == r.output_len)
    out = random_outputs(short, 100)
    assert out.max() == short.output_len and out.min() < short.output_len
    assert math.isclose(out.mean(), short.output_len_mean or 0.0, abs_tol=0.5)
    assert np.array_equal(random_outputs(full, 10), np.full(10, full.output_len))
