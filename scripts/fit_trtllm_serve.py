"""Fit ``trtllm-serve``'s host costs and kernel factors to its published rows; cross-validate.

Rows: every simulatable row (latency and throughput) of the runs measured against
``trtllm-serve`` (``plan/trtllm_serve.py``: GPUStack's ``vllm bench serve`` outputs of
TensorRT-LLM 1.0 and 1.2rc1), each predicted by simulating its run with the GPU family's
constants, the PyTorch backend release's (``plan/data/published_cpu_costs.yaml``) and the
candidate constants, behind the overlap scheduler.

Constants, each on a grid inside its bound:

- ``step_overhead_s`` 0-20 ms and ``per_seq_overhead_s`` 0-300 us: the executor's host work per
  step and per request in flight (scheduling, input preparation, a streamed response per
  request and step), hidden behind the GPU's work by the overlap scheduler.
- ``eager_layer_overhead_s`` 10-300 us per decoder layer of a step that runs without a CUDA
  graph (every step with a context, decode batches other than ``1..32, 64, 128``): PyTorch
  launching a layer's 10-20 kernels one by one from Python.
- One GEMM compute factor, 1, 0.75, 0.55, 0.4 or 0.3, shared by the kernel classes ``fp8``
  (block-scaled FP8 checkpoints), ``mxfp4`` and ``mla`` (``perf/engine_kernels.py``); ``bf16``
  is the reference (1): ``trtllm-bench`` runs the same BF16 kernels. Shared, because ``fp8`` and
  ``mla`` are one configuration each: a factor per class cannot be cross-validated (the fold
  that holds its configuration out has no row to fit it on; fitted apart, every class took 0.3).

Loss: mean Huber loss of log errors over the rows (a row with no prediction counts 1). Method:
coordinate descent over the grids from the release's constants, ``--rounds`` passes. Each run is
simulated once per distinct (host costs, its class's factor) and cached, so the folds share work.
Cross-validation: grouped k-fold by configuration (``case_id``, ``plan/folds.py``). Run from the
repository root (``--write`` stores the in-sample fit in ``plan/data/trtllm_serve.yaml``):

    .venv/bin/python scripts/fit_trtllm_serve.py
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import yaml

from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.engine_kernels import plan_kernel_class
from inferplan.plan.calibration import huber
from inferplan.plan.folds import error_rows, grouped_folds
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    RowResult,
    burst_reason,
    memory_plan,
    run_setup,
    validate_rows,
)
from inferplan.plan.served import host_efficiency
from inferplan.plan.trtllm_serve import ServeConstants, is_trtllm_serve, serve_efficiency
from inferplan.specs.hardware import load_gpu

MS, US = 1e-3, 1e-6
HOST_GRID = {
    "step_overhead_s": [0.0, 2 * MS, 5 * MS, 10 * MS, 20 * MS],
    "per_seq_overhead_s": [0.0, 25 * US, 50 * US, 100 * US, 150 * US, 200 * US, 300 * US],
    "eager_layer_overhead_s": [10 * US, 50 * US, 100 * US, 200 * US, 300 * US],
}
FACTOR_GRID = [1.0, 0.75, 0.55, 0.4, 0.3]
FITTED_KERNELS = ("fp8", "mxfp4", "mla")
SHARED = "kernels"  # the one factor of FITTED_KERNELS
DATA = Path("src/inferplan/plan/data/trtllm_serve.yaml")
Constants = dict[str, float]  # host fields and kernel classes


class Runs:
    """The rows by run, each run's predictions cached by the constants that reach it."""

    def __init__(self, rows: list[PublishedRow]) -> None:
        self.runs: dict[tuple[object, ...], list[PublishedRow]] = {}
        for row in rows:
            self.runs.setdefault(row.run_key, []).append(row)
        self.kernel = {
            k: plan_kernel_class(memory_plan(run_setup(r[0]))) for k, r in self.runs.items()
        }
        self.cache: dict[tuple[object, ...], list[RowResult]] = {}

    def predict(self, key: tuple[object, ...], constants: Constants) -> list[RowResult]:
        kernel = self.kernel[key]
        host = {n: constants[n] for n in HOST_GRID}
        factor = constants[SHARED] if kernel in FITTED_KERNELS else 1.0
        cache_key = (key, *host.values(), factor)
        if cache_key not in self.cache:
            serve = ServeConstants(host, {kernel: factor})

            def efficiency(row: PublishedRow) -> Efficiency:
                plan = memory_plan(run_setup(row))
                release = host_efficiency(
                    efficiency_for(load_gpu(row.gpu)), "trtllm", row.engine_version
                )
                return serve_efficiency(release, plan, serve)

            self.cache[cache_key] = validate_rows(self.runs[key], efficiency=efficiency)
        return self.cache[cache_key]

    def results(self, cases: set[str], constants: Constants) -> list[RowResult]:
        out: list[RowResult] = []
        for key, rows in self.runs.items():
            if rows[0].case_id in cases:
                out.extend(self.predict(key, constants))
        return out


