"""What a ``Simulation`` is built from: its checks, records, admission ledger and replicas.

The event loop (``simulator.py``) owns the run; this module owns its construction: the
configuration checks that raise before anything runs, the request records (times counted from
the first arrival), the admission ledger, each replica's waiting queue, and the replicas, which
share one cache of step plans (one model). Also the arrival checks the server applies, per
request, before the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.admission import Admission, AdmissionLedger
from inferplan.engine.aging import AgingQueue
from inferplan.engine.policies import ROUTERS, WaitingQueue, policy_keys
from inferplan.engine.replica import Replica, prefix_cache_for
from inferplan.engine.speculation import last_slots
from inferplan.errors import InferplanError
from inferplan.memory.blockpool import BlockPool
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords
from inferplan.metrics.trace_log import StepTraceLog
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.step_seconds import StepSeconds
from inferplan.workload.request import Workload

if TYPE_CHECKING:
    from inferplan.engine.schedulers import Scheduler
    from inferplan.engine.simulator import SimulationConfig


def check_config(cfg: SimulationConfig, kind: type[Scheduler]) -> None:
    """Reject a configuration the engine cannot run, naming the flag."""
    if cfg.router not in ROUTERS:
        raise InferplanError(
            f"--router: unknown router {cfg.router!r}; valid: {', '.join(ROUTERS)}"
        )
    if cfg.max_concurrency is not None and cfg.max_concurrency < 1:
        raise InferplanError(f"--max-concurrency: must be >= 1, got {cfg.max_concurrency}")
    budget = cfg.scheduler.max_num_batched_tokens
    if kind.whole_prompts and kind.can_preempt and budget < cfg.max_model_len:
        raise InferplanError(
            f"--max-num-batched-tokens {budget} is below --max-model-len "
            f"{cfg.max_model_len}: without chunked prefill (prefill-first, as vLLM V0 "
            "requires) a preempted request's prompt must fit one step"
        )


def records_for(workload: Workload, offset_s: float) -> RequestRecords:
    """The run's request records, with times counted from ``offset_s`` (the first arrival)."""
    rec = RequestRecords.empty(workload.num_requests, class_names=workload.class_names)
    rec.dispatch_s[:] = workload.arrival_s - offset_s
    rec.input_tokens[:] = workload.input_tokens
    rec.class_ids[:] = workload.class_ids
    assert rec.requested_output_tokens is not None
    rec.requested_output_tokens[:] = workload.output_tokens
    return rec


def admission_ledger(cfg: SimulationConfig, workload: Workload) -> AdmissionLedger | None:
    """The admission policies' per-request state, or None without an admission config."""
    adm = cfg.admission
    if adm is None:
        return None
    if adm.is_active and prefix_cache_for(cfg.scheduler, workload) is not None:
        raise InferplanError(
            f"--admission {adm.policy}: not emulated with prefix caching (the workload has "
            "prompt-block hashes); add --no-enable-prefix-caching"
        )
    return AdmissionLedger(
        adm, workload.input_tokens, workload.output_tokens, workload.class_ids, cfg.max_model_len
    )


def build_replicas(
    cfg: SimulationConfig,
    workload: Workload,
    model: StepTimeModel,
    records: RequestRecords,
    itl: ItlHistogram,
    ledger: AdmissionLedger | None,
    same_time_s: Callable[[float], float],
) -> list[Replica]:
    """The data-parallel replicas, each with its waiting queue, KV pool and prefix cache;
    one cache of step plans for all (one model)."""
    sched = cfg.scheduler
    predicted = workload.output_tokens if ledger is None else ledger.predictions.point_tokens
    keys = policy_keys(cfg.scheduling_policy, workload.arrival_s, workload.priorities, predicted)
    replicas = [
        Replica(
            i,
            sched,
            model,
            records,
            workload.input_tokens,
            _waiting_queue(cfg, keys, records, same_time_s),
            itl,
            StepTraceLog(sched.num_blocks),  # records applied a batch at a time (the same floats)
            prefix_cache_for(sched, workload),
        )
        for i in range(cfg.data_parallel_size)
    ]
    step_s = StepSeconds(model)
    for replica in replicas:
        replica.step_s = step_s
        replica.vector_steps = not cfg.exact
        if ledger is not None and ledger.cfg.is_active:
            scheduler = replica.scheduler
            scheduler.admission = Admission(ledger, replica.pool, records, replica.on_finish)
            scheduler.admission.offload = replica.offload
    return replicas


def _waiting_queue(
    cfg: SimulationConfig,
    keys: np.ndarray | None,
    records: RequestRecords,
    same_time_s: Callable[[float], float],
) -> WaitingQueue:
    adm = cfg.admission
    if adm is None or adm.spf_aging_s is None or keys is None:
        return WaitingQueue(cfg.scheduling_policy, keys)
    if cfg.scheduling_policy != "spf":
        raise InferplanError("--spf-aging-s: applies with --scheduling-policy spf only")
    return AgingQueue(keys, records.arrival_s, adm.spf_aging_s, same_time_s)


def is_routed_at_arrival(
    cfg: SimulationConfig, workload: Workload, kind: type[Scheduler], pool: BlockPool
) -> np.ndarray:
    """Per request: not rejected at arrival (the test ``Simulation._arrive`` applies), i.e.
    none of ``arrival_rejections``' reasons holds."""
    is_routed: np.ndarray = np.ones(workload.num_requests, dtype=bool)
    for rejected in arrival_rejections(cfg, workload, kind, pool).values():
        is_routed &= ~rejected
    return is_routed


def arrival_rejections(
    cfg: SimulationConfig, workload: Workload, kind: type[Scheduler], pool: BlockPool
) -> dict[str, np.ndarray]:
    """Per reason (a line a user can act on), the requests the server refuses at arrival:
    a prompt + output over ``max_model_len``; a request whose KV can never fit the replica's
    pool, even alone (at its largest it holds the blocks of its whole prompt + output where
    admission reserves them: static batching, TensorRT-LLM; else of every token but the last
    sampled one); a prompt that can never be scheduled whole (TensorRT-LLM without chunked
    context, a prefill-first scheduler) over the token budget. A request may have several."""
    sched = cfg.scheduler
    total = workload.input_tokens + workload.output_tokens
    largest = last_slots(total - (0 if kind.reserves_whole_request else 1), cfg)
    reasons = {
        f"prompt + output over --max-model-len {cfg.max_model_len:,}": total > cfg.max_model_len,
        f"KV never fits the replica's {sched.num_blocks:,} blocks, even alone": (
            pool.blocks_for(largest) > sched.num_blocks
        ),
    }
    if kind.whole_prompts:
        budget = f"--max-num-batched-tokens {sched.max_num_batched_tokens:,}"
        reasons[f"prompt over {budget} (prompts are scheduled whole)"] = (
            workload.input_tokens > sched.max_num_batched_tokens
        )
    return reasons
