"""Per-rank view of an expert-parallel replica: both axes, rank by rank.

For each EP rank: where it sits (node), what it holds (experts and all weights, its KV, the
sequences of max-model-len its attention rank fits), what it carries (share of the token-expert
assignments, probability that a token is dispatched to it) and how long its routed experts take
in a full step of ``max_num_batched_tokens`` per attention rank, with the bound. KV is the
plan's, sized for the fullest rank (a rank holding one expert fewer would fit a little more).
Mean against max is the point: an average utilisation hides the rank every MoE layer waits for.
The imbalance ratio is TensorRT-LLM's ``(max - mean) / mean`` of per-rank routed tokens (their
large-EP blog, Table 1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from inferplan.memory.plan import MemoryPlan, plan_memory
from inferplan.perf.moe import Routing, rank_table
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.relocation import relocation_s, survivor_redundant_experts
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.model import FfnSpec
from inferplan.specs.params import expert_params


def routing_label(routing: Routing) -> str:
    if routing.expert_loads is not None:
        return routing.source
    return f"zipf:{routing.zipf_exponent:g}" if routing.zipf_exponent else "uniform"


def _roofline_of(model: StepTimeModel) -> RooflineModel | None:
    if isinstance(model, RooflineModel):
        return model
    inner = getattr(model, "roofline", None)
    return inner if isinstance(inner, RooflineModel) else None


def expert_parallel_report(model: StepTimeModel, plan: MemoryPlan) -> dict[str, Any] | None:
    """The per-rank report, or None when the replica has no expert parallelism."""
    roofline = _roofline_of(model)
    par = plan.parallelism
    if roofline is None or not par.enable_expert_parallel:
        return None
    moe_groups = [g for g in roofline.groups if g.ffn.kind == "moe"]
    if not moe_groups:
        return None
    ffn = moe_groups[0].ffn
    layers = sum(g.count for g in moe_groups)
    table = roofline.expert_table(ffn)
    tokens = float(plan.config.max_num_batched_tokens * par.attention_dp)
    compute, memory = roofline.expert_rank_times(ffn, tokens)
    times = np.maximum(compute, memory) * layers
    shares = table.assignment_share
    hosted = table.hosted.sum(axis=1)
    expert_bytes = plan.weight_formats.experts.bytes_for(
        expert_params(ffn, plan.spec.hidden_size) * layers
    )
    popularity = roofline.routing.popularity(ffn.num_experts)
    inner = plan.topology.inner_size(par.ep)
    # The plan stores the fullest rank's slots; a rank with fewer (E mod ep) holds less.
    heaviest = max(stage.weights.total_bytes for stage in plan.stages)
    weights = heaviest - (hosted.max() - hosted) * expert_bytes
    # DP attention: each attention rank keeps its own sequences (tp EP ranks share them).
    seqs = plan.max_concurrent_seqs.get(plan.max_model_len, 0) // par.attention_dp
    ranks = [
        {
            "rank": r,
            "node": r // inner,
            "experts_hosted": int(hosted[r]),
            "expert_weight_bytes": float(hosted[r] * expert_bytes),
            "weights_bytes": float(weights[r]),
            "kv_bytes": max(plan.worst_stage.kv_bytes, 0.0),
            "max_concurrent_seqs_at_max_model_len": seqs,
            "load_share": float(shares[r]),
            "dispatch_probability": float(table.hit_probability[r]),
            "experts_time_s": float(times[r]),
            "bound": "compute" if compute[r] >= memory[r] else "memory",
        }
        for r in range(table.num_ranks)
    ]
    mean = float(shares.mean())
    return {
        "routing": routing_label(roofline.routing),
        "placement": roofline.routing.placement,
        "num_redundant_experts": par.num_redundant_experts,
        "hottest_expert_load_ratio": float(popularity.max() * ffn.num_experts),
        "reference_step_tokens": tokens,
        "moe_layers_per_rank": layers,
        "mean_load_share": mean,
        "max_load_share": float(shares.max()),
        "imbalance_ratio": float((shares.max() - mean) / mean),
        "slowest_rank": int(np.argmax(times)),
        "mean_experts_time_s": float(times.mean()),
        "max_experts_time_s": float(times.max()),
        "ranks": ranks,
        "rebalance_from_linear_s": _rebalance_s(roofline, plan, ffn, expert_bytes),
        "device_loss": _device_loss(roofline, plan, ffn, tokens, expert_bytes, layers, times),
    }


def _rebalance_s(
    roofline: RooflineModel, plan: MemoryPlan, ffn: FfnSpec, expert_bytes: float
) -> float:
    """Weight-transfer time to go from the load-oblivious linear start to this placement."""
    par = plan.parallelism
    start = rank_table(
        Routing(roofline.routing.zipf_exponent, roofline.routing.expert_loads, "linear"),
        ffn.num_experts,
        ffn.num_experts_per_tok,
        par.ep,
    )
    current = roofline.expert_table(ffn)
    return relocation_s(
        start.hosted.astype(np.int64),
        current.hosted.astype(np.int64),
        expert_bytes,
        plan.topology,
        link_efficiency=roofline.eff.collective_bandwidth,
    )


def _device_loss(
    roofline: RooflineModel,
    plan: MemoryPlan,
    ffn: FfnSpec,
    tokens: float,
    expert_bytes: float,
    layers: int,
    times: np.ndarray,
) -> dict[str, Any] | None:
    """The replica after losing the attention rank that holds the slowest EP rank: survivors
    re-place the experts with EPLB (with the same traffic) and keep serving."""
    par = plan.parallelism
    if par.attention_dp < 2 or par.pp > 1:
        return None  # the replica is gone with the GPU: no degraded mode to state
    lost = int(np.argmax(times)) // par.tp
    survivors = [r for r in range(par.ep) if r // par.tp != lost]
    table = roofline.expert_table(ffn)
    slots = int(table.hosted.sum(axis=1).max())
    redundant = survivor_redundant_experts(ffn.num_experts, slots, len(survivors))
    degraded_par = replace(par, dp=par.dp - 1, num_redundant_experts=redundant)
    degraded_plan = plan_memory(plan.spec, plan.gpu, degraded_par, plan.config, plan.topology)
    degraded = RooflineModel(
        plan.spec,
        plan.gpu,
        degraded_par,
        plan.weight_formats,
        plan.kv_format,
        roofline.eff,
        routing=replace(roofline.routing, placement="eplb"),
        topology=plan.topology,
    )
    after = degraded.expert_table(ffn)
    compute, memory = degraded.expert_rank_times(ffn, tokens)
    return {
        "lost_attention_rank": lost,
        "lost_gpus": par.tp,
        "surviving_ep_ranks": len(survivors),
        "slots_per_rank_after": int(after.hosted.sum(axis=1).max()),
        "experts_without_a_surviving_copy": int(
            (
                table.hosted[[r for r in range(par.ep) if r not in survivors]].any(axis=0)
                & ~table.hosted[survivors].any(axis=0)
            ).sum()
        ),
        "max_load_share_after": float(after.assignment_share.max()),
        "max_experts_time_s_after": float(np.maximum(compute, memory).max() * layers),
        "kv_capacity_tokens_before": plan.kv_capacity_tokens,
        "kv_capacity_tokens_after": degraded_plan.kv_capacity_tokens,
        "relocation_s": relocation_s(
            table.hosted[survivors].astype(np.int64),
            after.hosted.astype(np.int64),
            expert_bytes,
            plan.topology,
            link_efficiency=roofline.eff.collective_bandwidth,
            rank_ids=survivors,
        ),
    }
