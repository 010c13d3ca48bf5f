"""Pruning: the memory axis first, then latency floors and the throughput bound."""

from __future__ import annotations

from typing import Any

from inferplan.plan.capacity import build_context, prepare
from inferplan.plan.search import run_search
from inferplan.plan.space import ReplicaConfig, num_deployments, replica_configs

from .planner_helpers import TINY, tiny_request


def _cfg(**changes: Any) -> ReplicaConfig:
    base = dict(
        hardware_index=0, gpu="h100", tp=1, pp=1, ep=False, quantization="bf16",
        kv_cache_dtype="auto", engine="vllm", max_num_seqs=64, max_num_batched_tokens=2048,
        max_gpus=8, gpus_per_node=8,
    )  # fmt: skip
    return ReplicaConfig(**{**base, **changes})


def test_a_model_too_big_for_the_gpu_is_pruned_on_memory() -> None:
    request = tiny_request(model="meta-llama/Llama-3.1-70B")
    prep = prepare(build_context(request), _cfg())
    assert prep.pruned == "memory"


def test_an_unreachable_tpot_is_pruned_without_simulation() -> None:
    traffic = [dict(tiny_request().traffic[0].model_dump(by_alias=True), slo={"tpot_p99_ms": 1})]
    request = tiny_request(traffic=traffic)
    result = run_search(request)
    assert result.counts["evaluated"] == 0
    assert {c.pruned for c in result.candidates} == {"latency_bound"}
    assert "tpot" in result.candidates[0].prepared.reason


def test_throughput_bound_needs_more_gpus_than_allowed() -> None:
    traffic = [dict(tiny_request().traffic[0].model_dump(by_alias=True), request_rate=5000)]
    request = tiny_request(traffic=traffic)
    prep = prepare(build_context(request), _cfg(max_gpus=2))
    assert prep.pruned == "throughput_bound"
    assert prep.replicas_lower_bound > 2


def test_tp_stays_inside_a_node_unless_allowed() -> None:
    hardware = [{"gpu": "h100", "price_per_gpu_hour": 2.5, "max_gpus": 32, "gpus_per_node": 2}]
    space = {"tensor_parallel_size": [1, 2, 4], "pipeline_parallel_size": [1, 2]}
    request = tiny_request(hardware=hardware, parallelism=space)
    assert {c.tp for c in replica_configs(request)} == {1, 2}
    wide = tiny_request(hardware=hardware, parallelism={**space, "allow_cross_node_tp": True})
    assert {c.tp for c in replica_configs(wide)} == {1, 2, 4}


def test_deployments_count_every_replica_count() -> None:
    request = tiny_request()
    configs = replica_configs(request)
    assert num_deployments(configs) == sum(c.max_gpus // (c.tp * c.pp) for c in configs)
    assert len(configs) == 2 * 2 * 2  # gpus x tp x weight formats


def test_cost_bound_prunes_plans_far_above_the_incumbent() -> None:
    hardware = [
        {"gpu": "l40s", "price_per_gpu_hour": 1.0, "max_gpus": 2},
        {"gpu": "b200", "price_per_gpu_hour": 50.0, "max_gpus": 2},
    ]
    search = {**TINY["search"], "batch_size": 1}  # the incumbent updates after each one
    result = run_search(tiny_request(hardware=hardware, quantization=["fp8"], search=search))
    pruned = [c for c in result.candidates if c.pruned == "cost_bound"]
    assert {c.cfg.gpu for c in pruned} >= {"b200"}
    best = min(
        c.evaluation["replicas"] * c.cfg.tp * 1.0
        for c in result.candidates
        if c.evaluation and c.evaluation["status"] == "feasible"
    )
    assert all(c.cost_lower_bound > 1.5 * best for c in pruned)
    brute = run_search(tiny_request(hardware=hardware, quantization=["fp8"]), prune_by_cost=False)
    assert all(c.pruned is None for c in brute.candidates)
