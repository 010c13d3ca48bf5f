"""Invariants checked after every step of whole runs, and determinism of the summaries.

After each step (``Simulation.run(check=...)``): the replica's own checks (KV blocks conserved,
every running request holds the blocks its KV needs, ``max_num_seqs`` respected) and ours: a
replica's clock never goes backwards. At the end: every request is COMPLETED or REJECTED (none
left ABORTED), completed ones produced exactly the output they asked for, first token <= finish,
TTFT >= the time of the request's own prefill step, and requests longer than ``max_model_len``
are rejected.
"""

from __future__ import annotations

import json
import math
from functools import cache

import numpy as np
import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.plan import MemoryPlan
from inferplan.metrics.records import RequestStatus
from inferplan.metrics.summary import summarize
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload, build_workload

COMPLETED, REJECTED = int(RequestStatus.COMPLETED), int(RequestStatus.REJECTED)


@cache
def _plan_and_model() -> tuple[MemoryPlan, StepTimeModel]:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return plan, build_step_model(plan)


def _config(
    *,
    num_blocks: int,
    max_model_len: int,
    exact: bool = False,
    preemption_mode: str = "recompute",
    scheduler: str = "continuous",
    data_parallel_size: int = 1,
    router: str = "round_robin",
    scheduling_policy: str = "fcfs",
    max_concurrency: int | None = None,
    budget: int = 512,
    num_scheduler_steps: int = 1,
) -> SimulationConfig:
    plan, _ = _plan_and_model()
    sched = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=64,
        block_size=16,
        num_blocks=num_blocks,
        preemption_mode=preemption_mode,
        scheduler=scheduler,
        kv_block_bytes=16 * plan.kv_bytes_per_token,
        num_scheduler_steps=num_scheduler_steps,
    )
    return SimulationConfig(
        sched,
        max_model_len,
        data_parallel_size=data_parallel_size,
        router=router,
        scheduling_policy=scheduling_policy,
        max_concurrency=max_concurrency,
        exact=exact,
    )


def _workload(seed: int = 1, num_prompts: int = 120, rate: float = 30.0) -> Workload:
    return build_workload(
        "random",
        num_prompts=num_prompts,
        random_input_len=300,
        random_output_len=400,
        random_range_ratio=0.9,
        request_rate=rate,
        seed=seed,
    )


def _checked_run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    _, model = _plan_and_model()
    clocks: dict[int, float] = {}

    def check(replica: Replica) -> None:
        replica.check_invariants()
        assert replica.pool.free >= 0
        assert replica.now >= clocks.get(replica.index, 0.0), "a replica's clock went backwards"
        clocks[replica.index] = replica.now

    return Simulation(wl, cfg, model).run(check=check)


def _prefill_s(prompt: int, budget: int) -> float:
    """The shortest time a prompt's prefill can take: its chunks alone in their steps."""
    _, model = _plan_and_model()
    total, done = 0.0, 0
    while done < prompt:
        chunk = min(budget, prompt - done)
        total += model.step_time(
            StepBatch(
                prefill_tokens=chunk,
                prefill_attention_pairs=chunk_attention_pairs(chunk, done),
                prefill_context_tokens=done,
                num_prefill_seqs=1,
            )
        ).total_s
        done += chunk
    return total


def _assert_outcomes(wl: Workload, cfg: SimulationConfig, res: SimulationResult) -> None:
    rec = res.records
    too_long = wl.input_tokens + wl.output_tokens > cfg.max_model_len
    if cfg.scheduler.scheduler == "trtllm":  # prompts are never chunked there
        too_long |= wl.input_tokens > cfg.scheduler.max_num_batched_tokens
    assert np.all(np.isin(rec.status, [COMPLETED, REJECTED])), "a request was left ABORTED"
    np.testing.assert_array_equal(rec.status == REJECTED, too_long)
    done = rec.status == COMPLETED
    np.testing.assert_array_equal(rec.output_tokens[done], wl.output_tokens[done])
    assert np.all(rec.output_tokens[~done] == 0)
    assert np.all(np.isnan(rec.first_token_s[~done]))
    assert np.all(rec.arrival_s[done] >= rec.dispatch_s[done])
    assert np.all(rec.first_scheduled_s[done] >= rec.arrival_s[done])
    assert np.all(rec.first_token_s[done] > rec.first_scheduled_s[done])
    assert np.all(rec.first_token_s[done] <= rec.finish_s[done])
    one_token = done & (wl.output_tokens == 1)
    np.testing.assert_array_equal(rec.first_token_s[one_token], rec.finish_s[one_token])
    budget = cfg.scheduler.max_num_batched_tokens
    for rid in np.flatnonzero(done):
        ttft = rec.first_token_s[rid] - rec.arrival_s[rid]
        assert ttft >= _prefill_s(int(wl.input_tokens[rid]), budget) * (1 - 1e-12)
    assert res.duration_s > 0
    assert res.num_steps > 0


