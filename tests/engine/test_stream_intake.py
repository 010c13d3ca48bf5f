"""An intake slowed by the streams its process serves (engine/stream_intake.py)."""

from __future__ import annotations

import math

import numpy as np

from inferplan.engine.frontend import FrontEnd
from inferplan.engine.session import ServingOptions
from inferplan.engine.stream_intake import IntakeGate, applies
from inferplan.engine.tokenizer_stage import simulate_tokenized

from .test_tokenizer_stage import small_run, workload


def gate(sends: list[float], cost: float, per_token_s: float) -> IntakeGate:
    n = len(sends)
    return IntakeGate(np.array(sends), np.full(n, cost), per_token_s)


def test_without_streams_the_intake_is_first_come_first_served() -> None:
    g = gate([0.0, 0.0, 0.0, 5.0], 1.0, 0.5)
    g.account(10.0, 0)
    assert g.ends.tolist() == [1.0, 2.0, 3.0, 6.0]  # the last waits for its send


def test_streams_taking_half_the_process_halve_the_intake() -> None:
    # One token a second at half a second each: the intake has the other half.
    g = gate([0.0] * 5, 1.0, 0.5)
    g.account(10.0, 10)
    np.testing.assert_allclose(g.ends, [2.0, 4.0, 6.0, 8.0, 10.0])


def test_stream_work_is_served_first_and_its_backlog_carried() -> None:
    # Four tokens in the first second: 2 s of work, 1 s of it still queued at t = 1.
    g = gate([0.0] * 3, 1.0, 0.5)
    g.account(1.0, 4)
    assert g.next == 0 and g.backlog == 1.0
    assert g.end_of(0) == 3.0  # projected: the backlog, then its own second
    assert g.end_of(2) == 5.0
    g.account(5.0, 4)  # no more tokens: the backlog drains by 2, then the intake
    assert g.ends.tolist() == [3.0, 4.0, 5.0]
    assert math.isinf(g.end_of(3))


def test_a_projection_is_a_lower_bound_that_later_tokens_push_back() -> None:
    g = gate([0.0, 0.0], 1.0, 0.25)
    assert g.end_of(0) == 1.0
    g.account(0.5, 2)  # 0.5 s of stream work in the first half second: no intake yet
    assert g.end_of(0) == 1.5


def test_a_count_that_drops_never_speeds_the_intake() -> None:
    g = gate([0.0, 0.0], 1.0, 0.25)
    g.account(1.0, 2)  # half the first second went to the streams
    g.account(2.0, 0)  # a retracted request's tokens leave the count: no work is undone
    assert g.ends.tolist() == [1.5, math.inf]
    assert g.end_of(1) == 2.5


def test_only_one_replica_without_a_client_limit_is_gated() -> None:
    assert applies(ServingOptions(engine="sglang"))
    assert not applies(ServingOptions(engine="sglang", max_concurrency=4))
    assert not applies(ServingOptions(engine="sglang", data_parallel_size=2))


def test_gated_run_matches_the_tokenizer_stage_when_streams_cost_nothing() -> None:
    plan, model = small_run()
    wl = workload([0.0] * 40, output=32)
    options = ServingOptions(engine="sglang")
    fe = FrontEnd(per_request_s=0.01, requests_apart=True)
    staged = simulate_tokenized(plan, model, wl, options, fe)  # type: ignore[arg-type]
    free = FrontEnd(per_request_s=0.01, requests_apart=True, intake_stream_s=1e-15)
    gated = simulate_tokenized(plan, model, wl, options, free)  # type: ignore[arg-type]
    ttft = gated.records.first_token_s - gated.records.arrival_s
    staged_ttft = staged.records.first_token_s - staged.records.arrival_s
    np.testing.assert_allclose(ttft, staged_ttft, rtol=1e-9, atol=1e-9)
    assert ttft[0] > 0.01  # its own intake, then its prefill
    np.testing.assert_array_equal(gated.records.arrival_s, wl.arrival_s)  # the client's clock
    assert abs(gated.duration_s - staged.duration_s) < 1e-9


def test_streaming_requests_hold_back_the_intake_of_later_ones() -> None:
    plan, model = small_run()
    wl = workload([0.0] * 40, output=64)
    options = ServingOptions(engine="sglang")
    apart = FrontEnd(per_request_s=0.01, requests_apart=True)
    coupled = FrontEnd(per_request_s=0.01, requests_apart=True, intake_stream_s=1e-3)
    base = simulate_tokenized(plan, model, wl, options, apart)  # type: ignore[arg-type]
    slow = simulate_tokenized(plan, model, wl, options, coupled)  # type: ignore[arg-type]
    ttft_base = base.records.first_token_s - base.records.arrival_s
    ttft_slow = slow.records.first_token_s - slow.records.arrival_s
    assert ttft_slow[0] == ttft_base[0]  # nothing streams before the first request is in
    assert ttft_slow[-1] > ttft_base[-1] + 0.05  # the last waits behind the streams
    # No request is served noticeably earlier: a slowed intake can only shift a request into a
    # prefill step it shares with the one before it, which gains it a few microseconds at most
    # (request 3 here: 9.5 us at trtp91's Hopper constants), never a step (about 7 ms here).
    assert np.all(ttft_slow >= ttft_base - 1e-4)
