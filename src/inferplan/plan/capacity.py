"""Per replica configuration: prune, find the fewest replicas that meet every SLO, confirm.

1. ``prepare`` (cheap, in the main process): the memory plan must fit (``bounds``), the latency
   floors must not already miss an SLO, and the throughput bound gives ``n_lb``, the fewest
   replicas that could carry the busiest hour's traffic x headroom.
2. ``estimate`` (a worker's job): short simulations of *one* replica carrying 1/n of the traffic
   (every class together, as they share a replica), for n from ``n_lb`` upward by galloping
   (n_lb, n_lb+1, n_lb+3, ...) then bisection between the last failing and first passing n, so
   the answer is the smallest n whose per-replica load meets every class's SLO (load per replica
   falls as n grows, so the test is monotone up to sampling noise, which the common random
   numbers of ``traffic`` keep low). A probe passes when its whole run meets every SLO and the
   run of its first third of requests does not clearly lose one (worst ratio >
   ``clearly_lost_ratio``: that part of a run is the least loaded, so a loss there is a loss).
   The whole run goes first and stops as soon as a miss is certain (``plan/early_stop.py``);
   the first third runs only after a pass, with the same early stop.
3. ``confirm`` (also a worker's job, where the search needs it): the fleet of n replicas in one
   run, requests spread by the router the engine uses (``search.router``, round robin by
   default), at the full traffic; if it misses an SLO (routing imbalance, a longer window), n
   grows by one, at most ``MAX_FLEET_RETRIES`` times. It has the same early stop as a probe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inferplan.engine.frontend import seen_result
from inferplan.engine.session import ServingOptions, simulation_config
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.engine.speculation import SimSpeculation
from inferplan.engine.tokenizer_stage import at_client_times, tokenizer_delays
from inferplan.memory.plan import MemoryPlan
from inferplan.metrics.latency import request_latencies
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.speculative import SpeculativeConfig, acceptance_for_length
from inferplan.plan import bounds as bnd
from inferplan.plan import slo
from inferplan.plan.early_stop import CertainMissError, MissWatch
from inferplan.plan.request import PlanRequest
from inferplan.plan.space import ReplicaConfig
from inferplan.plan.traffic import LengthStats, class_counts, length_stats, mixed_workload, prefix
from inferplan.plan.trtllm_runtime import runtime_frontend
from inferplan.specs.hardware import GIB

GALLOP_STEPS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_FLEET_RETRIES = 2


@dataclass(frozen=True)
class SearchContext:
    """What every evaluation needs, picklable for worker processes."""

    request: PlanRequest
    stats: tuple[LengthStats, ...]
    max_model_len: int
    load_scale: float  # busiest hour's multiplier x headroom

    @property
    def total_rate_req_s(self) -> float:
        return sum(c.request_rate for c in self.request.traffic) * self.load_scale


def build_context(request: PlanRequest) -> SearchContext:
    stats = tuple(length_stats(request))
    return SearchContext(
        request=request,
        stats=stats,
        max_model_len=max(s.max_context for s in stats),
        load_scale=request.peak_multiplier * request.headroom,
    )


@dataclass(frozen=True)
class Prepared:
    cfg: ReplicaConfig
    pruned: str | None  # why, or None when it goes on to simulation
    reason: str
    replicas_lower_bound: int
    memory: dict[str, Any]
    bound: dict[str, Any]


def prepare(ctx: SearchContext, cfg: ReplicaConfig) -> Prepared:
    req = ctx.request
    why = bnd.memory_prune(req.model, cfg, ctx.max_model_len, req.memory_fraction)
    if why is not None:
        return Prepared(cfg, "memory", why, 0, {}, {})
    plan = bnd.build_plan(req.model, cfg, ctx.max_model_len, req.memory_fraction)
    model = bnd.step_model(plan, cfg.engine, req.trtllm_runtime)
    bounds = bnd.compute_bounds(plan, model, req, list(ctx.stats))
    n_lb = bnd.replicas_lower_bound(bounds, ctx.total_rate_req_s)
    memory, bound = memory_json(plan, ctx.stats), bounds_json(bounds, n_lb)
    if bounds.slo_violation is not None:
        return Prepared(cfg, "latency_bound", bounds.slo_violation, n_lb, memory, bound)
    if n_lb > cfg.max_replicas:
        reason = f"needs >= {n_lb * cfg.devices_per_replica} GPUs, max_gpus {cfg.max_gpus}"
        return Prepared(cfg, "throughput_bound", reason, n_lb, memory, bound)
    return Prepared(cfg, None, "", n_lb, memory, bound)


def memory_json(plan: MemoryPlan, stats: tuple[LengthStats, ...]) -> dict[str, Any]:
    stage = plan.worst_stage
    p50 = max(s.p50_context for s in stats)
    p99 = max(s.p99_context for s in stats)
    return {
        "weights_gib_per_device": stage.weights.total_bytes / GIB,
        "kv_gib_per_device": max(stage.kv_bytes, 0) / GIB,
        "kv_capacity_tokens": plan.kv_capacity_tokens,
        "max_seqs_at_p50_context": int(plan.kv_capacity_tokens // p50),
        "max_seqs_at_p99_context": int(plan.kv_capacity_tokens // p99),
        "max_model_len": plan.max_model_len,
    }


def bounds_json(bounds: bnd.Bounds, n_lb: int) -> dict[str, Any]:
    return {
        "max_rate_req_s": bounds.max_rate_req_s,
        "decode_batch": bounds.decode_batch,
        "decode_step_ms": bounds.decode_step_s * 1000,
        "min_decode_step_ms": bounds.min_decode_step_s * 1000,
        "decode_bound": bounds.bound,
        "replicas_lower_bound": n_lb,
    }


class _Runner:
    """Simulations of one replica configuration at chosen loads and replica counts."""

    def __init__(self, ctx: SearchContext, cfg: ReplicaConfig) -> None:
        req = ctx.request
        self.ctx, self.cfg = ctx, cfg
        self.plan = bnd.build_plan(req.model, cfg, ctx.max_model_len, req.memory_fraction)
        self.model: StepTimeModel = bnd.step_model(self.plan, cfg.engine, req.trtllm_runtime)
        self.frontend = runtime_frontend(cfg.engine, req.trtllm_runtime)
        self.num_simulations = 0
        self.names = [c.name for c in req.traffic]
        self.passes: dict[int, dict[str, Any]] = {}  # replicas -> the passing probe's figures
        self.last_miss: str | None = None  # the SLO that stopped the last ``verdict`` early

    def run(
        self, scale: float, replicas: int, *, fleet: bool, fraction: float = 1.0
    ) -> tuple[list[list[slo.Check]], SimulationResult]:
        """``replicas`` replicas carrying ``scale`` x the request file's traffic (the fleet's
        window, or a probe's)."""
        out = self._simulate(scale, replicas, fleet=fleet, fraction=fraction, stop_above=None)
        assert out is not None
        return out

    def verdict(
        self, scale: float, replicas: int, *, fleet: bool, ratio: float, fraction: float = 1.0
    ) -> tuple[list[list[slo.Check]], SimulationResult] | None:
        """``run``, or None as soon as an SLO is certain to exceed ``ratio`` x its limit
        (``plan/early_stop.py``; ``self.last_miss`` names it)."""
        return self._simulate(scale, replicas, fleet=fleet, fraction=fraction, stop_above=ratio)

    def _simulate(
        self, scale: float, replicas: int, *, fleet: bool, fraction: float, stop_above: float | None
    ) -> tuple[list[list[slo.Check]], SimulationResult] | None:
        settings = self.ctx.request.search
        window_s = settings.fleet_window_s if fleet else settings.window_s
        counts = class_counts(self.ctx.request, scale, window_s)
        workload = mixed_workload(self.ctx.request, scale, counts)
        if fraction < 1.0:
            workload = prefix(workload, fraction)
        options = ServingOptions(
            data_parallel_size=replicas,
            router=self.ctx.request.search.router,
            engine=self.cfg.engine,
            speculative=speculation(self.ctx.request),
        )
        # Requests reach the scheduler after the tokenizer stage (engine/tokenizer_stage.py,
        # ``simulate_tokenized``); the records go back on the client's clock after the run.
        delays = tokenizer_delays(workload, self.frontend, replicas)
        if np.any(delays > 0):
            workload = replace(workload, arrival_s=workload.arrival_s + delays)
        sim = Simulation(workload, simulation_config(self.plan, options), self.model)
        watch = None if stop_above is None else MissWatch(sim, self.ctx.request, stop_above)
        self.num_simulations += 1
        try:
            engine_result = at_client_times(sim.run(check=watch), delays)
        except CertainMissError as miss:
            self.last_miss = miss.label
            return None
        if watch is not None and (label := watch.final()) is not None:
            self.last_miss = label  # certain without the front end's delays
            return None
        # As the client sees it: behind the engine's HTTP front end (engine/frontend.py); the
        # SLO checks read the per-request times, not the front end's ITL statistics.
        # One front end per replica, as `simulate` runs them (engine/frontend.py ``servers``).
        result, _ = seen_result(engine_result, self.frontend, replicas, with_itl=False)
        return slo.evaluate(result, self.ctx.request), result

    def meets(
        self, scale: float, replicas: int, *, fleet: bool
    ) -> tuple[list[list[slo.Check]], SimulationResult] | None:
        """The whole run when it meets every SLO and its first ``early_stop_fraction`` is not
        clearly lost; else None, ``last_miss`` naming an SLO it misses. The whole run goes
        first: a miss then costs only the simulation up to where it is certain
        (``plan/early_stop.py``), and the first part runs only after a pass (the verdict is
        the same conjunction in either order)."""
        settings = self.ctx.request.search
        out = self.verdict(scale, replicas, fleet=fleet, ratio=1.0)
        if out is not None and slo.worst(out[0]) > 1.0:
            self.last_miss, out = slo.first_broken(out[0], self.names), None
        if out is None:
            return None
        ratio = settings.clearly_lost_ratio
        fraction = settings.early_stop_fraction
        early = self.verdict(scale, replicas, fleet=fleet, ratio=ratio, fraction=fraction)
        if early is not None and slo.worst(early[0]) > ratio:
            self.last_miss, early = slo.first_broken(early[0], self.names), None
        return None if early is None else out

    def replica_meets(self, replicas: int) -> bool:
        """Does one replica carrying 1/``replicas`` of the traffic meet every SLO?"""
        out = self.meets(self.ctx.load_scale / replicas, 1, fleet=False)
        if out is None:
            return False
        self.passes[replicas] = fleet_json(out[0], out[1], self.names)
        return True


