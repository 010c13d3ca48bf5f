"""Instructions a regime's simulation executes, counted by Valgrind's callgrind: a cost measure
that other jobs on a shared machine do not move (CPU seconds there vary by +-15 % run to run).

Builds one regime of ``bench_regimes.py`` at a small size, then runs only ``Simulation.run``
with callgrind's instrumentation on (``callgrind_control -i on/off`` around it), so imports,
the plan and the workload are not counted. About 50x slower than a plain run: keep the sizes
small (a few hundred requests).

Run: ``python -m benchmarks.bench_instructions vidur:500 near:300 million:400`` (needs
``valgrind``); prints one line per regime: its name, requests and instructions. At such sizes
most admission steps compile a new step plan, which a long run mostly finds cached: a spec
``near:300@3000`` simulates 3,300 requests and counts only while the 3,001st to 3,300th
complete (toggled from ``Simulation.run``'s progress callback), a steady state's cost.
``--served`` first: on the workload ``inferplan simulate`` runs (``session.served_workload``:
vLLM v1's own blocks where they apply), not the workload as generated.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile


def _run_instrumented(
    name: str, num_requests: int, warm_requests: int = 0, served: bool = False
) -> None:
    """In the process callgrind runs: build the regime, count ``Simulation.run`` only (after
    ``warm_requests`` have completed, until ``num_requests`` more have; ``served``: on the
    workload ``inferplan simulate`` runs, own blocks included)."""
    from benchmarks.bench_regimes import REGIMES, _workload
    from inferplan.cli_flags import build_memory_plan
    from inferplan.engine.session import ServingOptions, served_workload, simulation_config
    from inferplan.engine.simulator import Simulation
    from inferplan.perf.factory import build_step_model

    regime = REGIMES[name]
    plan = build_memory_plan(
        regime.model, regime.gpu, regime.tp, 1, False, None, "auto", regime.max_model_len,
        0.9, regime.max_num_batched_tokens, regime.max_num_seqs, None, dp=regime.dp,
    )  # fmt: skip
    workload = _workload(regime, warm_requests + num_requests, plan.max_model_len)
    options = ServingOptions(data_parallel_size=regime.dp)
    cfg = simulation_config(plan, options)
    if served:
        workload = served_workload(workload, options, cfg)
    sim = Simulation(workload, cfg, build_step_model(plan))
    toggle = ["callgrind_control", "-i"]
    done, counting = 0, [False]

    def instrument(on: bool) -> None:
        state = "on" if on else "off"
        subprocess.run([*toggle, state, str(os.getpid())], check=True, capture_output=True)
        counting[0] = on

    def on_progress(num_done: int) -> None:
        nonlocal done
        done += num_done
        if not counting[0] and warm_requests <= done < warm_requests + num_requests:
            instrument(True)
        elif counting[0] and done >= warm_requests + num_requests:
            instrument(False)

    if warm_requests == 0:
        instrument(True)
    sim.run(on_progress)
    if counting[0]:
        instrument(False)


def count(name: str, num_requests: int, warm_requests: int = 0, served: bool = False) -> int:
    """Instructions of ``Simulation.run`` for ``num_requests`` of regime ``name`` (after
    ``warm_requests`` completed ones)."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={tmp}/callgrind.out",
            sys.executable, "-m", "benchmarks.bench_instructions", "--inside", name,
            str(num_requests), str(warm_requests), *(["served"] if served else []),
        ]  # fmt: skip
        out = subprocess.run(argv, check=True, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count:\n{out.stderr[-2000:]}")
    return int(found.group(1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        served = sys.argv[5:6] == ["served"]
        _run_instrumented(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), served)
    else:
        served = sys.argv[1:2] == ["--served"]
        for spec in sys.argv[1 + served :]:
            regime, sizes = spec.split(":")
            num, _, warm = sizes.partition("@")
            print(regime, sizes, count(regime, int(num), int(warm or 0), served))
