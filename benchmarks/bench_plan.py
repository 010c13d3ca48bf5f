"""The planner on the bundled example (``plan/data/plan-example.yaml``): search size and time.

Runs ``inferplan plan`` on the example from an empty cache with 1 and with 2 local worker
processes (``BENCH_PLAN_WORKERS=2`` runs only the 2-worker search) and reports the candidate
count before pruning, how many configurations were simulated and how many simulations that
took (early-stopped ones included), whether the search finished, the wall time of each
search, the speed-up, and whether both found the same plan (they must: the search is
deterministic). CPU
seconds (this process and its workers) are reported beside the wall time: on a shared machine
the wall time depends on the other load, the CPU time much less.
``python -m benchmarks.bench_plan`` prints the JSON of one run; ``benchmarks.run_all`` runs it
with the others.
"""

from __future__ import annotations

import json
import os
import resource
import time
from importlib import resources
from pathlib import Path
from typing import Any

from inferplan.plan.executor import make_executor
from inferplan.plan.request import load_request
from inferplan.plan.result import build_output
from inferplan.plan.search import run_search

EXAMPLE = Path(str(resources.files("inferplan.plan").joinpath("data/plan-example.yaml")))


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def search(workers: int) -> tuple[dict[str, Any], float, float]:
    """The search's output (plus ``simulations``: every simulation run, early-stopped ones
    included), its wall seconds and the CPU seconds it used."""
    request = load_request(EXAMPLE)
    start, cpu = time.perf_counter(), _cpu_s()
    result = run_search(request, lambda ctx: make_executor(ctx, workers, None))
    out = build_output(result, run_stress=False)
    out["simulations"] = sum(
        answer["simulations"]
        for cand in result.candidates
        for answer in (cand.estimate, cand.evaluation)
        if answer is not None
    )
    return out, time.perf_counter() - start, _cpu_s() - cpu


def _best(out: dict[str, Any]) -> str | None:
    best = out["best"]
    if best is None:
        return None
    keys = ("data_parallel_size", "gpu", "tensor_parallel_size", "pipeline_parallel_size")
    return " ".join(str(best[k]) for k in keys) + f" {best['quantization']} {best['max_num_seqs']}"


def main() -> dict[str, Any]:
    only = os.environ.get("BENCH_PLAN_WORKERS")
    worker_counts = [int(only)] if only else [1, 2]
    results: dict[str, Any] = {}
    plans = []
    for workers in worker_counts:
        out, wall_s, cpu_s = search(workers)
        results[f"search_wall_s_workers_{workers}"] = wall_s
        results[f"search_cpu_s_workers_{workers}"] = cpu_s
        results[f"evaluated_workers_{workers}"] = out["evaluated"]
        results[f"complete_workers_{workers}"] = out["complete"]
        results[f"simulations_workers_{workers}"] = out["simulations"]
        plans.append(_best(out))
        results["candidates"] = out["candidates"]
        results["replica_configs"] = out["replica_configs"]
        results["pruned"] = out["pruned"]
        results["best_cost_per_hour_usd"] = (
            out["best"]["cost_per_hour_usd"] if out["best"] else None
        )
    if len(worker_counts) == 2:
        results["speedup_2_vs_1"] = (
            results["search_wall_s_workers_1"] / results["search_wall_s_workers_2"]
        )
        results["same_plan"] = plans[0] == plans[1]
    results["best"] = plans[-1]
    return results


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
