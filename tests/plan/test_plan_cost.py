"""Cost over the daily profile, the API, the hybrid split and Pareto fronts, hand-computed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplan.plan import cost
from inferplan.plan.pareto import front
from inferplan.plan.traffic import LengthStats

from .planner_helpers import tiny_request


def _stats(mean_in: float, mean_out: float) -> LengthStats:
    import numpy as np

    empty = np.zeros(1, dtype=np.int64)
    return LengthStats(mean_in, mean_out, 0, 0, 0, 0, 0.0, empty, empty)


ONE_CLASS = [
    {
        "class": "c",
        "request_rate": 1,
        "input_len": 1000,
        "output_len": 500,
        "slo": {"ttft_p99_ms": 1000},
    }
]
STATS = (_stats(1000, 500),)


def test_fleet_cost_per_token_counts_idle_hours() -> None:
    profile = [1.0] * 12 + [0.0] * 12  # half the day idle
    request = tiny_request(traffic=ONE_CLASS, daily_profile=profile)
    out = cost.fleet_cost(request, STATS, num_gpus=2, price_per_gpu_hour=3.0)
    assert out["cost_per_hour_usd"] == 6.0
    assert out["cost_per_day_usd"] == 144.0
    # 12 busy hours x 3600 req x 500 output tokens = 21.6 M output tokens a day.
    assert out["cost_per_million_output_tokens_usd"] == pytest.approx(144.0 / 21.6)
    assert out["cost_per_million_input_tokens_usd"] == pytest.approx(144.0 / 43.2)
    assert out["mean_load_fraction"] == pytest.approx(0.5)


def test_api_cost_for_the_same_traffic() -> None:
    request = tiny_request(traffic=ONE_CLASS)
    api = cost.api_cost(request, STATS)
    # per hour: 3.6 M input x $0.05 + 1.8 M output x $0.20 = $0.54
    assert api is not None and api["cost_per_hour_usd"] == pytest.approx(0.54)
    assert api["cost_per_day_usd"] == pytest.approx(0.54 * 24)


def test_hybrid_picks_the_cheapest_base() -> None:
    profile = [1.0] * 20 + [2.0] * 4  # four busy hours at twice the traffic
    api_prices = {"input_per_million_usd": 1.0, "output_per_million_usd": 2.0}
    request = tiny_request(traffic=ONE_CLASS, daily_profile=profile, api=api_prices)
    # API per hour at multiplier 1: 3.6 x 1 + 1.8 x 2 = $7.2. The full plan: 2 replicas of one
    # $1 GPU, each carrying half the peak (multiplier 1).
    hyb = cost.hybrid(request, STATS, replicas=2, gpus_per_replica=1, price_per_gpu_hour=1.0)
    assert hyb is not None
    # k=0: 28 multiplier-hours x 7.2 = 201.6; k=1: 24 + 4 x 7.2 = 52.8; k=2: 48.
    assert hyb["base_replicas"] == 2 and hyb["cost_per_day_usd"] == pytest.approx(48.0)
    pricey = tiny_request(traffic=ONE_CLASS, daily_profile=profile, api=api_prices)
    hyb = cost.hybrid(pricey, STATS, replicas=2, gpus_per_replica=1, price_per_gpu_hour=2.0)
    # k=1: 48 + 28.8 = 76.8 beats k=2: 96 and k=0: 201.6.
    assert hyb is not None and hyb["split"] == "hybrid"
    assert hyb["cost_per_day_usd"] == pytest.approx(76.8)
    assert hyb["api_token_share"] == pytest.approx(4 / 28)


def test_verdict_says_when_the_api_wins() -> None:
    assert cost.verdict(100.0, {"cost_per_day_usd": 50.0}, None).startswith("the API wins")
    assert cost.verdict(40.0, {"cost_per_day_usd": 50.0}, None).startswith("self-hosted")


points = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=30)


@given(points)
def test_pareto_front_holds_exactly_the_non_dominated(pts: list[tuple[int, int]]) -> None:
    idx = set(front([(float(a), float(b)) for a, b in pts], (False, False)))

    def dominated(i: int) -> bool:
        a, b = pts[i]
        return any(
            (c <= a and d <= b) and (c, d) != (a, b) for j, (c, d) in enumerate(pts) if j != i
        )

    for i in range(len(pts)):
        if dominated(i):
            assert i not in idx
        elif pts.index(pts[i]) == i:
            assert i in idx  # first of any duplicates
    costs = [pts[i][0] for i in front([(float(a), float(b)) for a, b in pts], (False, False))]
    assert costs == sorted(costs)


def test_pareto_front_maximizing_both() -> None:
    pts = [(1.0, 5.0), (2.0, 4.0), (2.0, 1.0), (0.5, 6.0)]
    assert front(pts, (True, True)) == [1, 0, 3]
