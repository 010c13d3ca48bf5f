"""What prefix caching costs the fast engine: wall seconds with and without it, and exact mode.

The workload of ``docs/prefix-caching.md``: Llama-3.1-8B on one H100, ``--dataset-name random
--random-input-len 2000 --random-prefix-len 1500``, 1,000 prompts, all at once (``inf``) and at
10 req/s. Each configuration is timed ``REPEATS`` times in this process (the plan and step model
are built once, outside the timing); reported: the median wall seconds and the simulated steps.

Run with ``python -m benchmarks.bench_prefix`` (``--repeats R``, ``--num-prompts N``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

REPEATS = 3
RATES = (math.inf, 10.0)


def _time_runs(num_prompts: int, repeats: int) -> list[dict[str, Any]]:
    from inferplan.cli_flags import build_memory_plan
    from inferplan.engine.session import ServingOptions, simulation_config
    from inferplan.engine.simulator import Simulation
    from inferplan.perf.factory import build_step_model
    from inferplan.workload import build_workload
    from inferplan.workload.prefixes import with_shared_prefix

    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    model = build_step_model(plan)
    rows = []
    for rate in RATES:
        base = build_workload(
            "random", num_prompts=num_prompts, random_input_len=2000, request_rate=rate
        )
        workload = with_shared_prefix(base, 1500)
        for caching, exact in ((True, False), (False, False), (True, True)):
            options = ServingOptions(enable_prefix_caching=caching, exact=exact)
            cfg = simulation_config(plan, options)
            walls, steps = [], 0
            for _ in range(repeats):
                start = time.perf_counter()
                result = Simulation(workload, cfg, model).run()
                walls.append(time.perf_counter() - start)
                steps = result.num_steps
            rows.append(
                {
                    "request_rate": rate,
                    "prefix_caching": caching,
                    "mode": "exact" if exact else "fast",
                    "median_wall_s": statistics.median(walls),
                    "num_steps": steps,
                }
            )
    return rows


def main(num_prompts: int = 1000, repeats: int = REPEATS) -> dict[str, float]:
    """``{"rate_inf/caching_on/fast/wall_s": ..., ".../num_steps": ...}`` (``run_all`` form)."""
    results: dict[str, float] = {}
    for row in _time_runs(num_prompts, repeats):
        on = "on" if row["prefix_caching"] else "off"
        key = f"rate_{row['request_rate']:g}/caching_{on}/{row['mode']}"
        results[f"{key}/wall_s"] = row["median_wall_s"]
        results[f"{key}/num_steps"] = row["num_steps"]
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--num-prompts", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(main(args.num_prompts, args.repeats), indent=1))
