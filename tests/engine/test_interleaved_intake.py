"""An intake whose work ends in an ``await`` (engine/tokenizer_stage.py interleaved_delays)."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.engine.frontend import FrontEnd
from inferplan.engine.tokenizer_stage import interleaved_delays, tokenizer_delays
from inferplan.workload.request import Workload

GAPS_S = [0.0, 0.0, 1 / 1024, 4 / 1024, 16 / 1024]


def burst(num: int, arrivals: list[float] | None = None) -> Workload:
    times = np.array(arrivals if arrivals is not None else [0.0] * num, dtype=np.float64)
    return Workload(
        arrival_s=times,
        input_tokens=np.full(times.size, 100, dtype=np.int64),
        output_tokens=np.full(times.size, 8, dtype=np.int64),
        class_ids=np.zeros(times.size, dtype=np.int64),
    )


def event_loop(arrivals: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Reference: one FIFO ready queue; a request's work is queued when it arrives, its next
    step (free) when its work ends; returns when each request's next step runs."""
    ready = [(a, i, i) for i, a in enumerate(arrivals)]  # at a tie an arrival goes first
    heapq.heapify(ready)
    now, seq, out = 0.0, len(arrivals), np.empty(len(arrivals))
    while ready:
        queued, _, job = heapq.heappop(ready)
        now = max(now, queued)
        if job < len(arrivals):  # the request's work, then its next step behind the queue
            now += cost[job]
            heapq.heappush(ready, (now, seq, len(arrivals) + job))
            seq += 1
        else:
            out[job - len(arrivals)] = now
    return out


def test_a_burst_reaches_the_engine_together_after_all_its_work() -> None:
    fe = FrontEnd(per_request_s=0.01, intake_interleaved=True)
    delays = tokenizer_delays(burst(4), fe)
    np.testing.assert_allclose(delays, [0.04] * 4, rtol=0, atol=1e-12)
    # first come first served instead: one after another
    fcfs = tokenizer_delays(burst(4), FrontEnd(per_request_s=0.01))
    np.testing.assert_allclose(fcfs, [0.01, 0.02, 0.03, 0.04], rtol=0, atol=1e-12)


def test_spaced_requests_wait_only_for_their_own_work() -> None:
    fe = FrontEnd(per_request_s=0.01, intake_interleaved=True)
    delays = tokenizer_delays(burst(3, [0.0, 1.0, 2.0]), fe)
    np.testing.assert_allclose(delays, [0.01] * 3, rtol=0, atol=1e-12)


def test_behind_a_concurrency_limit_each_request_pays_its_own_work() -> None:
    fe = FrontEnd(per_request_s=0.01, intake_interleaved=True)
    delays = tokenizer_delays(burst(4), fe, max_concurrency=2)
    np.testing.assert_allclose(delays, [0.01] * 4, rtol=0, atol=1e-12)
    # first come first served too: the limited sends never queue as one burst
    fcfs = tokenizer_delays(burst(4), FrontEnd(per_request_s=0.01), max_concurrency=2)
    np.testing.assert_allclose(fcfs, [0.01] * 4, rtol=0, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    # multiples of 1/1024 s: sums are exact, so ties between an arrival and a finish are real
    gaps=st.lists(st.sampled_from(GAPS_S), min_size=1, max_size=30),
    costs=st.lists(st.sampled_from([1 / 1024, 3 / 1024, 8 / 1024]), min_size=30, max_size=30),
)
def test_closed_form_matches_an_event_loop(gaps: list[float], costs: list[float]) -> None:
    arrivals = np.cumsum(gaps)
    cost = np.array(costs[: arrivals.size])
    expected = event_loop(arrivals, cost) - arrivals
    np.testing.assert_allclose(interleaved_delays(arrivals, cost), expected, atol=1e-12)