def fewest_replicas(runner: _Runner, n_lb: int, n_max: int) -> int | None:
    """Smallest n in [n_lb, n_max] with ``replica_meets(n)`` (galloping, then bisection)."""
    if runner.replica_meets(n_lb):
        return n_lb
    low = n_lb
    high = None
    for step in GALLOP_STEPS:
        probe = min(n_lb + step, n_max)
        if probe <= low:
            break
        if runner.replica_meets(probe):
            high = probe
            break
        low = probe
    if high is None:
        return None
    while high - low > 1:
        mid = (low + high) // 2
        if runner.replica_meets(mid):
            high = mid
        else:
            low = mid
    return high


def estimate(ctx: SearchContext, cfg: ReplicaConfig, n_lb: int) -> dict[str, Any]:
    """The fewest replicas of ``cfg`` whose one-replica probe meets every SLO (step 2)."""
    runner = _Runner(ctx, cfg)
    n = fewest_replicas(runner, n_lb, cfg.max_replicas)
    if n is None:
        reason = f"one replica misses an SLO even at 1/{cfg.max_replicas} of the traffic"
        return {"status": "infeasible", "reason": reason, "simulations": runner.num_simulations}
    return {
        "status": "estimated",
        "replicas": n,
        "simulations": runner.num_simulations,
        "probe": runner.passes[n],
    }


