"""SGLang's front end takes requests in apart from its output stream (engine/frontend.py
``requests_apart``): a burst of arriving requests does not hold back the tokens already
streaming; the requests' cost is the tokenizer stage in front of the engine."""

from __future__ import annotations

import numpy as np

from inferplan.engine.frontend import FrontEnd, engine_frontend, frontend_times
from inferplan.engine.tokenizer_stage import tokenizer_delays
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.workload.request import Workload


def _records(n: int) -> RequestRecords:
    """``n`` requests sent at t = 0; the engine emits request i's 2 tokens at 0.1 + 0.01 i."""
    rec = RequestRecords.empty(n)
    rec.arrival_s[:] = rec.dispatch_s[:] = rec.first_scheduled_s[:] = 0.0
    rec.first_token_s[:] = 0.1 + 0.01 * np.arange(n)
    rec.finish_s[:] = rec.first_token_s + 0.005
    rec.output_tokens[:] = 2
    rec.input_tokens[:] = 100
    rec.status[:] = RequestStatus.COMPLETED
    return rec


def test_a_burst_of_requests_holds_back_tokens_only_in_one_queue() -> None:
    n, cost = 100, 5e-3  # 100 requests x 5 ms: 0.5 s of intake work
    rec = _records(n)
    one_queue = frontend_times(rec, FrontEnd(per_request_s=cost, per_token_s=1e-4))
    apart = frontend_times(rec, FrontEnd(per_request_s=cost, per_token_s=1e-4, requests_apart=True))
    # One FCFS server: every first token waits behind all 100 request jobs.
    assert one_queue.first_token_s.min() >= n * cost
    # Apart: each token costs only its own service time on the output side.
    np.testing.assert_allclose(apart.first_token_s, rec.first_token_s + 1e-4, rtol=0, atol=1e-12)


def test_the_requests_cost_is_the_tokenizer_stage_in_front_of_the_engine() -> None:
    n = 4
    workload = Workload(
        arrival_s=np.zeros(n),
        input_tokens=np.full(n, 100),
        output_tokens=np.full(n, 10),
        class_ids=np.zeros(n, dtype=np.int64),
    )
    fe = FrontEnd(per_request_s=2e-3, requests_apart=True)
    np.testing.assert_allclose(tokenizer_delays(workload, fe), [2e-3, 4e-3, 6e-3, 8e-3])


def test_only_sglang_takes_requests_in_apart() -> None:
    assert engine_frontend("sglang").requests_apart
    assert not engine_frontend("vllm").requests_apart
    assert not engine_frontend("trtllm").requests_apart
