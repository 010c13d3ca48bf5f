"""`inferplan simulate` without --disaggregate: the memory plan's checks, the run on its
replicas (one pool, or one per class with --pools), the front end, and the summary."""

from __future__ import annotations

from typing import Any

from inferplan.cli_admission import admission_keys
from inferplan.cli_checks import check_prefill_first_budget, check_replicas
from inferplan.cli_classpools import ClassPoolFlags, pooled_run
from inferplan.cli_flags import DeploymentFlags
from inferplan.engine.frontend import seen_result, shift_itl
from inferplan.engine.session import ServingOptions
from inferplan.engine.tokenizer_stage import simulate_tokenized as run_simulation
from inferplan.errors import DoesNotFitError
from inferplan.memory.advice import does_not_fit_message
from inferplan.memory.plan import MemoryPlan
from inferplan.memory.prefixcache import replica_hits_json
from inferplan.metrics.steptrace import combine_usage
from inferplan.metrics.summary import summarize
from inferplan.perf.expert_loads import class_token_shares
from inferplan.perf.moe_report import expert_parallel_report
from inferplan.report.progress import progress_bar
from inferplan.workload.request import Workload


def colocated_plan(deployment: DeploymentFlags, scheduler: str) -> MemoryPlan:
    """The memory plan of a colocated run, after the checks that end it before simulating."""
    plan = deployment.plan()
    check_replicas(plan.parallelism.num_replicas)
    # DP-attention ranks schedule side by side: their budgets add up (engine/session.py).
    budget = plan.config.max_num_batched_tokens * plan.parallelism.attention_dp
    check_prefill_first_budget(scheduler, budget, plan.max_model_len)
    if not plan.fits:
        raise DoesNotFitError(does_not_fit_message(plan))
    return plan


def simulate_colocated(
    deployment: DeploymentFlags,
    plan: MemoryPlan,
    requests: Workload,
    options: ServingOptions,
    classpool: ClassPoolFlags,
    moe_skew: float,
    percentiles: list[float],
    slo_ms: dict[str, float] | None,
    json_out: bool,
) -> dict[str, Any]:
    """Simulate ``requests`` on the replicas of ``plan``; the summary `simulate` prints."""
    tokens = requests.input_tokens + requests.output_tokens
    step_model = deployment.step_model(
        plan,
        moe_skew=moe_skew,
        class_token_shares=class_token_shares(requests.class_names, requests.class_ids, tokens),
        engine_costs=True,
    )
    frontend = deployment.frontend()
    with progress_bar(requests.num_requests, enabled=not json_out) as advance:
        if classpool.pools is not None:
            result, pooled = pooled_run(
                classpool, plan, step_model, requests, options, advance, frontend
            )
        else:
            # Behind the front end's tokenizer stage (engine/tokenizer_stage.py), as validate.
            result = run_simulation(plan, step_model, requests, options, frontend, advance)
            pooled = {}
    traces = result.traces
    # What `vllm bench serve` sees: the engine's HTTP front end (engine/frontend.py), as validate.
    result, fe_times = seen_result(result, frontend, plan.parallelism.num_replicas)
    summary = summarize(
        result.records,
        result.itl,
        duration_s=result.duration_s,
        percentiles=percentiles,
        goodput_slo_ms=slo_ms,
        kv_usage=combine_usage([u for u in (t.summary() for t in traces) if u is not None]),
    )
    summary = shift_itl(summary, fe_times)
    summary["num_steps"] = result.num_steps
    summary["idle_slot_steps"] = result.idle_slot_steps
    summary["data_parallel_size"] = deployment.dp
    summary["expert_parallel"] = expert_parallel_report(step_model, plan)
    summary.update(admission_keys(result))
    summary.update(pooled)  # with --pools: the class_pools section
    if result.records.cached_tokens is not None:
        summary["prefix_cache_replicas"] = replica_hits_json(result.prefix_caches)
    summary.update({} if result.kv_tiers is None else {"kv_tiers": result.kv_tiers})
    summary.update({} if result.speculative is None else {"speculative": result.speculative})
    return summary