def confirm(ctx: SearchContext, cfg: ReplicaConfig, n: int) -> dict[str, Any]:
    """The fleet of ``n`` replicas (more while it misses, up to the retries) in one run."""
    runner = _Runner(ctx, cfg)
    for _ in range(MAX_FLEET_RETRIES + 1):
        out = runner.meets(ctx.load_scale, n, fleet=True)
        if out is not None:
            return {
                "status": "feasible",
                "replicas": n,
                "per_replica_rate_req_s": ctx.total_rate_req_s / n,
                "simulations": runner.num_simulations,
                "fleet": fleet_json(out[0], out[1], runner.names),
            }
        if n + 1 > cfg.max_replicas:
            break
        n += 1
    return {
        "status": "infeasible",
        "reason": f"the fleet misses {runner.last_miss} at {n} replicas",
        "simulations": runner.num_simulations,
    }


def run_task(ctx: SearchContext, kind: str, cfg: ReplicaConfig, n: int) -> dict[str, Any]:
    """``estimate`` from a lower bound ``n``, or ``confirm`` a fleet of ``n`` replicas."""
    return estimate(ctx, cfg, n) if kind == "estimate" else confirm(ctx, cfg, n)


def fleet_json(
    checks: list[list[slo.Check]], result: SimulationResult, names: list[str]
) -> dict[str, Any]:
    """Per-class SLO checks and the fleet's latency and throughput figures (ms, tok/s)."""
    lat = request_latencies(result.records)
    done = lat.is_completed
    records = result.records

    def pct(values: np.ndarray, q: float) -> float | None:
        values = values[done & ~np.isnan(values)]
        return float(np.percentile(values, q)) * 1000 if len(values) else None

    duration = max(result.duration_s, 1e-9)
    mean_tpot = pct(lat.tpot_s, 50)
    tpot = lat.tpot_s[done & ~np.isnan(lat.tpot_s)]
    return {
        "slo": slo.checks_json(checks, names),
        "worst_ratio": slo.worst(checks),
        "closest_to_breaking": _closest(checks, names),
        "p99_ttft_ms": pct(lat.ttft_s, 99),
        "p99_tpot_ms": pct(lat.tpot_s, 99),
        "median_tpot_ms": mean_tpot,
        "mean_tpot_ms": float(tpot.mean()) * 1000 if len(tpot) else None,
        "p99_e2el_ms": pct(lat.e2el_s, 99),
        "output_tok_s": float(records.output_tokens[done].sum()) / duration,
        "input_tok_s": float(records.input_tokens[done].sum()) / duration,
        "num_requests": records.num_requests,
    }


