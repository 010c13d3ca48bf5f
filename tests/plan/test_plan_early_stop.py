"""Early stop of planner simulations (plan/early_stop.py): never on a run that meets its SLOs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.plan import capacity, early_stop, slo
from inferplan.plan.capacity import _Runner, build_context
from inferplan.plan.early_stop import certain_miss, misses_needed, watches
from inferplan.plan.result import build_output
from inferplan.plan.search import run_search
from inferplan.plan.space import replica_configs

from .planner_helpers import tiny_request


@pytest.mark.parametrize("percentile", [50.0, 90.0, 95.0, 99.0, 99.9])
def test_misses_needed_is_the_fewest_that_put_the_percentile_over(percentile: float) -> None:
    """With ``needed`` values over the limit numpy's percentile is over it, whatever the rest;
    with one fewer it can stay at or under it (so the rule is exact, not merely safe)."""
    rng = np.random.default_rng(7)
    limit = 3.0
    for num in [1, 2, 3, 7, 30, 99, 100, 101, 299, 300, 1001]:
        needed = misses_needed(num, percentile)
        assert 1 <= needed <= num
        for _ in range(5):
            over = rng.uniform(limit * (1 + 1e-6), 2 * limit, needed)
            under = rng.uniform(0.0, limit, num - needed)
            values = rng.permutation(np.concatenate([over, under]))
            assert np.percentile(values, percentile) > limit
        if needed > 1:  # one fewer: the rest at 0, the few just over the limit
            values = np.concatenate([np.zeros(num - needed + 1), np.full(needed - 1, limit)])
            values[-(needed - 1) :] *= 1 + 1e-9
            assert np.percentile(values, percentile) <= limit * (1 + 1e-9)


def _records(arrival: list[float], first: list[float], finish: list[float]) -> RequestRecords:
    rec = RequestRecords.empty(len(arrival), class_names=("chat", "batch"))
    rec.arrival_s[:] = arrival
    rec.first_token_s[:] = first
    rec.finish_s[:] = finish
    done = ~np.isnan(rec.finish_s)
    rec.status[done] = int(RequestStatus.COMPLETED)
    return rec


def _chat_watches(num: int) -> list[early_stop.Watch]:
    # tiny request: chat has ttft_p99 1.5 s (and tpot, not watched); batch e2el_p90 30 s.
    return watches(tiny_request(), np.zeros(num, dtype=np.int64), 1.0)


def test_a_ttft_miss_is_certain_only_from_the_needed_count() -> None:
    num = 100  # p99 of 100: the two largest decide (misses_needed(100, 99) == 2)
    assert misses_needed(num, 99.0) == 2
    items = _chat_watches(num)
    assert {w.metric for w in items} == {"rejected", "ttft"}  # TPOT is never watched
    arrival = [0.0] * num
    first = [0.1] * (num - 1) + [2.0]
    finish = [5.0] * num
    assert certain_miss(_records(arrival, first, finish), items, math.inf) is None
    first[0] = 1.6
    assert certain_miss(_records(arrival, first, finish), items, math.inf) == "chat:ttft_p99_ms"


def test_pending_requests_count_from_the_clock_and_unarrived_ones_not_at_all() -> None:
    num = 100
    items = _chat_watches(num)
    nan = math.nan
    arrival = [0.0] * 98 + [0.0, nan]  # the last one has not arrived yet
    first = [0.1] * 98 + [nan, nan]
    finish = [nan] * num
    rec = _records(arrival, first, finish)
    assert certain_miss(rec, items, 1.0) is None  # the pending one is 1 s old
    assert certain_miss(rec, items, 2.0) is None  # 2 s old, but it is the only one
    first[0] = 1.6
    assert certain_miss(_records(arrival, first, finish), items, 2.0) == "chat:ttft_p99_ms"
    assert certain_miss(_records(arrival, first, finish), items, 1.0) is None


def test_a_rejected_request_fails_its_class() -> None:
    num = 10
    rec = _records([0.0] * num, [0.1] * num, [1.0] * num)
    items = _chat_watches(num)
    assert certain_miss(rec, items, math.inf) is None
    rec.status[3] = int(RequestStatus.REJECTED)
    assert certain_miss(rec, items, math.inf) == "chat:ttft_p99_ms"


def test_the_ratio_scales_the_limit() -> None:
    num = 100
    rec = _records([0.0] * num, [0.1] * 98 + [2.0, 2.0], [5.0] * num)
    request = tiny_request()
    ids = np.zeros(num, dtype=np.int64)
    assert certain_miss(rec, watches(request, ids, 1.0), math.inf) == "chat:ttft_p99_ms"
    assert certain_miss(rec, watches(request, ids, 2.0), math.inf) is None  # 2 s < 2 x 1.5 s


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 4.0])
def test_a_stopped_run_is_one_whose_full_run_misses(scale: float) -> None:
    """The early stop's verdict is the full run's: stopped only when the full run (behind the
    front end) misses ``ratio`` x an SLO; otherwise the same checks."""
    request = tiny_request()
    ctx = build_context(request)
    stopped = 0
    for cfg in replica_configs(request)[:4]:
        runner = _Runner(ctx, cfg)
        for ratio, fraction in ((1.0, 1.0), (2.0, 0.34)):
            checks, _ = runner.run(ctx.load_scale * scale, 1, fleet=False, fraction=fraction)
            out = runner.verdict(
                ctx.load_scale * scale, 1, fleet=False, ratio=ratio, fraction=fraction
            )
            if out is None:
                stopped += 1
                assert slo.worst(checks) > ratio
            else:
                assert out[0] == checks
    if scale >= 4.0:
        assert stopped  # overloaded runs do stop early (2x is within capacity since vllmlat)


def _plain(out: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if k != "stress"}


def test_the_search_answers_the_same_without_early_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Early stop saves simulation, never changes the answer (every figure of the output)."""
    request = tiny_request()
    fast = build_output(run_search(request), run_stress=False)
    monkeypatch.setattr(early_stop, "certain_miss", lambda *args: None)
    slow = build_output(run_search(request), run_stress=False)
    assert _plain(fast) == _plain(slow)


def test_a_fleet_has_one_front_end_per_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet of N replicas is seen behind N front ends, as `simulate` runs them: the runner
    passes the replica count to the front end (one shared server made fleets pessimistic)."""
    request = tiny_request()
    ctx = build_context(request)
    runner = _Runner(ctx, replica_configs(request)[0])
    seen: list[int] = []
    original = capacity.seen_result

    def spy(result: Any, fe: Any, servers: int = 1, **kwargs: Any) -> Any:
        seen.append(servers)
        return original(result, fe, servers, **kwargs)

    monkeypatch.setattr(capacity, "seen_result", spy)
    for replicas in (1, 3):
        runner.run(ctx.load_scale, replicas, fleet=True)
    assert seen == [1, 3]
