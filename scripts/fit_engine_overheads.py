"""Fit each serving engine's host costs to the published latency rows; cross-validate them.

Rows: the published latency rows (TTFT, TPOT, ITL) of one engine class
(``perf/engine_overheads.py``: vLLM v1, SGLang), each predicted by simulating its run
(``plan/published_runs.py``) with the GPU family's bundled fractions and the engine's host
costs. Constants per engine class: ``step_overhead_s``, ``per_seq_overhead_s`` (and
``layer_overhead_s`` with ``--with-layer``), inside ``BOUNDS`` (vLLM v1: ``VLLM_BOUNDS``).
Loss: mean Huber loss of log errors (``plan/calibration.py``). Method: coordinate descent,
golden-section per constant.

Cross-validation: grouped k-fold by configuration (``case_id``), dealt round-robin in sorted
order; each fold is predicted with the constants fitted on the others, starting from the same
priors (the family files' values). The in-sample fit is written to
``perf/data/engine_overheads.yaml`` unless ``--dry-run``. Run from the repository root:

    .venv/bin/python scripts/fit_engine_overheads.py --engine vllm --dry-run
    .venv/bin/python scripts/fit_engine_overheads.py --engine vllm --engine sglang
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.engine_overheads import overhead_class
from inferplan.plan.calibration import golden_section, huber
from inferplan.plan.folds import error_rows, grouped_folds
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import RowResult, validate_rows
from inferplan.specs.hardware import load_gpu

BOUNDS: dict[str, tuple[float, float]] = {
    "step_overhead_s": (0.0, 5e-3),  # the bound fit_published.py uses for TensorRT-LLM
    "per_seq_overhead_s": (0.0, 1e-4),  # 100 us per request and step
    "layer_overhead_s": (0.0, 1e-4),
}
# vLLM v1: at most what it is measured to spend on the host (fit_frontend.py VLLM_HOSTS).
VLLM_BOUNDS = {**BOUNDS, "step_overhead_s": (0.0, 3e-3), "per_seq_overhead_s": (0.0, 2e-5)}
DATA = Path("src/inferplan/perf/data/engine_overheads.yaml")
Costs = dict[str, float]


def rows_for(engine_class: str) -> list[PublishedRow]:
    """The simulatable latency rows of one engine class."""
    return [
        r
        for r in bundled_published()
        if r.family == "latency"
        and skip_reason(r) is None
        and overhead_class(r.engine, r.engine_version) == engine_class
    ]


def predict(rows: list[PublishedRow], costs: Costs) -> list[RowResult]:
    def efficiency(row: PublishedRow) -> Efficiency:
        return replace(efficiency_for(load_gpu(row.gpu)), **costs)

    return validate_rows(rows, efficiency=efficiency)


def loss(results: list[RowResult]) -> float:
    terms = [huber(math.log(r.predicted / r.row.value)) for r in results if r.predicted]
    missing = sum(r.predicted is None for r in results)
    return (sum(terms) + missing * 1.0) / max(len(results), 1)


def fit(rows: list[PublishedRow], start: Costs, names: list[str], rounds: int, steps: int) -> Costs:
    """Coordinate descent from ``start``; a move is kept only if it lowers the loss."""
    costs, best = dict(start), loss(predict(rows, start))
    for _ in range(rounds):
        for name in names:

            def objective(value: float, name: str = name, base: Costs = costs) -> float:
                return loss(predict(rows, {**base, name: value}))

            bounds = VLLM_BOUNDS if overhead_class(rows[0].engine) == "vllm-v1" else BOUNDS
            value = golden_section(objective, *bounds[name], steps)
            trial = {**costs, name: value}
            trial_loss = loss(predict(rows, trial))
            if trial_loss < best:
                costs, best = trial, trial_loss
            print(f"    {name} -> {costs[name]:.4g} (loss {best:.4f})", file=sys.stderr)
    return costs


def priors(rows: list[PublishedRow], names: list[str]) -> Costs:
    """Every fit's start: the family file's values (the same for every family in use)."""
    eff = efficiency_for(load_gpu(rows[0].gpu))
    return {name: float(getattr(eff, name)) for name in names}


def cross_validate(
    rows: list[PublishedRow], start: Costs, names: list[str], k: int, rounds: int, steps: int
) -> list[RowResult]:
    out: list[RowResult] = []
    for i, (train, held) in enumerate(grouped_folds(rows, k)):
        costs = fit(train, start, names, rounds, steps)
        out.extend(predict(held, costs))
        print(f"  fold {i + 1}/{k}: {costs}", file=sys.stderr, flush=True)
    return out


def table(results: list[RowResult], label: str) -> str:
    lines = [f"| {label} | n | median | p90 | signed median |", "|---|---:|---:|---:|---:|"]
    groups: dict[str, list[float]] = {"all": []}
    for r in results:
        if r.error is not None:
            groups["all"].append(r.error)
            groups.setdefault(r.row.metric.split("_")[0], []).append(r.error)
    return "\n".join(lines + error_rows(groups))


def write(fitted: dict[str, Costs]) -> None:
    current = yaml.safe_load(DATA.read_text()) or {}
    current.update({k: {n: float(f"{v:.4g}") for n, v in c.items()} for k, c in fitted.items()})
    header = [line for line in DATA.read_text().splitlines() if line.startswith("#")]
    DATA.write_text("\n".join(header) + "\n" + yaml.safe_dump(current, sort_keys=True))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", action="append", choices=("vllm", "sglang"), required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="golden-section steps per constant")
    parser.add_argument("--with-layer", action="store_true", help="fit layer_overhead_s too")
    parser.add_argument("--no-cv", action="store_true", help="in-sample fit only")
    parser.add_argument("--dry-run", action="store_true", help="write nothing")
    args = parser.parse_args(argv)
    names = ["step_overhead_s", "per_seq_overhead_s"] + (["layer_overhead_s"] * args.with_layer)
    fitted: dict[str, Costs] = {}
    for engine in args.engine:
        engine_class = overhead_class(engine) or engine
        rows = rows_for(engine_class)
        start = priors(rows, names)
        print(f"## {engine_class}: {len(rows)} latency rows\n")
        print(table(predict(rows, start), "priors") + "\n")
        fitted[engine_class] = fit(rows, start, names, args.rounds, args.steps)
        print(f"fitted: {fitted[engine_class]}\n")
        print(table(predict(rows, fitted[engine_class]), "in-sample") + "\n")
        if not args.no_cv:
            results = cross_validate(rows, start, names, args.folds, args.rounds, args.steps)
            print(table(results, "cross-validated") + "\n", flush=True)
    if not args.dry_run:
        write(fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
