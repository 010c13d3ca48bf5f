"""The search: enumerate, prune, evaluate the survivors cheapest-bound first, stop early.

1. Every replica configuration (``space``) is checked on the memory axis and bounded on the
   compute axis (``capacity.prepare``): pruned when it cannot fit, when a latency floor already
   misses an SLO, or when even the throughput bound needs more GPUs than allowed.
2. Survivors are sorted by their *cost lower bound* (fewest replicas the throughput bound
   allows x GPUs per replica x price) and evaluated in batches of ``search.batch_size``
   (simulation, ``capacity.evaluate``), in parallel inside a batch.
3. After each batch the cheapest feasible cost so far (the incumbent) prunes every remaining
   configuration whose lower bound exceeds ``pareto_max_cost_ratio`` x the incumbent: it cannot
   be the cheapest plan, nor on the Pareto front within that cost range. Since candidates come
   in bound order, the first one over the line ends the search.

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
from inferplan.plan.request import PlanRequest
from inferplan.plan.space import ReplicaConfig, num_deployments, replica_configs

Progress = Callable[[dict[str, int]], None]


@dataclass
class Candidate:
    prepared: Prepared
    cost_lower_bound: float
    evaluation: dict[str, Any] | None = None
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
    cache = cache or EvaluationCache(None)
    fingerprint = context_fingerprint(ctx)
    counts = _counts(candidates)
    _report(on_progress, counts)
    executor = executor_factory(ctx)
    complete = True
    try:
        incumbent = math.inf
        while queue:
            if time.monotonic() - started > request.max_search_time_s:
                complete = False
                break
            limit = incumbent * request.search.pareto_max_cost_ratio
            if prune_by_cost and queue[0].cost_lower_bound > limit:
                break
            batch, queue = queue[: request.search.batch_size], queue[request.search.batch_size :]
            batch = [c for c in batch if not (prune_by_cost and c.cost_lower_bound > limit)]
            _evaluate_batch(batch, executor, cache, fingerprint, counts, on_progress)
            for cand in batch:
                assert cand.evaluation is not None
                if cand.evaluation["status"] == "feasible":
                    cost = plan_cost(request, cand.cfg, cand.evaluation["replicas"])
                    incumbent = min(incumbent, cost)
        for cand in queue:
            cand.pruned = "cost_bound" if complete else "time_limit"
    finally:
        executor.close()
    counts = _counts(candidates)
    _report(on_progress, counts)
    return SearchResult(ctx, candidates, num_deployments(configs), complete, counts)


def _evaluate_batch(
    batch: list[Candidate],
    executor: Executor,
    cache: EvaluationCache,
    fingerprint: str,
    counts: dict[str, int],
    on_progress: Progress | None,
) -> None:
    keys = [evaluation_key(fingerprint, c.cfg) for c in batch]
    todo = []
    for cand, key in zip(batch, keys, strict=True):
        cand.evaluation = cache.get(key)
        if cand.evaluation is None:
            todo.append(cand)
        else:
            _tick(counts, on_progress)

    def done(index: int, result: dict[str, Any]) -> None:
        cache.put(evaluation_key(fingerprint, todo[index].cfg), result)
        _tick(counts, on_progress)

    results = executor.run([(c.cfg, c.prepared.replicas_lower_bound) for c in todo], done)
    for cand, result in zip(todo, results, strict=True):
        cand.evaluation = result


def _tick(counts: dict[str, int], on_progress: Progress | None) -> None:
    counts["evaluated"] += 1
    counts["remaining"] -= 1
    _report(on_progress, counts)


def _report(on_progress: Progress | None, counts: dict[str, int]) -> None:
    if on_progress is not None:
        on_progress(dict(counts))


def _counts(candidates: list[Candidate]) -> dict[str, int]:
    evaluated = sum(1 for c in candidates if c.evaluation is not None)
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
