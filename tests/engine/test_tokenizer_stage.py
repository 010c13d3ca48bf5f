"""The tokenizer stage in front of the engine (engine/tokenizer_stage.py)."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.engine.frontend import FrontEnd
from inferplan.engine.session import ServingOptions, simulate
from inferplan.engine.tokenizer_stage import simulate_tokenized, tokenizer_delays
from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.metrics.summary import summarize
from inferplan.perf.factory import build_step_model
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism
from inferplan.workload.request import Workload


def workload(arrivals: list[float], prompt: int = 100, output: int = 8) -> Workload:
    n = len(arrivals)
    return Workload(
        arrival_s=np.array(arrivals, dtype=np.float64),
        input_tokens=np.full(n, prompt, dtype=np.int64),
        output_tokens=np.full(n, output, dtype=np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )


def test_delays_are_a_first_come_first_served_queue() -> None:
    # Three requests at once and one after the queue drained: 10 ms + 0.1 ms per prompt token.
    fe = FrontEnd(per_request_s=0.01, per_input_token_s=1e-4)
    delays = tokenizer_delays(workload([0.0, 0.0, 0.0, 1.0]), fe)
    np.testing.assert_allclose(delays, [0.02, 0.04, 0.06, 0.02], rtol=0, atol=1e-12)
    # Two replicas' API processes pooled: twice as fast.
    halved = tokenizer_delays(workload([0.0, 0.0, 0.0, 1.0]), fe, servers=2)
    np.testing.assert_allclose(halved, delays / 2, rtol=0, atol=1e-12)


def test_no_per_request_cost_no_delay() -> None:
    delays = tokenizer_delays(workload([0.0, 0.5]), FrontEnd(per_token_s=1e-4))
    assert delays.tolist() == [0.0, 0.0]


def small_run() -> tuple[object, object]:
    plan = plan_memory(
        load_model("Llama-3.1-8B"), load_gpu("h100"), Parallelism(tp=1), MemoryConfig()
    )
    return plan, build_step_model(plan)


def test_zero_cost_is_the_plain_simulation() -> None:
    plan, model = small_run()
    wl = workload([0.0] * 20)
    options = ServingOptions(engine="sglang")
    plain = simulate(plan, model, wl, options)  # type: ignore[arg-type]
    staged = simulate_tokenized(plan, model, wl, options, FrontEnd())  # type: ignore[arg-type]
    np.testing.assert_array_equal(plain.records.first_token_s, staged.records.first_token_s)
    assert plain.duration_s == staged.duration_s


def test_ttft_counts_the_wait_in_the_tokenizer() -> None:
    # 50 requests sent at once, 5 ms each in the API process: the last reaches the scheduler
    # 250 ms after it was sent, and its TTFT (from the client's send) includes that wait.
    plan, model = small_run()
    wl = workload([0.0] * 50)
    options = ServingOptions(engine="sglang")
    fe = FrontEnd(per_request_s=0.005)
    staged = simulate_tokenized(plan, model, wl, options, fe)  # type: ignore[arg-type]
    rec = staged.records
    np.testing.assert_allclose(rec.arrival_s, rec.arrival_s[0], rtol=0, atol=1e-12)  # sent at once
    ttft = rec.first_token_s - rec.arrival_s
    assert ttft.min() >= 0.005 - 1e-12
    assert ttft.max() >= 0.25 - 1e-12
    plain = simulate(plan, model, wl, options)  # type: ignore[arg-type]
    slower = summarize(rec, staged.itl, duration_s=staged.duration_s)
    faster = summarize(plain.records, plain.itl, duration_s=plain.duration_s)
    assert slower["mean_ttft_ms"] > faster["mean_ttft_ms"]
    assert staged.duration_s >= 0.25
    assert staged.duration_s == pytest.approx(float(np.nanmax(rec.finish_s) - rec.dispatch_s.min()))
