"""The fast engine in every load regime (issue 10, item 3): wall seconds and peak memory.

Each regime is one ``Simulation`` built as ``inferplan simulate`` builds it (vLLM v1 defaults
unless the regime sets a flag; the workload as ``session.served_workload`` gives it, so vLLM
v1's own-block re-hits are included where they apply, i.e. up to ``MAX_HASHED_BLOCKS`` blocks
of prompt + output: at full size ``vidur`` only, scaled down with ``--num-requests`` all of
them; ``--bare``: without), run in fast mode in a fresh subprocess, so its peak RSS
(``ru_maxrss``: Python, numpy and the model included) is its own. Reported: wall seconds of the
simulation (building the plan and workload excluded) and its CPU seconds (``process_time``),
which a machine shared with other jobs inflates less than wall time:

- ``near``: 100,000 ``reasoning`` requests (outputs: 45 % above 5,000 tokens, mean ~5,400, cap
  32k) on Llama-3.1-8B, one H200, Poisson at 0.65 req/s: just below the replica's capacity.
  Capacity measured as requests served per simulated second when arrivals outrun it: the
  100,000 requests at 1 req/s (``above``) end at 143,773 s, 0.70 req/s (2026-12-01); at
  0.65 req/s 10,000 requests see no preemption and are served at the arrival rate.
- ``above``: the same at 1 req/s (1.4x capacity; this was ``near`` before the capacity was
  measured): the KV pool stays full and recompute preemption cycles (admit, decode until the
  pool runs out, preempt), about nine preemptions per request.
- ``overload``: the same at 3 req/s, over four times what the replica serves: the queue grows
  and preemptions come in bursts.
- ``long10x``: every output 10x longer (capped so prompt + output fits the model's max length)
  at 0.1 req/s, the same offered output tokens/s as ``above``: cost should follow events, not
  tokens. Above capacity too, so the queue heads are preempted requests recomputing tens of
  thousands of tokens, which a full pool admits and preempts again every few steps
  (``engine/thrash.py``).
- ``vidur``: the configuration of Vidur's README example run, here Llama-3.1-70B (Llama-3-70B's
  architecture; not bundled) TP2 on A100-SXM-80GB, 100,000 requests of 512 prompt / 128 output
  tokens, Poisson at 2.5 req/s, ``--max-num-seqs 128 --max-num-batched-tokens 4096
  --max-model-len 4096``.
- ``million``: 1,000,000 requests with Azure 2023 conversation lengths (drawn with replacement
  from the bundled trace's rows, seed 0) on 8 DP replicas of Llama-3.1-8B on H200, Poisson at
  ``MILLION_RATE`` req/s.

Run: ``python -m benchmarks.bench_regimes`` (every regime once; ``--repeats R``), one regime:
``python -m benchmarks.bench_regimes --one near`` (``--num-requests N`` scales it down).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

REPEATS = 1
MILLION_RATE = 80.0  # req/s over 8 replicas


@dataclass(frozen=True)
class Regime:
    model: str
    gpu: str
    num_requests: int
    rate: float
    dataset: str  # reasoning | random | azure
    tp: int = 1
    dp: int = 1
    output_scale: int = 1
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


REGIMES = {
    "near": Regime("Llama-3.1-8B", "h200", 100_000, 0.65, "reasoning"),
    "above": Regime("Llama-3.1-8B", "h200", 100_000, 1.0, "reasoning"),
    "overload": Regime("Llama-3.1-8B", "h200", 100_000, 3.0, "reasoning"),
    "long10x": Regime("Llama-3.1-8B", "h200", 100_000, 0.1, "reasoning", output_scale=10),
    "vidur": Regime(
        "Llama-3.1-70B",
        "a100_sxm_80gb",
        100_000,
        2.5,
        "random",
        tp=2,
        max_model_len=4096,
        max_num_seqs=128,
        max_num_batched_tokens=4096,
    ),
    "million": Regime("Llama-3.1-8B", "h200", 1_000_000, MILLION_RATE, "azure", dp=8),
}


def _workload(regime: Regime, num_requests: int, max_model_len: int) -> Any:
    from inferplan.workload import Workload, build_workload

    if regime.dataset == "random":
        return build_workload(
            "random", num_prompts=num_requests, random_input_len=512, random_output_len=128,
            request_rate=regime.rate, seed=0,
        )  # fmt: skip
    if regime.dataset == "azure":
        rows = build_workload("trace", dataset_path="azure_llm_2023_conv")
        pick = np.random.default_rng(0).integers(0, rows.num_requests, num_requests)
        timed = build_workload("random", num_prompts=num_requests, request_rate=regime.rate, seed=0)
        return Workload(
            arrival_s=timed.arrival_s,
            input_tokens=rows.input_tokens[pick],
            output_tokens=rows.output_tokens[pick],
            class_ids=np.zeros(num_requests, dtype=np.int64),
        )
    base = build_workload("reasoning", num_prompts=num_requests, request_rate=regime.rate, seed=0)
    room = max_model_len - base.input_tokens
    return Workload(
        arrival_s=base.arrival_s,
        input_tokens=base.input_tokens,
        output_tokens=np.minimum(base.output_tokens * regime.output_scale, room).astype(np.int64),
        class_ids=base.class_ids,
    )


def measure_once(
    name: str, num_requests: int | None = None, *, bare: bool = False, sim_workers: int | None = 1
) -> dict[str, float]:
    """Build and run one regime in this process; its wall time and this process's peak RSS
    (``bare``: the workload as generated, without ``session.served_workload``'s own blocks;
    ``sim_workers`` > 1: replicas apart in that many processes, ``engine/apart.py``, whose CPU
    seconds and peak RSS are reported beside this process's; None: ``apart.auto_workers``).
    Beside the run: the CPU seconds of generating the workload and of summarising the result
    (``metrics.summary.summarize``, as ``inferplan simulate`` does, without the front end)."""
    from inferplan.cli_flags import build_memory_plan
    from inferplan.engine.apart import auto_workers, run_apart
    from inferplan.engine.session import ServingOptions, served_workload, simulation_config
    from inferplan.engine.simulator import Simulation
    from inferplan.metrics.steptrace import combine_usage
    from inferplan.metrics.summary import summarize
    from inferplan.perf.factory import build_step_model

    regime = REGIMES[name]
    num = regime.num_requests if num_requests is None else num_requests
    plan = build_memory_plan(
        regime.model, regime.gpu, regime.tp, 1, False, None, "auto", regime.max_model_len,
        0.9, regime.max_num_batched_tokens, regime.max_num_seqs, None, dp=regime.dp,
    )  # fmt: skip
    model = build_step_model(plan)
    workload_cpu = time.process_time()
    workload = _workload(regime, num, plan.max_model_len)
    workload_cpu_s = time.process_time() - workload_cpu
    options = ServingOptions(data_parallel_size=regime.dp)
    cfg = simulation_config(plan, options)
    if not bare:  # what ``inferplan simulate`` runs: vLLM v1's own blocks included
        workload = served_workload(workload, options, cfg)
    start, start_cpu = time.perf_counter(), time.process_time()
    children_before = _children_cpu_s()
    sim = Simulation(workload, cfg, model)
    workers = auto_workers(sim) if sim_workers is None else sim_workers
    res = sim.run() if workers == 1 else run_apart(sim, workers)
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    summary_cpu = time.process_time()
    usage = combine_usage([u for u in (t.summary() for t in res.traces) if u is not None])
    summarize(res.records, res.itl, duration_s=res.duration_s, kv_usage=usage)
    summary_cpu_s = time.process_time() - summary_cpu
    return {
        "sim_workers": float(workers),
        "workload_cpu_s": workload_cpu_s,
        "summary_cpu_s": summary_cpu_s,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "workers_cpu_s": _children_cpu_s() - children_before,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "workers_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "num_requests": float(num),
        "num_steps": float(res.num_steps),
        "output_tokens": float(res.records.output_tokens.sum()),
        "completed": float(np.sum(res.records.status == 0)),
        "preemptions": float(res.records.num_preemptions.sum()),
        "simulated_s": res.duration_s,
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _in_subprocess(name: str, num_requests: int | None, bare: bool) -> dict[str, float]:
    argv = [sys.executable, "-m", "benchmarks.bench_regimes", "--one", name]
    if num_requests is not None:
        argv += ["--num-requests", str(num_requests)]
    if bare:
        argv.append("--bare")
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(
    repeats: int = REPEATS, num_requests: int | None = None, bare: bool = False
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in REGIMES:
        runs = [_in_subprocess(name, num_requests, bare) for _ in range(repeats)]
        results[f"{name}_wall_s"] = statistics.median(r["wall_s"] for r in runs)
        results[f"{name}_cpu_s"] = statistics.median(r["cpu_s"] for r in runs)
        results[f"{name}_peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
        for key in ("num_requests", "num_steps", "preemptions", "simulated_s"):
            results[f"{name}_{key}"] = runs[0][key]
    # The same offered output tokens/s: ``long10x`` against ``above``, CPU (less noisy).
    results["long10x_over_above"] = results["long10x_cpu_s"] / results["above_cpu_s"]
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", choices=sorted(REGIMES))
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument(
        "--bare", action="store_true", help="the workload as generated, without own blocks"
    )
    parser.add_argument(
        "--sim-workers", default="1", help="replicas apart in N processes, or auto (--one)"
    )
    args = parser.parse_args()
    if args.one:
        workers = None if args.sim_workers == "auto" else int(args.sim_workers)
        result = measure_once(args.one, args.num_requests, bare=args.bare, sim_workers=workers)
        print(json.dumps(result))
    else:
        print(json.dumps(main(args.repeats, args.num_requests, args.bare), indent=2))