def _closest(checks: list[list[slo.Check]], names: list[str]) -> str | None:
    ranked = sorted(
        ((c.ratio, f"{names[k]}:{c.target.key}") for k, cls in enumerate(checks) for c in cls),
        reverse=True,
    )
    return ranked[0][1] if ranked and math.isfinite(ranked[0][0]) else None


def stress(ctx: SearchContext, cfg: ReplicaConfig, replicas: int, factor: float) -> dict[str, Any]:
    """The chosen fleet at ``factor`` x the planned traffic: which SLO breaks first."""
    runner = _Runner(ctx, cfg)
    checks, result = runner.run(ctx.load_scale * factor, replicas, fleet=True)
    ranked = sorted(
        ((c.ratio, runner.names[k], c) for k, cls in enumerate(checks) for c in cls),
        key=lambda item: -item[0],
    )
    return {
        "traffic_factor": factor,
        "all_met": slo.worst(checks) <= 1.0,
        "breaks_first": slo.first_broken(checks, runner.names),
        "ratios": [
            {"slo": f"{name}:{c.target.key}", "ratio": c.ratio if math.isfinite(c.ratio) else None}
            for _, name, c in ranked
        ],
        "fleet": fleet_json(checks, result, runner.names),
    }


def speculation(request: PlanRequest) -> SimSpeculation | None:
    """The request file's speculative decoding for the simulations (``engine/speculation.py``),
    its acceptances drawn from the search's seed; None when the file has none."""
    spec = request.speculative
    if spec is None:
        return None
    k = spec.num_speculative_tokens
    rate = spec.acceptance_rate
    if rate is None:
        rate = acceptance_for_length(float(spec.accept_length or 1.0), k)
    return SimSpeculation(SpeculativeConfig(spec.method, k, rate), request.search.seed)
