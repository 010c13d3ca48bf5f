"""The search: enumerate, prune, evaluate the survivors cheapest-bound first, stop early.

1. Every replica configuration (``space``) is checked on the memory axis and bounded on the
   compute axis (``capacity.prepare``): pruned when it cannot fit, when a latency floor already
   misses an SLO, or when even the throughput bound needs more GPUs than allowed.
2. Survivors are sorted by their *cost lower bound* (fewest replicas the throughput bound
   allows x GPUs per replica x price) and estimated in batches of ``search.batch_size``
   (one-replica probes, ``capacity.estimate``), in parallel inside a batch.
3. Fleet confirmations (``capacity.confirm``, the expensive whole-fleet run) go only where they
   can change the answer: after each batch, the estimated plans cheaper than the incumbent (the
   cheapest *confirmed* plan) are confirmed, cheapest first, since an estimate's cost is a lower
   bound on its confirmed cost (confirmation only adds replicas); at the end, the members of the
   Pareto fronts (estimated figures where not yet confirmed) until every member is confirmed.
4. After each batch the incumbent prunes every remaining configuration whose lower bound exceeds
   ``pareto_max_cost_ratio`` x the incumbent: it cannot be the cheapest plan, nor on the Pareto
   front within that cost range. Candidates come in bound order, so the first one over the
   line ends the search.

Determinism: batches are formed from the sorted list and the incumbent only changes between
batches, so which configurations are simulated depends on the request file alone, not on the
number of workers or which finished first. ``max_search_time_s`` may stop the search early; the
result then says ``complete: false``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inferplan.plan.cache import EvaluationCache, context_fingerprint, evaluation_key
from inferplan.plan.capacity import Prepared, SearchContext, build_context, prepare
from inferplan.plan.executor import Executor, InlineExecutor
from inferplan.plan.pareto import front
from inferplan.plan.request import PlanRequest
from inferplan.plan.space import ReplicaConfig, num_deployments, replica_configs

Progress = Callable[[dict[str, int]], None]


@dataclass
class Candidate:
    prepared: Prepared
    cost_lower_bound: float
    estimate: dict[str, Any] | None = None  # the one-replica probes' answer
    evaluation: dict[str, Any] | None = None  # the fleet's confirmation
    pruned: str | None = None  # why, when never simulated

    @property
    def cfg(self) -> ReplicaConfig:
        return self.prepared.cfg


@dataclass
class SearchResult:
    ctx: SearchContext
    candidates: list[Candidate]
    num_deployments: int
    complete: bool
    counts: dict[str, int] = field(default_factory=dict)

    def feasible(self) -> list[Candidate]:
        return [c for c in self.candidates if c.evaluation and c.evaluation["status"] == "feasible"]


def lower_bound_cost(request: PlanRequest, prep: Prepared) -> float:
    price = request.hardware[prep.cfg.hardware_index].price_per_gpu_hour
    return prep.replicas_lower_bound * prep.cfg.devices_per_replica * price


def plan_cost(request: PlanRequest, cfg: ReplicaConfig, replicas: int) -> float:
    price = request.hardware[cfg.hardware_index].price_per_gpu_hour
    return replicas * cfg.devices_per_replica * price


def run_search(
    request: PlanRequest,
    executor_factory: Callable[[SearchContext], Executor] = InlineExecutor,
    cache: EvaluationCache | None = None,
    on_progress: Progress | None = None,
    *,
    prune_by_cost: bool = True,
) -> SearchResult:
    """The whole search (module docstring). ``prune_by_cost=False`` simulates every survivor of
    the memory and latency checks (the brute force the tests compare with)."""
    started = time.monotonic()
    ctx = build_context(request)
    configs = replica_configs(request)
    candidates = [
        Candidate(prep, lower_bound_cost(request, prep))
        for prep in (prepare(ctx, cfg) for cfg in configs)
    ]
    for cand in candidates:
        cand.pruned = cand.prepared.pruned
    queue = sorted(
        (c for c in candidates if c.pruned is None), key=lambda c: (c.cost_lower_bound, c.cfg)
    )
    tasks = _Tasks(ctx, executor_factory(ctx), cache or EvaluationCache(None), on_progress)
    tasks.counts.update(_counts(candidates))
    _report(on_progress, tasks.counts)
    complete = True
    size = request.search.batch_size
    try:
        incumbent = math.inf
        while queue:
            if time.monotonic() - started > request.max_search_time_s:
                complete = False
                break
            limit = incumbent * request.search.pareto_max_cost_ratio
            if prune_by_cost and queue[0].cost_lower_bound > limit:
                break
            batch, queue = queue[:size], queue[size:]
            batch = [c for c in batch if not (prune_by_cost and c.cost_lower_bound > limit)]
            tasks.estimate(batch)
            incumbent = _confirm_cheaper(tasks, candidates, incumbent)
        for cand in queue:
            cand.pruned = "cost_bound" if complete else "time_limit"
        _confirm_fronts(tasks, candidates, incumbent, size)
    finally:
        tasks.executor.close()
    counts = _counts(candidates)
    _report(on_progress, counts)
    return SearchResult(ctx, candidates, num_deployments(configs), complete, counts)


def estimated_cost(request: PlanRequest, cand: Candidate) -> float | None:
    """The confirmed cost, else the estimate's (a lower bound on it); None if infeasible."""
    for answer in (cand.evaluation, cand.estimate):
        if answer is not None:
            if answer["status"] == "infeasible":
                return None
            return plan_cost(request, cand.cfg, answer["replicas"])
    return None


