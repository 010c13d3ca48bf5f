"""``simulate --disaggregate``: the two pools from the command line, the link between them, and
the run's JSON (``kv_transfer`` and per-pool summaries beside the usual keys).

Each pool is the deployment's flags with its own ``--{pool}-gpu/-tp/-dp`` (GPU types may
differ: a heterogeneous fleet), so each has its own memory plan (KV blocks, token budget) and
step-time model. The link is ``cluster/kv_transfer.kv_link`` between the two pools as a whole:
``min(prefill GPUs, decode GPUs)`` per-GPU lanes (every NIC of the fleet busy at once, so the
pool-to-pool throughput, not one instance pair's, bounds it), over NVLink when both pools are
the same GPU type and fit one scale-up domain together, else over the NICs. One FIFO queue on
that aggregate link is optimistic for a single transfer (it gets every lane) and right for the
link's throughput under load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inferplan.cluster.disagg import DisaggResult, Pool, simulate_disaggregated
from inferplan.cluster.kv_transfer import KvLink, kv_link
from inferplan.engine.session import ServingOptions, simulation_config
from inferplan.engine.simulator import SimulationResult
from inferplan.errors import DoesNotFitError, InferplanError
from inferplan.memory.advice import does_not_fit_message
from inferplan.memory.plan import MemoryPlan
from inferplan.memory.prefixcache import replica_hits_json
from inferplan.metrics.records import RequestStatus
from inferplan.metrics.steptrace import combine_usage
from inferplan.perf.protocol import StepTimeModel
from inferplan.specs.dtypes import weight_format
from inferplan.specs.kv import sequence_kv_bytes

POOLS = ("prefill", "decode")


@dataclass(frozen=True)
class PoolShape:
    """One pool from the command line (None: the deployment's own flag)."""

    gpu: str | None
    tp: int | None
    dp: int | None


@dataclass(frozen=True)
class PoolBuild:
    plan: MemoryPlan
    model: StepTimeModel
    pool: Pool


def check_flags(
    disaggregate: bool, shapes: dict[str, PoolShape], given: list[str], options: ServingOptions
) -> None:
    """One-line errors for flag combinations that cannot run (``given``: pool flags set)."""
    if not disaggregate:
        if given:
            raise InferplanError(f"{given[0]}: pool flags need --disaggregate")
        return
    if options.data_parallel_size != 1:
        raise InferplanError(
            "--data-parallel-size: with --disaggregate give --prefill-dp and --decode-dp"
        )
    if options.max_concurrency is not None:
        raise InferplanError(
            "--max-concurrency: a client-side limit couples the prefill and decode pools; "
            "not supported with --disaggregate"
        )
    if options.scheduler != "continuous" or options.engine != "vllm":
        raise InferplanError(
            "--disaggregate: emulated with vLLM v1's scheduler (--engine vllm, "
            "--scheduler continuous) on both pools"
        )
    for name, shape in shapes.items():
        for flag, value in (("tp", shape.tp), ("dp", shape.dp)):
            if value is not None and value < 1:
                raise InferplanError(f"--{name}-{flag}: must be >= 1, got {value}")


def build_pool(
    name: str,
    plan: MemoryPlan,
    model: StepTimeModel,
    options: ServingOptions,
) -> PoolBuild:
    if not plan.fits:
        raise DoesNotFitError(f"{name} pool: {does_not_fit_message(plan)}")
    # Both pools cache prefixes (``disagg.py``): the decode pool maps the received prompts'
    # blocks its cache holds, as vLLM's NIXL connector does.
    pool_options = replace(
        options,
        data_parallel_size=plan.parallelism.num_replicas,
        enable_prefix_caching=options.prefix_caching,
    )
    return PoolBuild(plan, model, Pool(name, simulation_config(plan, pool_options), model))


def pools_link(prefill: MemoryPlan, decode: MemoryPlan, latency_s: float) -> KvLink:
    """The link between the pools (see the module docstring)."""
    p_gpus, d_gpus = prefill.parallelism.num_devices, decode.parallelism.num_devices
    same_domain = (
        prefill.gpu.key == decode.gpu.key and p_gpus + d_gpus <= prefill.topology.domain_size
    )
    return kv_link(
        prefill.topology,
        prefill_gpus=p_gpus,
        decode_gpus=d_gpus,
        same_domain=same_domain,
        latency_s=latency_s,
    )


def prompt_kv_bytes(plan: MemoryPlan) -> Callable[[int], float]:
    """Bytes of a prompt's KV on every rank of a prefill instance: full-attention layers hold
    every token (``kv_bytes_per_token x prompt``), sliding-window layers their window
    (``specs/kv.sequence_kv_bytes`` with one-token blocks: what is sent, not the pool's
    rounding). Each TP rank sends its shard, so the instance sends ``tp`` shards."""
    state_bytes = weight_format(plan.spec.dtype).bytes_per_value
    tp = plan.parallelism.tp

    def kv_bytes(tokens: int) -> float:
        shards = (
            sequence_kv_bytes(stage.layers, tokens, plan.kv_format, state_bytes, tp=tp)
            for stage in plan.stages
        )
        return tp * sum(shards)

    return kv_bytes


def run_pools(workload: Any, prefill: PoolBuild, decode: PoolBuild, link: KvLink) -> DisaggResult:
    kv_bytes = prompt_kv_bytes(prefill.plan)
    return simulate_disaggregated(workload, prefill.pool, decode.pool, link, kv_bytes)


def kv_transfer_json(result: DisaggResult) -> dict[str, Any]:
    """Bytes moved, transfer time (queue wait + wire) and queue wait in ms, link utilisation."""
    raw: dict[str, Any] = result.link.summary(result.duration_s)
    out: dict[str, Any] = {"num_transfers": raw["num_transfers"], "bytes": raw["bytes"]}
    for kind in ("transfer", "queue"):
        for key, value in raw[f"{kind}_s"].items():
            out[f"{key}_{kind}_ms"] = None if value is None else value * 1e3
    out["link_utilization"] = raw["link_utilization"]
    out["link_bandwidth_bytes_s"] = raw["link_bandwidth_bytes_s"]
    out["link_tier"] = raw["link_tier"]
    out["link_latency_ms"] = result.link.link.latency_s * 1e3
    return out


def _spread_ms(values: np.ndarray) -> dict[str, float | None]:
    values = values[np.isfinite(values)]
    if not len(values):
        return {"mean": None, "p99": None}
    return {"mean": float(np.mean(values)) * 1e3, "p99": float(np.percentile(values, 99)) * 1e3}


def pool_json(name: str, build: PoolBuild, stage: SimulationResult) -> dict[str, Any]:
    """One pool's shape, memory and work: GPUs, KV blocks, steps, KV usage, and how long its
    requests spent in it (prefill: arrival to first token; decode: wait for admission)."""
    plan, rec = build.plan, stage.records
    par = plan.parallelism
    usage = combine_usage([u for u in (t.summary() for t in stage.traces) if u is not None])
    if name == "prefill":
        latency = {"prefill_ms": _spread_ms(rec.first_token_s - rec.arrival_s)}
    else:
        latency = {"admission_wait_ms": _spread_ms(rec.first_scheduled_s - rec.arrival_s)}
    return {
        "gpu": plan.gpu.key,
        "tensor_parallel_size": par.tp,
        "replicas": par.num_replicas,
        "num_gpus": par.num_devices,
        "kv_blocks_per_replica": build.pool.config.scheduler.num_blocks,
        "max_num_batched_tokens": build.pool.config.scheduler.max_num_batched_tokens,
        "num_requests": rec.num_requests,
        "completed": int(np.sum(rec.status == int(RequestStatus.COMPLETED))),
        "rejected": int(np.sum(rec.status == int(RequestStatus.REJECTED))),
        "num_steps": stage.num_steps,
        "kv_usage": None if usage is None else {"mean": usage.mean, "max": usage.max},
        **latency,
        **prefix_cache_json(stage),
        **({} if stage.kv_tiers is None else {"kv_tiers": stage.kv_tiers}),
    }


def prefix_cache_json(stage: SimulationResult) -> dict[str, Any]:
    """A pool's prefix-cache totals and per-replica hits, when its replicas cached (the
    prefill pool)."""
    rec = stage.records
    if rec.cached_tokens is None or rec.prefix_queried_tokens is None:
        return {}
    cached, queried = int(rec.cached_tokens.sum()), int(rec.prefix_queried_tokens.sum())
    return {
        "cached_tokens": cached,
        "prefix_cache_hit_rate": cached / queried if queried else None,
        "prefix_cache_replicas": replica_hits_json(stage.prefix_caches),
    }
