"""Per-rank view of an expert-parallel replica: both axes, rank by rank.

For each EP rank: where it sits (node), what it holds (experts, their weight bytes, its KV), what
it carries (share of the token-expert assignments, probability that a token is dispatched to
it) and how long its routed experts take in a full step of ``max_num_batched_tokens`` per
attention rank, with the bound. Mean against max is the point: an average utilisation hides the
rank every MoE layer waits for. The imbalance ratio is TensorRT-LLM's
``(max - mean) / mean`` of per-rank routed tokens (their large-EP blog, Table 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.moe import Routing
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
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
    moe_groups = [g for g in roofline.groups if g.ffn.kind != "dense"]
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
    ranks = [
        {
            "rank": r,
            "node": r // inner,
            "experts_hosted": int(hosted[r]),
            "expert_weight_bytes": float(hosted[r] * expert_bytes),
            "kv_bytes": max(plan.worst_stage.kv_bytes, 0.0),
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
    }
