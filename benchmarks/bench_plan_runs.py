"""One planner probe and one fleet run of the bundled example: the engine's CPU seconds against
the HTTP front end's (``engine/frontend.py``), as the planner runs it (no ITL statistics).

The example's fp8 H200 TP1 replica (256 sequences, 2,048 batched tokens): a probe of one
replica carrying a quarter of the traffic (300 s of arrivals) and a fleet of four replicas at
the full traffic (600 s). ``python -m benchmarks.bench_plan_runs`` prints the JSON; CPU seconds,
the front end's the median of three.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from benchmarks.bench_plan import EXAMPLE
from inferplan.engine.frontend import seen_result
from inferplan.engine.session import ServingOptions, simulate
from inferplan.plan.capacity import _Runner, build_context
from inferplan.plan.request import load_request
from inferplan.plan.space import replica_configs
from inferplan.plan.traffic import class_counts, mixed_workload


def _run(runner: _Runner, scale: float, replicas: int, window_s: float) -> dict[str, Any]:
    request = runner.ctx.request
    workload = mixed_workload(request, scale, class_counts(request, scale, window_s))
    options = ServingOptions(data_parallel_size=replicas, engine=runner.cfg.engine)
    start = time.process_time()
    result = simulate(runner.plan, runner.model, workload, options)
    simulation_s = time.process_time() - start
    front_s = []
    for _ in range(3):
        start = time.process_time()
        seen_result(result, runner.frontend, with_itl=False)
        front_s.append(time.process_time() - start)
    return {
        "requests": workload.num_requests,
        "output_tokens": int(result.records.output_tokens.sum()),
        "simulation_cpu_s": simulation_s,
        "frontend_cpu_s": statistics.median(front_s),
    }


def main() -> dict[str, Any]:
    request = load_request(EXAMPLE)
    ctx = build_context(request)
    cfg = next(
        c
        for c in replica_configs(request)
        if (c.gpu, c.tp, c.pp, c.quantization, c.max_num_seqs, c.max_num_batched_tokens)
        == ("h200", 1, 1, "fp8", 256, 2048)
    )
    runner = _Runner(ctx, cfg)
    search = request.search
    probe = _run(runner, ctx.load_scale / 4, 1, search.window_s)
    fleet = _run(runner, ctx.load_scale, 4, search.fleet_window_s)
    return {
        **{f"probe_{key}": value for key, value in probe.items()},
        **{f"fleet_4_replicas_{key}": value for key, value in fleet.items()},
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