def _confirm_cheaper(tasks: _Tasks, candidates: list[Candidate], incumbent: float) -> float:
    """Confirm estimates cheaper than the incumbent, one at a time, cheapest first (each may
    lower the incumbent below the next); the new incumbent."""
    request = tasks.ctx.request
    while True:
        pending = [
            (cost, c.cfg, c)
            for c in candidates
            if c.evaluation is None
            and (cost := estimated_cost(request, c)) is not None
            and cost < incumbent
        ]
        if not pending:
            return incumbent
        chunk = [min(pending, key=lambda p: (p[0], p[1]))[2]]
        tasks.confirm(chunk)
        for cand in chunk:
            cost = estimated_cost(request, cand)
            if cost is not None:
                incumbent = min(incumbent, cost)


def _confirm_fronts(
    tasks: _Tasks, candidates: list[Candidate], incumbent: float, size: int
) -> None:
    """Confirm every member of either Pareto front (within the cost range) until all are."""
    request = tasks.ctx.request
    limit = incumbent * request.search.pareto_max_cost_ratio
    while True:
        alive = [
            c
            for c in candidates
            if (cost := estimated_cost(request, c)) is not None and cost <= limit
        ]
        figures = [_figures(request, c) for c in alive]
        members = set(front([(f[0], f[1]) for f in figures], (False, False)))
        members |= set(front([(f[2], f[3]) for f in figures], (True, True)))
        todo = [alive[i] for i in sorted(members) if alive[i].evaluation is None][:size]
        if not todo:
            return
        tasks.confirm(todo)


def _figures(request: PlanRequest, cand: Candidate) -> tuple[float, float, float, float]:
    """(cost/h, p99 TPOT ms, output tok/s per GPU, tok/s per user) from the best answer."""
    answer = cand.evaluation or cand.estimate
    assert answer is not None
    fleet = answer.get("fleet") or answer["probe"]
    cost = plan_cost(request, cand.cfg, answer["replicas"])
    gpus = answer["replicas"] * cand.cfg.devices_per_replica
    replicas = answer["replicas"] if "fleet" not in answer else 1
    per_gpu = fleet["output_tok_s"] * replicas / gpus
    per_user = 1000.0 / fleet["mean_tpot_ms"] if fleet["mean_tpot_ms"] else 0.0
    return cost, fleet["p99_tpot_ms"] or 0.0, per_gpu, per_user


class _Tasks:
    """Runs estimates and confirmations through the cache and the executor."""

    def __init__(
        self,
        ctx: SearchContext,
        executor: Executor,
        cache: EvaluationCache,
        on_progress: Progress | None,
    ) -> None:
        self.ctx, self.executor, self.cache, self.on_progress = ctx, executor, cache, on_progress
        self.fingerprint = context_fingerprint(ctx)
        self.counts: dict[str, int] = {}

    def estimate(self, batch: list[Candidate]) -> None:
        items = [("estimate", c.cfg, c.prepared.replicas_lower_bound) for c in batch]
        for cand, answer in zip(batch, self._run(items, tick=True), strict=True):
            cand.estimate = answer

    def confirm(self, batch: list[Candidate]) -> None:
        items = []
        for cand in batch:
            assert cand.estimate is not None
            items.append(("confirm", cand.cfg, cand.estimate["replicas"]))
        for cand, answer in zip(batch, self._run(items, tick=False), strict=True):
            cand.evaluation = answer

    def _run(self, items: list[tuple[str, ReplicaConfig, int]], tick: bool) -> list[dict[str, Any]]:
        keys = [evaluation_key(self.fingerprint, cfg, f"{kind}:{n}") for kind, cfg, n in items]
        answers: list[dict[str, Any] | None] = [self.cache.get(key) for key in keys]
        todo = [i for i, a in enumerate(answers) if a is None]
        for answer in answers:
            if answer is not None and tick:
                _tick(self.counts, self.on_progress)

        def done(index: int, result: dict[str, Any]) -> None:
            self.cache.put(keys[todo[index]], result)
            if tick:
                _tick(self.counts, self.on_progress)

        results = self.executor.run([items[i] for i in todo], done)
        for i, result in zip(todo, results, strict=True):
            answers[i] = result
        return [a for a in answers if a is not None]


def _tick(counts: dict[str, int], on_progress: Progress | None) -> None:
    counts["evaluated"] += 1
    counts["remaining"] -= 1
    _report(on_progress, counts)


def _report(on_progress: Progress | None, counts: dict[str, int]) -> None:
    if on_progress is not None:
        on_progress(dict(counts))


def _counts(candidates: list[Candidate]) -> dict[str, int]:
    evaluated = sum(1 for c in candidates if c.estimate is not None)
    pruned = sum(1 for c in candidates if c.pruned is not None)
    return {
        "total": len(candidates),
        "evaluated": evaluated,
        "pruned": pruned,
        "remaining": len(candidates) - evaluated - pruned,
    }


def pruned_by(candidates: list[Candidate]) -> dict[str, int]:
    out: dict[str, int] = {}
    for cand in candidates:
        if cand.pruned is not None:
            out[cand.pruned] = out.get(cand.pruned, 0) + 1
    return dict(sorted(out.items()))