SCENARIOS = {
    "plenty": {"num_blocks": 50_000},
    "small-pool-recompute": {"num_blocks": 120},
    "small-pool-swap": {"num_blocks": 120, "preemption_mode": "swap"},
    "static": {"num_blocks": 400, "scheduler": "static"},
    "trtllm": {"num_blocks": 400, "scheduler": "trtllm"},
    "prefill-first": {"num_blocks": 120, "scheduler": "prefill_first", "budget": 1100},
    "prefill-first-multi-step": {
        "num_blocks": 120,
        "scheduler": "prefill_first",
        "budget": 1100,
        "num_scheduler_steps": 10,
    },
    "dp3-least-outstanding": {
        "num_blocks": 150,
        "data_parallel_size": 3,
        "router": "least_outstanding",
    },
    "priority": {"num_blocks": 150, "scheduling_policy": "priority"},
    "spf-max-concurrency": {"num_blocks": 150, "scheduling_policy": "spf", "max_concurrency": 8},
    "sglang": {"num_blocks": 50_000, "scheduler": "sglang"},
    "sglang-small-pool": {"num_blocks": 120, "scheduler": "sglang"},
}


@pytest.mark.parametrize("exact", [False, True], ids=["fast", "exact"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_invariants_hold_after_every_step(name: str, exact: bool) -> None:
    wl = _workload()
    # Some requests (input + output up to ~1330 tokens) exceed 1100 and must be rejected.
    cfg = _config(max_model_len=1100, exact=exact, **SCENARIOS[name])  # type: ignore[arg-type]
    res = _checked_run(wl, cfg)
    assert np.any(res.records.status == REJECTED)
    _assert_outcomes(wl, cfg, res)
    if name.startswith("small-pool"):
        assert res.records.num_preemptions.sum() > 0


def test_requests_longer_than_max_model_len_are_rejected_at_arrival() -> None:
    wl = Workload(
        arrival_s=np.array([0.0, 0.0, 0.0]),
        input_tokens=np.array([100, 1000, 10]),
        output_tokens=np.array([100, 25, 1015]),
        class_ids=np.zeros(3, dtype=np.int64),
    )
    cfg = _config(num_blocks=1000, max_model_len=1024)
    res = _checked_run(wl, cfg)
    assert res.records.status.tolist() == [COMPLETED, REJECTED, REJECTED]
    assert math.isnan(res.records.finish_s[1])


def test_arrivals_are_not_delayed_without_max_concurrency() -> None:
    """Regression: arrivals were once delayed to the last finish time even with no limit."""
    wl = _workload()
    res = _checked_run(wl, _config(num_blocks=50_000, max_model_len=4096, exact=True))
    np.testing.assert_array_equal(res.records.arrival_s, res.records.dispatch_s)
    # Times count from the first arrival (the clock's start).
    np.testing.assert_array_equal(res.records.dispatch_s, wl.arrival_s - res.time_offset_s)


# ---- determinism -------------------------------------------------------------------------------


def _summary_json(seed: int, exact: bool = False) -> str:
    _, model = _plan_and_model()
    wl = _workload(seed=seed, num_prompts=150, rate=40.0)
    cfg = _config(num_blocks=150, max_model_len=1100, exact=exact, data_parallel_size=2)
    res = Simulation(wl, cfg, model).run()
    summary = summarize(res.records, res.itl, duration_s=res.duration_s)
    return json.dumps(summary, sort_keys=True)


@pytest.mark.parametrize("exact", [False, True], ids=["fast", "exact"])
def test_same_workload_and_seed_give_byte_identical_summaries(exact: bool) -> None:
    assert _summary_json(7, exact) == _summary_json(7, exact)


def test_different_seeds_give_different_summaries() -> None:
    assert _summary_json(7) != _summary_json(8)