def loss(results: list[RowResult]) -> float:
    terms = [huber(math.log(r.predicted / r.row.value)) if r.predicted else 1.0 for r in results]
    return sum(terms) / max(len(terms), 1)


def fit(runs: Runs, cases: set[str], start: Constants, rounds: int) -> Constants:
    """Coordinate descent over the grids; a move is kept only if it lowers the loss."""
    best, best_loss = dict(start), loss(runs.results(cases, start))
    grids = {**HOST_GRID, SHARED: FACTOR_GRID}
    for _ in range(rounds):
        for name, grid in grids.items():
            for value in grid:
                trial = {**best, name: value}
                trial_loss = loss(runs.results(cases, trial))
                if trial_loss < best_loss - 1e-12:
                    best, best_loss = trial, trial_loss
    return best


def table(results: list[RowResult], label: str) -> str:
    lines = [f"| {label} | n | median | p90 | signed median |", "|---|---:|---:|---:|---:|"]
    groups: dict[str, list[float]] = {"latency": [], "throughput": []}
    for r in results:
        if r.error is not None:
            groups[r.row.family].append(r.error)
            name = "throughput rows" if r.row.family == "throughput" else r.row.metric.split("_")[0]
            groups.setdefault(name, []).append(r.error)
            groups.setdefault(f"{r.row.gpu} {r.row.family}", []).append(r.error)
    return "\n".join(lines + error_rows(groups))


def priors(rows: list[PublishedRow]) -> Constants:
    """Where every fit starts: the PyTorch backend release's host costs, factors 1."""
    release = host_efficiency(efficiency_for(load_gpu(rows[0].gpu)), "trtllm", "1.0")
    start = {n: float(getattr(release, n)) for n in HOST_GRID}
    return {**start, SHARED: 1.0}


def write(fitted: Constants) -> None:
    host = {n: float(f"{fitted[n]:.4g}") for n in HOST_GRID}
    kernels = {k: fitted[SHARED] for k in FITTED_KERNELS if fitted[SHARED] != 1.0}
    header = [line for line in DATA.read_text().splitlines() if line.startswith("#")]
    body = yaml.safe_dump({"host": host, "kernels": kernels}, sort_keys=True)
    DATA.write_text("\n".join(header) + "\n" + body)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-cv", action="store_true", help="in-sample fit only")
    parser.add_argument("--write", action="store_true", help="store the in-sample fit")
    args = parser.parse_args(argv)
    rows = [r for r in bundled_published() if is_trtllm_serve(r) and skip_reason(r) is None]
    rows = [r for r in rows if burst_reason(r) is None]  # listed by validate, not predicted
    runs, cases = Runs(rows), {r.case_id for r in rows}
    start = priors(rows)
    print(f"## trtllm-serve: {len(rows)} rows, {len(cases)} configurations\n")
    print(table(runs.results(cases, start), "priors") + "\n", flush=True)
    fitted = fit(runs, cases, start, args.rounds)
    print(f"fitted: {fitted}\n")
    print(table(runs.results(cases, fitted), "in-sample") + "\n", flush=True)
    if not args.no_cv:
        held_out: list[RowResult] = []
        for i, (train, held) in enumerate(grouped_folds(rows, args.folds)):
            constants = fit(runs, {r.case_id for r in train}, start, args.rounds)
            held_out.extend(runs.results({r.case_id for r in held}, constants))
            print(f"  fold {i + 1}/{args.folds}: {constants}", file=sys.stderr, flush=True)
        print(table(held_out, "cross-validated") + "\n")
    if args.write:
        write(fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
