"""Admission control (``engine/admission.py``): hand-computed scenarios driven by hand, the
exhaustion policies on a tiny pool, fast == exact with every policy, invariants after every
step, and ``reserve-none`` + ``preempt`` reproducing vLLM v1's own running pass."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine.admission import (
    END_REASONS,
    EXHAUSTION_POLICIES,
    POLICIES,
    QUEUE_REASONS,
    QUEUED_BY_RESERVATION,
    Admission,
    AdmissionConfig,
    AdmissionLedger,
)
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.running import RunningSet
from inferplan.engine.schedulers import Scheduler
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.workload import Workload
from inferplan.workload.predict import PredictorSpec

from .test_fast_equals_exact import (
    BASE,
    WINDOWED,
    Case,
    _assert_same,
    _config,
    _plan_and_model,
    _workload,
)

COMPLETED, REJECTED, ABORTED = (int(s) for s in RequestStatus)


def _scheduler(
    num_blocks: int, block_size: int, prompts: list[int], outputs: list[int], cfg: AdmissionConfig
) -> tuple[Scheduler, AdmissionLedger]:
    """A vLLM v1 scheduler with an admission policy, its requests queued, no event loop."""
    sched_cfg = SchedulerConfig(
        max_num_batched_tokens=4096, max_num_seqs=64, block_size=block_size, num_blocks=num_blocks
    )
    n = len(prompts)
    records = RequestRecords.empty(n)
    records.requested_output_tokens[:] = outputs  # type: ignore[index]
    prompt_tokens = np.array(prompts, dtype=np.int64)
    pool = BlockPool(num_blocks, block_size, FULL_ATTENTION)
    waiting = WaitingQueue("fcfs", None)
    for rid, prompt in enumerate(prompts):
        waiting.push(rid, num_tokens=prompt)
    sched = Scheduler(sched_cfg, RunningSet(), waiting, deque(), pool, records, prompt_tokens)
    ledger = AdmissionLedger(cfg, prompt_tokens, np.array(outputs), np.zeros(n, np.int64), 10**6)
    sched.admission = Admission(ledger, pool, records, [])
    return sched, ledger


@pytest.mark.parametrize(
    ("policy", "headroom", "admitted"),
    [
        ("quantile", 0.0, 2),  # 8-block reservations in a 20-block pool: 8 + 8 fit, not 24
        ("quantile", 0.2, 2),  # headroom 4: the second needs 8 + 4 <= 12 unreserved
        ("quantile", 0.25, 1),  # headroom 5: 8 + 5 > 12, the second waits
        ("reserve-none", 0.0, 3),  # on demand: one block each
        ("reserve-max", 0.0, 1),  # 16 + max_tokens 300 = 316 tokens: 20 blocks, the pool
    ],
)
def test_quantile_reservation_admits_exactly_what_fits(
    policy: str, headroom: float, admitted: int
) -> None:
    """3 requests of 16 prompt + 100 output tokens, 16-token blocks, a 20-block pool: an oracle
    quantile reserves blocks_for(116) = 8 blocks each."""
    cfg = AdmissionConfig(policy=policy, headroom=headroom, max_tokens=300)
    sched, ledger = _scheduler(20, 16, [16, 16, 16], [100, 100, 100], cfg)
    decision = sched.schedule(0.0)
    assert len(sched.running) == admitted
    assert decision.sched.tolist() == [16] * admitted
    expected_reserve = {"quantile": 8, "reserve-none": 0, "reserve-max": 20}[policy]
    np.testing.assert_array_equal(ledger.reserved_blocks[:admitted], expected_reserve)
    if policy != "reserve-none":  # the one block of its first chunk would have fit
        assert ledger.queued_reason[admitted] == QUEUED_BY_RESERVATION
    assert np.all(ledger.queued_reason[admitted + 1 :] == 0)  # the pass stopped at the head
    assert (
        sched.pool.free == 20 - admitted
    )  # one block of prompt each; reservations are not allocations


def _tiny_run(on_exhaustion: str, *, exact: bool = True) -> SimulationResult:
    """Two requests of 4 prompt + 20 output tokens (6 blocks of 4 tokens each) in a 10-block
    pool; a noisy predictor with bias 0.25 and sigma 0 predicts 5 output tokens, so each
    reserves blocks_for(9) = 3 blocks and both are admitted (3 + 3 <= 10)."""
    adm = AdmissionConfig(
        policy="quantile",
        quantile=0.5,
        on_exhaustion=on_exhaustion,
        predictor=PredictorSpec("noisy", sigma=0.0, bias=0.25),
    )
    return _two_at_once(4, 20, adm, exact=exact)


def _two_at_once(
    prompt: int, output: int, adm: AdmissionConfig, *, exact: bool
) -> SimulationResult:
    """Two requests of ``prompt`` + ``output`` tokens arriving at 0, in a 10-block pool of
    4-token blocks, under ``adm``."""
    _, model = _plan_and_model()
    wl = Workload(
        arrival_s=np.zeros(2),
        input_tokens=np.array([prompt, prompt], dtype=np.int64),
        output_tokens=np.array([output, output], dtype=np.int64),
        class_ids=np.zeros(2, dtype=np.int64),
    )
    sched = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, block_size=4, num_blocks=10)
    cfg = SimulationConfig(sched, max_model_len=64, exact=exact, admission=adm)
    return Simulation(wl, cfg, model).run()


def test_exhaustion_truncate_caps_the_first_row_at_what_fits() -> None:
    """Both grow in lockstep past their 3 blocks: 4 unreserved blocks cover the 4th and 5th of
    each; at 20 computed tokens (17 generated) both need a 6th, none is left: request 0 (first
    in running order) is truncated at 17 tokens, its 5 blocks go back, request 1 finishes."""
    res = _tiny_run("truncate")
    rec, ledger = res.records, res.admission
    assert ledger is not None
    assert rec.status.tolist() == [COMPLETED, COMPLETED]
    assert rec.output_tokens.tolist() == [17, 20]
    assert ledger.end_reason.tolist() == [1, 0]
    assert END_REASONS[1] == "headroom_exhausted"
    assert ledger.peak_headroom_blocks == 4  # 2 + 2 blocks beyond the reservations
    assert rec.num_preemptions.sum() == 0


def test_exhaustion_reject_ends_the_request_with_a_reason() -> None:
    res = _tiny_run("reject")
    assert res.records.status.tolist() == [REJECTED, COMPLETED]
    assert res.admission is not None and res.admission.end_reason.tolist() == [1, 0]
    assert res.records.output_tokens.tolist() == [17, 20]  # what it had generated, discarded


@pytest.mark.parametrize("policy", ["preempt", "queue"])
def test_exhaustion_preempt_takes_vllm_victim_order(policy: str) -> None:
    """The last admitted (request 1) is preempted; request 0 gets its 6th block and finishes;
    request 1 recomputes 21 tokens and re-reserves prompt + 18 = 22 tokens (6 blocks), which
    fit only once request 0 has freed its own. (The pool is dry, so ``queue`` preempts too.)"""
    res = _tiny_run(policy)
    rec = res.records
    assert rec.status.tolist() == [COMPLETED, COMPLETED]
    assert rec.output_tokens.tolist() == [20, 20]
    assert rec.num_preemptions.tolist() == [0, 1]
    assert rec.recomputed_tokens.tolist() == [0, 20]
    assert rec.first_scheduled_s[1] < rec.finish_s[0] < rec.finish_s[1]


@pytest.mark.parametrize("policy", EXHAUSTION_POLICIES)
def test_tiny_scenarios_fast_equals_exact(policy: str) -> None:
    fast, exact = _tiny_run(policy, exact=False), _tiny_run(policy, exact=True)
    np.testing.assert_array_equal(fast.records.status, exact.records.status)
    np.testing.assert_allclose(fast.records.finish_s, exact.records.finish_s, rtol=1e-9)
    assert fast.num_steps == exact.num_steps


@pytest.mark.parametrize("exact", [False, True])
def test_headroom_peak_is_sampled_at_the_running_pass(exact: bool) -> None:
    """``reserve-none`` + ``reject``: two prompts of 20 tokens fill a 10-block pool (4-token
    blocks) at the first step. At the second, request 0 needs a 6th block, none is free: it is
    rejected, its 5 blocks go back and request 1 takes its 6th. The peak is sampled where a
    running pass has granted its rows: 6 blocks, not the 10 the first step's admissions hold.
    (Fast mode's stretch of no steps before that pass once sampled the 10.)"""
    adm = AdmissionConfig(policy="reserve-none", on_exhaustion="reject")
    res = _two_at_once(20, 5, adm, exact=exact)
    assert res.records.status.tolist() == [REJECTED, COMPLETED]
    assert res.records.output_tokens.tolist() == [1, 5]
    assert res.admission is not None and res.admission.peak_headroom_blocks == 6


# ---- whole runs: invariants after every step, fast == exact ---------------------------------


def _admission_configs() -> st.SearchStrategy[AdmissionConfig]:
    return st.builds(
        AdmissionConfig,
        policy=st.sampled_from(POLICIES),
        quantile=st.sampled_from([0.3, 0.5, 0.9]),
        headroom=st.sampled_from([0.0, 0.05, 0.2]),
        on_exhaustion=st.sampled_from(EXHAUSTION_POLICIES),
        token_budget=st.sampled_from([None, 800, 3000]),
        max_tokens=st.sampled_from([None, 200]),
        predictor=st.builds(
            PredictorSpec,
            name=st.sampled_from(["oracle", "class", "noisy"]),
            sigma=st.sampled_from([0.0, 0.5, 1.0]),
            bias=st.sampled_from([0.5, 1.0, 2.0]),
            seed=st.integers(0, 100),
        ),
        spf_aging_s=st.none(),
    )


def _checked(case: Case, *, exact: bool) -> SimulationResult:
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = Simulation(wl, _config(case, wl, plan, exact=exact), model)

    def check(replica: Replica) -> None:
        replica.check_invariants()
        if replica.scheduler.admission is not None:
            replica.scheduler.admission.check(replica.running)
        arrived = sim.next_request
        ended = int(np.count_nonzero(sim.records.status[:arrived] != ABORTED))
        present = sum(len(r.running) + len(r.waiting) + len(r.swapped) for r in sim.replicas)
        assert ended + present == arrived, "a request was lost"

    return sim.run(check=check)


@st.composite
def admission_cases(draw: st.DrawFn) -> Case:
    return replace(
        BASE,
        num_requests=draw(st.integers(10, 40)),
        max_input=draw(st.integers(1, 300)),
        max_output=draw(st.integers(1, 500)),
        request_rate=draw(st.sampled_from([5.0, 40.0, math.inf])),
        seed=draw(st.integers(0, 2**16)),
        block_size=draw(st.sampled_from([4, 16])),
        spare_blocks=draw(st.sampled_from([0, 20, 80])),
        max_num_seqs=draw(st.sampled_from([3, 1024])),
        max_num_batched_tokens=draw(st.sampled_from([64, 512, 8192])),
        data_parallel_size=draw(st.sampled_from([1, 1, 2])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "spf", "priority"])),
        max_concurrency=draw(st.sampled_from([None, 4])),
        reject_some=draw(st.booleans()),
        admission=draw(_admission_configs()),
        kv_groups=draw(st.sampled_from([None, None, WINDOWED])),  # windowed layers (Gemma-3-like)
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=admission_cases())
def test_fast_equals_exact_with_admission_policies(case: Case) -> None:
    fast, exact = _checked(case, exact=False), _checked(case, exact=True)
    _assert_same(fast, exact)
    assert fast.admission is not None and exact.admission is not None
    np.testing.assert_array_equal(fast.admission.end_reason, exact.admission.end_reason)
    np.testing.assert_array_equal(fast.admission.queued_reason, exact.admission.queued_reason)
    assert fast.admission.peak_headroom_blocks == exact.admission.peak_headroom_blocks


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=admission_cases())
def test_reserve_none_with_preempt_is_vllm(case: Case) -> None:
    """``--admission reserve-none --on-exhaustion preempt`` (no headroom) runs vLLM v1's own
    schedule: the same steps, statuses, preemptions and times as no admission config at all."""
    plan, model = _plan_and_model()
    case = replace(case, scheduling_policy="fcfs")
    vllm = replace(case, admission=None)
    ours = replace(case, admission=AdmissionConfig(policy="reserve-none"))
    wl = _workload(case)
    a = Simulation(wl, _config(vllm, wl, plan, exact=False), model).run()
    b = Simulation(wl, _config(ours, wl, plan, exact=False), model).run()
    assert a.num_steps == b.num_steps
    for name in ("status", "num_preemptions", "recomputed_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a.records, name), getattr(b.records, name))
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(
            getattr(a.records, name), getattr(b.records, name), rtol=1e-12, equal_nan=True
        )


def test_quantile_with_headroom_preempts_less_than_reserve_none() -> None:
    """The trap in small: long outputs in a tight pool. On-demand admission preempts; an oracle
    quantile reservation with headroom never needs to."""
    case = replace(BASE, max_output=1500, spare_blocks=60, request_rate=math.inf)
    none = _checked(replace(case, admission=AdmissionConfig(policy="reserve-none")), exact=False)
    quantile = _checked(
        replace(case, admission=AdmissionConfig(policy="quantile", headroom=0.1)), exact=False
    )
    assert none.records.num_preemptions.sum() > 0
    assert quantile.records.num_preemptions.sum() == 0
    assert np.all(quantile.records.status == COMPLETED)


def test_token_budget_admits_while_reserved_tokens_fit() -> None:
    """Reserved tokens are prompt + predicted output (16 + 100 = 116 each): a 250-token budget
    holds two (232), not three; blocks are not reserved (one each, on demand)."""
    cfg = AdmissionConfig(policy="token-budget", token_budget=250)
    sched, ledger = _scheduler(20, 16, [16, 16, 16], [100, 100, 100], cfg)
    sched.schedule(0.0)
    assert len(sched.running) == 2
    assert ledger.reserved_tokens.tolist() == [116, 116, 0]
    assert ledger.reserved_blocks.tolist() == [0, 0, 0]
    assert QUEUE_REASONS[int(ledger.queued_reason[2])] == "token_budget"
    assert sched.pool.free == 18
