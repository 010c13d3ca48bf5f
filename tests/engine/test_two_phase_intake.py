"""An intake in two parts on one event loop (engine/frontend.py ``two_phase_finish``,
``FrontEnd.interleaved_s``): SGLang's request read and validation, then its template,
tokenisation and send."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.engine.frontend import FrontEnd, parse_frontends, two_phase_finish
from inferplan.engine.tokenizer_stage import tokenizer_delays
from inferplan.workload.request import Workload

MS = 1e-3


def burst(arrivals: list[float]) -> Workload:
    times = np.array(arrivals, dtype=np.float64)
    return Workload(
        arrival_s=times,
        input_tokens=np.full(times.size, 100, dtype=np.int64),
        output_tokens=np.full(times.size, 8, dtype=np.int64),
        class_ids=np.zeros(times.size, dtype=np.int64),
    )


def event_loop(arrivals: np.ndarray, first_s: float, then_s: np.ndarray) -> np.ndarray:
    """Reference: one FIFO ready queue of (time ready, order); a request's first part is
    ready when it arrives, its second when its first ends; returns each second part's end."""
    num = len(arrivals)
    ready = [(a, 0, i, i) for i, a in enumerate(arrivals)]  # at a tie an arrival goes first
    heapq.heapify(ready)
    now, out, seq = 0.0, np.empty(num), num
    while ready:
        queued, _, _, job = heapq.heappop(ready)
        now = max(now, queued)
        if job < num:
            now += first_s
            heapq.heappush(ready, (now, 1, seq, num + job))
            seq += 1
        else:
            now += then_s[job - num]
            out[job - num] = now
    return out


def test_a_burst_runs_every_first_part_before_any_second_part() -> None:
    # 4 requests at t = 0, 1 ms then 2 ms each: first parts end at 4 ms, then 6, 8, 10, 12 ms
    ends = two_phase_finish(np.zeros(4), 1 * MS, np.full(4, 2 * MS))
    np.testing.assert_allclose(ends, [6 * MS, 8 * MS, 10 * MS, 12 * MS], rtol=0, atol=1e-12)


def test_spaced_requests_pay_their_own_two_parts() -> None:
    ends = two_phase_finish(np.array([0.0, 1.0, 2.0]), 1 * MS, np.full(3, 2 * MS))
    np.testing.assert_allclose(ends, [3 * MS, 1 + 3 * MS, 2 + 3 * MS], rtol=0, atol=1e-12)


def test_a_second_part_ready_before_an_arrival_runs_first() -> None:
    # r0, r1 at 0, r2 at 2.5 ms: first parts 0-1, 1-2 ms; r0's second part (ready at 1 ms)
    # and r1's (2 ms) were queued before r2 arrived: 2-4, 4-6 ms; r2 6-7, 7-9 ms.
    ends = two_phase_finish(np.array([0.0, 0.0, 2.5 * MS]), 1 * MS, np.full(3, 2 * MS))
    np.testing.assert_allclose(ends, [4 * MS, 6 * MS, 9 * MS], rtol=0, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    gaps=st.lists(st.sampled_from([0.0, 0.0, 0.5 * MS, 2 * MS, 10 * MS]), min_size=1, max_size=30),
    first=st.sampled_from([0.25 * MS, 1 * MS, 3 * MS]),
    then=st.lists(st.sampled_from([0.5 * MS, 2 * MS, 6 * MS]), min_size=30, max_size=30),
)
def test_matches_a_fifo_event_loop(gaps: list[float], first: float, then: list[float]) -> None:
    arrivals = np.cumsum(gaps)
    cost = np.array(then[: arrivals.size])
    got = two_phase_finish(arrivals, first, cost)
    np.testing.assert_allclose(got, event_loop(arrivals, first, cost), rtol=0, atol=1e-12)


def test_tokenizer_delays_use_the_two_parts_pooled_over_servers() -> None:
    fe = FrontEnd(per_request_s=2 * MS, requests_apart=True, interleaved_s=1 * MS)
    delays = tokenizer_delays(burst([0.0] * 4), fe)
    np.testing.assert_allclose(delays, [6 * MS, 8 * MS, 10 * MS, 12 * MS], rtol=0, atol=1e-12)
    halved = tokenizer_delays(burst([0.0] * 4), fe, servers=2)  # 0.5 ms then 1 ms
    np.testing.assert_allclose(halved, [3 * MS, 4 * MS, 5 * MS, 6 * MS], rtol=0, atol=1e-12)
    # behind a client's concurrency limit no burst forms: each pays its own 1 + 2 ms only
    limited = tokenizer_delays(burst([0.0] * 4), fe, max_concurrency=2)
    np.testing.assert_allclose(limited, [3 * MS] * 4, rtol=0, atol=1e-12)


def test_no_first_part_is_first_come_first_served() -> None:
    fe = FrontEnd(per_request_s=3 * MS, requests_apart=True)
    delays = tokenizer_delays(burst([0.0] * 4), fe)
    np.testing.assert_allclose(delays, [3 * MS, 6 * MS, 9 * MS, 12 * MS], rtol=0, atol=1e-12)


def test_the_front_end_file_reads_the_first_part() -> None:
    fes = parse_frontends({"sglang": {"per_request_s": 0.004, "interleaved_s": 0.002}}, "x")
    assert fes["sglang"].interleaved_s == 0.002 and fes["sglang"].per_request_s == 0.004
