"""The HTTP front end as a stage after the engine (engine/frontend.py): a single FCFS server."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.engine import frontend
from inferplan.engine.frontend import (
    FrontEnd,
    FrontEndTimes,
    _fcfs_finish,
    behind_frontend,
    frontend_times,
    parse_frontends,
    shift_itl,
)
from inferplan.errors import InferplanError
from inferplan.metrics.records import RequestRecords, RequestStatus


def records(arrival: list[float], first: list[float], finish: list[float], out: list[int]):  # type: ignore[no-untyped-def]
    rec = RequestRecords.empty(len(arrival))
    rec.arrival_s[:] = arrival
    rec.dispatch_s[:] = arrival
    rec.first_scheduled_s[:] = arrival
    rec.first_token_s[:] = first
    rec.finish_s[:] = finish
    rec.output_tokens[:] = out
    rec.input_tokens[:] = 100
    rec.status[:] = RequestStatus.COMPLETED
    return rec


def test_fcfs_closed_form_matches_the_loop() -> None:
    rng = np.random.default_rng(1)
    arrive = np.sort(rng.uniform(0, 1, 200))
    cost = rng.uniform(0, 0.01, 200)
    loop, free = [], 0.0
    for a, c in zip(arrive, cost, strict=True):
        free = max(a, free) + c
        loop.append(free)
    np.testing.assert_allclose(_fcfs_finish(arrive, cost), loop, rtol=0, atol=1e-12)


def test_zero_front_end_leaves_the_run_unchanged() -> None:
    rec = records([0.0, 0.0], [0.1, 0.2], [1.0, 2.0], [10, 20])
    seen, duration, times = behind_frontend(rec, 2.0, FrontEnd())
    assert seen is rec and duration == 2.0 and times is None


def test_a_slow_front_end_bounds_throughput_a_max_not_a_sum() -> None:
    # 10 requests x 100 tokens emitted by the engine within 1 s; 1 ms per token on the server:
    # the client cannot see the last token before 1,000 tokens x 1 ms = 1 s of server work.
    n = 10
    rec = records([0.0] * n, [0.01] * n, [1.0] * n, [100] * n)
    fe = FrontEnd(per_token_s=1e-3)
    times = frontend_times(rec, fe)
    assert times.finish_s.max() == pytest.approx(0.01 + n * 100 * 1e-3, rel=1e-9)
    # A fast front end adds only its own service time to the engine's last token.
    fast = frontend_times(rec, FrontEnd(per_token_s=1e-6))
    assert fast.finish_s.max() == pytest.approx(1.0 + 1e-6 * n, rel=1e-6)


def test_request_work_delays_the_first_token_and_comes_first_at_ties() -> None:
    rec = records([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1, 1])
    times = frontend_times(rec, FrontEnd(per_request_s=1e-3, per_token_s=1e-4))
    # Both requests are parsed before either token is sent.
    np.testing.assert_allclose(times.first_token_s, [2e-3 + 1e-4, 2e-3 + 2e-4])


def test_itl_shift_is_what_the_stage_adds_and_never_negative() -> None:
    rec = records([0.0] * 4, [0.01] * 4, [1.0] * 4, [100] * 4)
    times = frontend_times(rec, FrontEnd(per_token_s=5e-3))
    summary = shift_itl({"mean_itl_ms": 10.0, "median_itl_ms": 10.0, "p99_itl_ms": 11.0}, times)
    added = (times.itl_after_s["mean"] - times.itl_before_s["mean"]) * 1e3
    assert added > 0
    assert summary["mean_itl_ms"] == pytest.approx(10.0 + added)
    # A backlog that drains delivers tokens closer together than the engine made them.
    bursty = FrontEndTimes(times.first_token_s, times.finish_s, {"mean": 0.05}, {"mean": 0.0})
    assert shift_itl({"mean_itl_ms": 10.0}, bursty)["mean_itl_ms"] == 0.0


def test_bad_front_end_files_name_the_key() -> None:
    with pytest.raises(InferplanError, match="keys must be among"):
        parse_frontends({"vllm-v1": {"per_step_s": 1e-3}}, "f.yaml")
    with pytest.raises(InferplanError, match=r"\[0, 1\]"):
        parse_frontends({"vllm-v1": {"per_token_s": 2.0}}, "f.yaml")


def test_replicas_each_have_a_front_end() -> None:
    """Two replicas' front ends serve twice the tokens: the bound halves."""
    n = 10
    rec = records([0.0] * n, [0.01] * n, [1.0] * n, [100] * n)
    fe = FrontEnd(per_token_s=4e-3)  # 1,000 tokens: 4 s of work for one server
    assert frontend_times(rec, fe).finish_s.max() == pytest.approx(0.01 + 4.0, rel=1e-9)
    assert frontend_times(rec, fe, servers=2).finish_s.max() == pytest.approx(0.01 + 2.0, rel=1e-9)


def test_grouped_tokens_keep_the_bound_and_the_idle_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``MAX_TOKEN_JOBS`` tokens are served in groups: a saturated server's last token and
    an idle server's one-token delay are what single tokens give, and so is the first token; a
    fast server loses at most the queueing of tokens emitted at the same instant (n of them)."""
    n = 10
    rec = records([0.0] * n, [0.01] * n, [1.0] * n, [100] * n)
    for fe in (FrontEnd(per_token_s=1e-3), FrontEnd(per_token_s=1e-6)):
        single = frontend_times(rec, fe)
        monkeypatch.setattr(frontend, "MAX_TOKEN_JOBS", 100)  # 1,000 tokens: groups of 10
        grouped = frontend_times(rec, fe)
        monkeypatch.undo()
        last, grouped_last = single.finish_s.max(), grouped.finish_s.max()
        assert last - n * fe.per_token_s - 1e-12 <= grouped_last <= last + 1e-12
        np.testing.assert_allclose(grouped.first_token_s, single.first_token_s, rtol=1e-12)
        for stat in ("mean", "median"):
            assert grouped.itl_before_s[stat] == pytest.approx(single.itl_before_s[stat], rel=1e-9)
    # An idle server: each group leaves when its last token does, one token's service later.
    lone = records([0.0], [0.0], [0.99], [100])
    monkeypatch.setattr(frontend, "MAX_TOKEN_JOBS", 10)
    grouped = frontend_times(lone, FrontEnd(per_token_s=1e-6))
    assert grouped.finish_s[0] == pytest.approx(0.99 + 1e-6, rel=1e-12)
    assert grouped.itl_after_s["mean"] == pytest.approx(0.01, rel=1e-6)


def test_a_run_where_nothing_completed_passes_through() -> None:
    rec = records([0.0], [np.inf], [np.inf], [10])
    rec.status[:] = RequestStatus.REJECTED
    times = frontend_times(rec, FrontEnd(per_token_s=1e-3))
    assert np.isinf(times.finish_s).all()
    assert shift_itl({"mean_itl_ms": 5.0}, times)["mean_itl_ms"] == 5.0
