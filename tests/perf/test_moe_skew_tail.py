"""Skewed expert routing shows first in the tail: at a fixed request rate (fixed mean load per
expert), p99 TPOT rises with the Zipf exponent when hot experts share a rank, and EPLB's
balanced placement with redundant copies brings it back to the uniform-routing figure.

The deployment is Qwen3-30B-A3B on 4 x H100 with DP attention and EP4, under a load heavy
enough that mixed prefill/decode steps make the hot rank's expert GEMMs compute-bound (the
regime where large-EP serving runs; docs/moe.md shows the memory-bound regime, where it differs).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.session import ServingOptions, simulate
from inferplan.engine.simulator import SimulationResult
from inferplan.metrics.summary import summarize
from inferplan.perf.factory import build_step_model
from inferplan.perf.moe import Routing
from inferplan.workload import build_workload

MAX_SKEW = 1.5  # beyond it every token picks the same top-k experts (docs/moe.md)


def _run(zipf: float, placement: str, num_redundant: int, exact: bool = False) -> SimulationResult:
    plan = build_memory_plan(
        "Qwen3-30B-A3B",
        "h100",
        1,
        1,
        True,
        None,
        "auto",
        8192,
        0.9,
        None,
        None,
        None,
        dp=4,
        num_redundant_experts=num_redundant,
    )
    model = build_step_model(plan, routing=Routing(zipf, placement=placement))
    workload = build_workload(
        "random",
        dataset_path=None,
        num_prompts=200,
        random_input_len=1024,
        random_output_len=128,
        random_range_ratio=None,
        request_rate=400.0,
        burstiness=1.0,
        seed=0,
    )
    return simulate(plan, model, workload, ServingOptions(exact=exact))


@cache
def p99_tpot_ms(zipf: float, placement: str = "linear", num_redundant: int = 0) -> float:
    result = _run(zipf, placement, num_redundant)
    summary = summarize(result.records, result.itl, duration_s=result.duration_s)
    assert summary["completed"] == 200
    return float(summary["p99_tpot_ms"])


skews = st.floats(0.0, MAX_SKEW).map(lambda s: round(s, 3))


@settings(max_examples=20, deadline=None)
@given(low=skews, high=skews)
def test_p99_tpot_rises_monotonically_with_skew(low: float, high: float) -> None:
    low, high = sorted((low, high))
    assert p99_tpot_ms(high) >= p99_tpot_ms(low)


def test_skew_moves_the_tail_by_a_visible_amount() -> None:
    assert p99_tpot_ms(1.0) > 1.2 * p99_tpot_ms(0.0)


@settings(max_examples=15, deadline=None)
@given(zipf=st.floats(0.3, MAX_SKEW).map(lambda s: round(s, 3)), redundant=st.sampled_from([4, 8]))
def test_eplb_replication_brings_the_tail_back_down(zipf: float, redundant: int) -> None:
    balanced = p99_tpot_ms(zipf, "eplb", redundant)
    assert balanced < p99_tpot_ms(zipf)
    # Not all the way: each copy's weights are read too, and the busiest rank keeps a little
    # more than 1/ep of the picks.
    assert balanced <= 1.03 * p99_tpot_ms(0.0)


def test_fast_mode_equals_exact_mode_under_skew_and_replication() -> None:
    """The per-rank expert model keeps every decode step affine in the context (the experts do
    not read KV), so the closed-form stretches reproduce step-by-step simulation."""
    for placement, redundant in (("linear", 0), ("eplb", 4)):
        fast, exact = _run(0.9, placement, redundant), _run(0.9, placement, redundant, True)
        assert fast.num_steps == exact.num_steps
        for name in ("first_token_s", "finish_s", "max_itl_s"):
            np.testing.assert_allclose(
                getattr(fast.records, name), getattr(exact.records, name), rtol=1e-9, atol=0
            )
