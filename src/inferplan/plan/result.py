"""The search's answer as plain data: the best plan, the Pareto fronts, the API and hybrid costs,
and the best plan's stress test (``plan --json`` prints it; the plan file stores it).

The best plan is the cheapest feasible deployment per hour; ties go to the larger SLO margin:
the tightest SLO's ratio (predicted / target) on a grid of 1 % of its target, then the mean
ratio over every SLO (``slo.margin_key``), then the configuration order. Fronts:

- ``pareto``: cost per hour (lower is better) vs the fleet's p99 TPOT (lower is better);
- ``pareto_throughput``: output tokens/s per GPU at the planned load vs tokens/s per user
  (1 / mean TPOT), both higher-is-better.

Each plan shows both axes: memory (weights and KV per device, KV tokens, sequences that fit at
the classes' median and p99 contexts) and compute (the throughput bound, the decode step and
what bounds it).
"""

from __future__ import annotations

from typing import Any

from inferplan import __version__
from inferplan.plan import cost, slo
from inferplan.plan.cache import model_version
from inferplan.plan.capacity import stress
from inferplan.plan.launch import launch_command
from inferplan.plan.pareto import front
from inferplan.plan.search import Candidate, SearchResult, plan_cost, pruned_by

STRESS_FACTOR = 1.2


def plan_entry(result: SearchResult, cand: Candidate) -> dict[str, Any]:
    req, ctx, cfg = result.ctx.request, result.ctx, cand.cfg
    ev = cand.evaluation
    assert ev is not None
    price = req.hardware[cfg.hardware_index].price_per_gpu_hour
    num_gpus = ev["replicas"] * cfg.devices_per_replica
    fleet = ev["fleet"]
    per_user = 1000.0 / fleet["mean_tpot_ms"] if fleet["mean_tpot_ms"] else None
    return {
        "gpu": cfg.gpu,
        "num_gpus": num_gpus,
        "tensor_parallel_size": cfg.tp,
        "pipeline_parallel_size": cfg.pp,
        "data_parallel_size": ev["replicas"],
        "enable_expert_parallel": cfg.ep,
        "quantization": cfg.quantization,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "engine": cfg.engine,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_model_len": ctx.max_model_len,
        "price_per_gpu_hour_usd": price,
        **cost.fleet_cost(req, ctx.stats, num_gpus, price),
        "slo_met": fleet["slo"],
        "worst_slo_ratio": fleet["worst_ratio"],
        "closest_to_breaking": fleet["closest_to_breaking"],
        "p99_ttft_ms": fleet["p99_ttft_ms"],
        "p99_tpot_ms": fleet["p99_tpot_ms"],
        "p99_e2el_ms": fleet["p99_e2el_ms"],
        "output_tok_s_per_gpu": fleet["output_tok_s"] / num_gpus,
        "tok_s_per_user": per_user,
        "memory": cand.prepared.memory,
        "compute": cand.prepared.bound,
        "simulations": ev["simulations"] + (cand.estimate or {}).get("simulations", 0),
        "launch_command": launch_command(req.model, cfg, ctx.max_model_len, req.memory_fraction),
    }


def _ranked(result: SearchResult) -> list[Candidate]:
    req = result.ctx.request
    return sorted(
        result.feasible(),
        key=lambda c: (
            plan_cost(req, c.cfg, c.evaluation["replicas"]) if c.evaluation else 0.0,
            slo.margin_key(slo.ratios_from_json(c.evaluation["fleet"]["slo"]))
            if c.evaluation
            else (),
            c.cfg,
        ),
    )


def build_output(result: SearchResult, *, run_stress: bool = True) -> dict[str, Any]:
    req, ctx = result.ctx.request, result.ctx
    ranked = _ranked(result)
    entries = [plan_entry(result, c) for c in ranked]
    best = entries[0] if entries else None
    cost_front = front(
        [(e["cost_per_hour_usd"], e["p99_tpot_ms"] or 0.0) for e in entries], (False, False)
    )
    tput_front = front(
        [(e["output_tok_s_per_gpu"], e["tok_s_per_user"] or 0.0) for e in entries], (True, True)
    )
    api = cost.api_cost(req, ctx.stats)
    hyb = None
    if best is not None:
        cfg = ranked[0].cfg
        hyb = cost.hybrid(
            req,
            ctx.stats,
            best["data_parallel_size"],
            cfg.devices_per_replica,
            best["price_per_gpu_hour_usd"],
        )
    return {
        "inferplan_version": __version__,
        "model": req.model,
        "model_version": model_version(req.model),
        "candidates": result.num_deployments,
        "replica_configs": len(result.candidates),
        "evaluated": result.counts["evaluated"],
        "pruned": result.counts["pruned"],
        "pruned_by": pruned_by(result.candidates),
        "confirmed": sum(1 for c in result.candidates if c.evaluation is not None),
        "infeasible": sum(
            1
            for c in result.candidates
            if any(a and a["status"] == "infeasible" for a in (c.estimate, c.evaluation))
        ),
        "complete": result.complete,
        "load_scale": ctx.load_scale,
        "best": best,
        "pareto": [entries[i] for i in cost_front],
        "pareto_throughput": [entries[i] for i in tput_front],
        "api": api,
        "hybrid": hyb,
        "verdict": cost.verdict(best["cost_per_day_usd"] if best else None, api, hyb),
        "stress": _stress(result, ranked[0]) if run_stress and ranked else None,
    }


def _stress(result: SearchResult, cand: Candidate) -> dict[str, Any]:
    assert cand.evaluation is not None
    out = stress(result.ctx, cand.cfg, cand.evaluation["replicas"], STRESS_FACTOR)
    fleet = out.pop("fleet")
    out["slo"] = fleet["slo"]
    return out
