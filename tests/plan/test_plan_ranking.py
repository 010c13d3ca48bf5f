"""Which feasible plan is best: cost, then the tightest SLO on a 1 % grid, then the mean."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

import pytest

from inferplan.plan import slo
from inferplan.plan.result import build_output
from inferplan.plan.search import SearchResult, run_search

from .planner_helpers import tiny_request


def _slo_json(chat_ttft_ms: float, reasoning_e2el_ms: float | None) -> dict[str, Any]:
    return {
        "chat": {
            "met": True,
            "targets": {"ttft_p99_ms": {"target_ms": 3000.0, "predicted_ms": chat_ttft_ms}},
        },
        "reasoning": {
            "met": True,
            "targets": {
                "e2el_p99_ms": {"target_ms": 900000.0, "predicted_ms": reasoning_e2el_ms},
                "goodput": {"target_fraction": 0.9, "predicted_fraction": 0.95},
            },
        },
    }


def test_ratios_read_back_from_the_stored_json() -> None:
    ratios = slo.ratios_from_json(_slo_json(1500.0, 450000.0))
    assert ratios == pytest.approx([0.5, 0.5, 0.9 / 0.95])
    assert slo.ratios_from_json(_slo_json(1500.0, None))[1] == math.inf


def test_margin_key_tightest_on_a_grid_then_the_mean() -> None:
    assert slo.margin_key([0.5, 0.878175, 0.2]) == pytest.approx((0.87, 1.578175 / 3))
    # the planner's Qwen3-32B example: 128 vs 512 sequences, tightest a few millionths apart
    seqs_128 = slo.margin_key([0.8781755, 0.6857, 0.5752, 0.4219])
    seqs_512 = slo.margin_key([0.8782024, 0.6986, 0.4267, 0.1759])
    assert seqs_512 < seqs_128
    # a whole step apart: the tightest decides, whatever the rest
    assert slo.margin_key([0.86, 0.85]) < slo.margin_key([0.88, 0.01])
    assert slo.margin_key([]) == (0.0, 0.0)


@pytest.fixture(scope="module")
def searched() -> SearchResult:
    return run_search(tiny_request())


def _twin(result: SearchResult, chat_ttft_ms: float, e2el_ms: float) -> SearchResult:
    """The best candidate twice (same cost), with the given fleet SLO predictions."""
    best = min(result.feasible(), key=lambda c: c.cost_lower_bound)
    twins = []
    for ttft, e2el in ((1500.0, 450000.0), (chat_ttft_ms, e2el_ms)):  # first wins exact ties
        evaluation = copy.deepcopy(best.evaluation)
        assert evaluation is not None
        evaluation["fleet"]["slo"] = _slo_json(ttft, e2el)
        twins.append(replace(best, evaluation=evaluation))
    return replace(result, candidates=twins)


def test_equal_cost_ties_go_to_the_larger_margin(searched: SearchResult) -> None:
    # the tightest (goodput, 0.947) ties; the mean decides (chat TTFT 0.2 vs 0.5)
    tight = _twin(searched, chat_ttft_ms=600.0, e2el_ms=450001.7)
    first = _first_slo(build_output(tight, run_stress=False))
    assert first["chat"]["targets"]["ttft_p99_ms"]["predicted_ms"] == 600.0
    # E2EL the tightest and a step apart (0.97 vs 0.5 with goodput at 0.947): it decides,
    # though the other has 2.5x the chat TTFT
    loose = _twin(searched, chat_ttft_ms=600.0, e2el_ms=873000.0)
    first = _first_slo(build_output(loose, run_stress=False))
    assert first["chat"]["targets"]["ttft_p99_ms"]["predicted_ms"] == 1500.0


def _first_slo(out: dict[str, Any]) -> dict[str, Any]:
    return dict(out["best"]["slo_met"])
