"""SPF with an aging bound (``engine/aging.py``): queue order by hand, starvation bounded in a
whole run, and fast == exact with the aging timer ending stretches."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine.admission import AdmissionConfig
from inferplan.engine.aging import AgingQueue
from inferplan.engine.loop_order import same_time_s
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig
from inferplan.workload import Workload
from inferplan.workload.predict import PredictorSpec

from .test_admission import _checked
from .test_fast_equals_exact import BASE, Case, _assert_same, _plan_and_model


def test_aged_requests_go_first_in_arrival_order() -> None:
    keys = np.array([50.0, 10.0, 30.0, 5.0])
    arrivals = np.array([0.0, 1.0, 2.0, 3.0])
    queue = AgingQueue(keys, arrivals, 10.0, same_time_s)
    for rid in range(4):
        queue.push(rid, num_tokens=7)
    queue.age(9.0)
    assert queue.peek() == (3, 7)  # shortest predicted first
    assert queue.next_deadline_s() == 10.0  # request 0 arrived at 0
    queue.age(11.5)  # requests 0 and 1 have waited 10 s or more
    assert queue.next_deadline_s() == 12.0
    assert [queue.pop() for _ in range(4)] == [0, 1, 3, 2]
    assert len(queue) == 0 and math.isinf(queue.next_deadline_s())


def test_a_preempted_aged_request_keeps_its_place() -> None:
    queue = AgingQueue(np.array([50.0, 10.0]), np.array([0.0, 1.0]), 5.0, same_time_s)
    queue.push(0, num_tokens=3)
    queue.push(1, num_tokens=3)
    queue.age(6.0)  # only request 0 is aged
    assert queue.pop() == 0
    queue.push_front(0, num_tokens=9)  # preempted: back, still aged, ahead of request 1
    assert queue.peek() == (0, 9)


def _starvation_run(aging_s: float | None) -> np.ndarray:
    """One 2,000-token output (request 3) in a stream of 50-token outputs at 50 req/s, one
    sequence at a time (each short one takes ~0.3 s): pure SPF serves every short one first."""
    _, model = _plan_and_model()
    n = 60
    outputs = np.full(n, 50, dtype=np.int64)
    outputs[3] = 2000
    wl = Workload(
        arrival_s=np.arange(n, dtype=np.float64) * 0.02,
        input_tokens=np.full(n, 50, dtype=np.int64),
        output_tokens=outputs,
        class_ids=np.zeros(n, dtype=np.int64),
    )
    sched = SchedulerConfig(
        max_num_batched_tokens=512, max_num_seqs=1, block_size=16, num_blocks=4000
    )
    adm = AdmissionConfig(spf_aging_s=aging_s)
    cfg = SimulationConfig(sched, 4096, scheduling_policy="spf", admission=adm)
    return Simulation(wl, cfg, model).run().records.first_scheduled_s


def test_aging_bounds_the_wait_of_a_long_request() -> None:
    starved = _starvation_run(None)
    aged = _starvation_run(0.5)
    # Without aging the long request waits for every short one.
    assert starved[3] == starved.max()
    # With aging it starts once it has waited 0.5 s, after the one request then running.
    assert 0.5 <= aged[3] - 0.06 < 0.5 + 0.4
    assert aged[3] < starved[3] / 10


@st.composite
def aging_cases(draw: st.DrawFn) -> Case:
    scheduler = draw(st.sampled_from(["continuous", "static", "trtllm", "prefill_first"]))
    return replace(
        BASE,
        num_requests=draw(st.integers(10, 40)),
        max_input=draw(st.integers(1, 300)),
        max_output=draw(st.integers(1, 400)),
        request_rate=draw(st.sampled_from([5.0, 40.0, math.inf])),
        seed=draw(st.integers(0, 2**16)),
        spare_blocks=draw(st.sampled_from([None, 0, 40])),
        max_num_seqs=draw(st.sampled_from([2, 1024])),
        data_parallel_size=draw(st.sampled_from([1, 2])),
        scheduling_policy="spf",
        scheduler=scheduler,
        num_scheduler_steps=draw(st.sampled_from([1, 4])),
        max_concurrency=draw(st.sampled_from([None, 4])),
        admission=AdmissionConfig(
            policy=None if scheduler != "continuous" else draw(st.sampled_from([None, "quantile"])),
            predictor=PredictorSpec(draw(st.sampled_from(["oracle", "noisy", "class"]))),
            spf_aging_s=draw(st.sampled_from([0.01, 0.2, 2.0])),
        ),
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=aging_cases())
def test_fast_equals_exact_with_spf_aging(case: Case) -> None:
    _assert_same(_checked(case, exact=False), _checked(case, exact=True))
