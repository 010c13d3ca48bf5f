"""Pure Python against the mypyc-compiled engine (``make compile``, docs/simulator.md): CPU
seconds of ``bench_regimes`` regimes, pure and compiled runs interleaved.

Each run is ``python -m benchmarks.bench_regimes --one REGIME`` in a fresh process, with
``INFERPLAN_PURE=1`` (pure) or ``0`` (compiled); the pairs alternate which goes first, so a
change in the machine's load falls on both. Reported per regime: the median CPU seconds of the
simulation (``process_time``, plus its workers' with ``--sim-workers``) each way and their
ratio. Needs a current build: a stale or missing one runs pure both ways, which this refuses.

Run: ``python -m benchmarks.native_speedup near vidur --repeats 3`` (``--num-requests N``
scales the regimes down, ``--bare`` drops vLLM v1's own blocks as ``bench_regimes`` does,
``--sim-workers N`` runs the replicas apart in N processes, ``engine/apart.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def _cpu_s(
    regime: str, pure: bool, num_requests: int | None, bare: bool, sim_workers: str = "1"
) -> dict[str, float]:
    argv = [sys.executable, "-m", "benchmarks.bench_regimes", "--one", regime]
    argv += ["--sim-workers", sim_workers]
    if num_requests is not None:
        argv += ["--num-requests", str(num_requests)]
    if bare:
        argv.append("--bare")
    env = {**os.environ, "INFERPLAN_PURE": "1" if pure else "0"}
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    if not pure and "compiled modules out of date" in out.stderr:  # a source edited meanwhile
        raise SystemExit(f"error: {regime}: the build went stale during the measurement")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["cpu_s"] += result["workers_cpu_s"]  # the simulation's CPU, in every process
    return result


def _mode() -> str:
    code = "from inferplan import native; print(native.mode)"
    env = {**os.environ, "INFERPLAN_PURE": "0"}
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)
    return done.stdout.decode().strip()


def main(
    regimes: list[str],
    repeats: int = 3,
    num_requests: int | None = None,
    bare: bool = False,
    sim_workers: str = "1",
) -> dict[str, object]:
    if _mode() != "compiled":
        raise SystemExit("error: no current compiled build (run `make compile` first)")
    results: dict[str, object] = {}
    for regime in regimes:
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for i in range(repeats):
            order = (True, False) if i % 2 == 0 else (False, True)
            for pure in order:
                runs[pure].append(_cpu_s(regime, pure, num_requests, bare, sim_workers))
        for pure, name in ((True, "pure"), (False, "compiled")):
            cpu = [r["cpu_s"] for r in runs[pure]]
            results[f"{regime}_{name}_cpu_s"] = statistics.median(cpu)
            results[f"{regime}_{name}_cpu_s_runs"] = cpu
        steps = {r["num_steps"] for r in runs[True] + runs[False]}
        if len(steps) != 1:  # the same simulation both ways
            raise SystemExit(f"error: {regime}: pure and compiled took different steps {steps}")
        pure_s = statistics.median(r["cpu_s"] for r in runs[True])
        results[f"{regime}_speedup"] = pure_s / statistics.median(r["cpu_s"] for r in runs[False])
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("regimes", nargs="+")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--sim-workers", default="1", help="N processes, or auto")
    args = parser.parse_args()
    results = main(args.regimes, args.repeats, args.num_requests, args.bare, args.sim_workers)
    print(json.dumps(results, indent=1))
