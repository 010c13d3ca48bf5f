"""Fit each GPU family's constants to the published table, and cross-validate by configuration.

Rows: the published throughput rows predicted in closed form (``trtllm-bench`` offline runs on
fixed lengths, ``plan/published_runs.py``), grouped by GPU family (Hopper, Blackwell, Ampere,
Ada). Constants fitted per family, inside physical bounds (fractions of a datasheet peak in
(0, 1]; overheads >= 0): ``FIT_BOUNDS``. Loss: mean Huber loss of log errors
(``plan/calibration.py``). Method: coordinate descent, each constant by golden-section search.

Cross-validation: grouped k-fold by configuration (``case_id``): the configurations of a family
are dealt round-robin into ``--folds`` folds in sorted order; each fold is predicted with the
constants fitted on the others. The out-of-fold errors are the headline; the in-sample errors
(constants fitted on every row) are printed beside them. Run from the repository root:

    .venv/bin/python scripts/fit_published.py --dry-run   # fit, CV, print tables only
    .venv/bin/python scripts/fit_published.py             # ... and write the family files
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from inferplan.perf.efficiency import FAMILY_OF_ARCHITECTURE, Efficiency, bundled_efficiency
from inferplan.plan.calibration import huber
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import RowResult, run_setup, validate_rows
from inferplan.specs.hardware import load_gpu

FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute": (0.2, 1.0),
    "memory_bandwidth": (0.4, 1.0),
    "attention_memory": (0.2, 1.0),
    "collective_bandwidth": (0.1, 1.0),
    "collective_latency_s": (0.0, 3e-5),
    "step_overhead_s": (0.0, 0.005),
}
GOLDEN = (math.sqrt(5) - 1) / 2
DATA = Path("src/inferplan/perf/data/efficiency")


def family_of(row: PublishedRow) -> str:
    return FAMILY_OF_ARCHITECTURE.get(load_gpu(row.gpu).architecture, "default")


def fit_rows() -> dict[str, list[PublishedRow]]:
    """Closed-form throughput rows by GPU family."""
    out: dict[str, list[PublishedRow]] = {}
    for row in bundled_published():
        if skip_reason(row) is None and row.family == "throughput" and run_setup(row).closed_form:
            out.setdefault(family_of(row), []).append(row)
    return out


def predict(rows: list[PublishedRow], eff: Efficiency) -> list[RowResult]:
    return validate_rows(rows, efficiency=lambda _row: eff)


def loss(results: list[RowResult]) -> float:
    terms = [huber(math.log(r.predicted / r.row.value)) for r in results if r.predicted]
    missing = sum(r.predicted is None for r in results)
    return (sum(terms) + missing * 1.0) / max(len(results), 1)


def _golden(objective: Callable[[float], float], low: float, high: float, steps: int) -> float:
    a, b = low, high
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = objective(c), objective(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = objective(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = objective(d)
    return c if fc <= fd else d


def fit(rows: list[PublishedRow], start: Efficiency, sweeps: int, steps: int) -> Efficiency:
    eff = start
    best = loss(predict(rows, eff))
    for _ in range(sweeps):
        for name, (low, high) in FIT_BOUNDS.items():

            def objective(value: float, name: str = name, eff: Efficiency = eff) -> float:
                return loss(predict(rows, replace(eff, **{name: value})))

            value = _golden(objective, low, high, steps)
            trial = loss(predict(rows, replace(eff, **{name: value})))
            if trial < best:
                eff, best = replace(eff, **{name: value}), trial
    return eff


def folds(rows: list[PublishedRow], k: int) -> list[set[str]]:
    cases = sorted({r.case_id for r in rows})
    return [set(cases[i::k]) for i in range(min(k, len(cases)))]


def cross_validate(
    rows: list[PublishedRow], start: Efficiency, k: int, sweeps: int, steps: int
) -> list[RowResult]:
    out: list[RowResult] = []
    for held in folds(rows, k):
        train = [r for r in rows if r.case_id not in held]
        test = [r for r in rows if r.case_id in held]
        eff = fit(train, start, sweeps, steps) if train else start
        out.extend(predict(test, eff))
    return out


def model_family(row: PublishedRow) -> str:
    name = row.model.split("/")[-1].lower()
    for prefix in ("llama-4", "llama-3", "mixtral", "mistral", "qwen3", "deepseek", "gpt-oss"):
        if name.startswith(prefix) or prefix in name:
            return prefix
    return name


def table(results: list[RowResult], key: Callable[[PublishedRow], str], title: str) -> str:
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.error is not None:
            groups.setdefault(key(r.row), []).append(abs(r.error))
    lines = [f"| {title} | n | median | p90 | max |", "|---|---:|---:|---:|---:|"]
    for name in sorted(groups):
        e = np.array(groups[name])
        lines.append(
            f"| {name} | {e.size} | {np.median(e):.1%} | {np.percentile(e, 90):.1%} "
            f"| {e.max():.1%} |"
        )
    return "\n".join(lines)


def report(results: list[RowResult], label: str) -> str:
    parts = [f"### {label}"]
    errors = [abs(r.error) for r in results if r.error is not None]
    if errors:
        parts.append(
            f"throughput rows {len(errors)}: median {statistics.median(errors):.1%}, "
            f"p90 {np.percentile(errors, 90):.1%}, max {max(errors):.1%}"
        )
    parts.append(table(results, lambda r: r.gpu, "GPU"))
    parts.append(table(results, lambda r: r.engine, "engine"))
    parts.append(table(results, model_family, "model family"))
    parts.append(table(results, lambda r: r.metric, "metric"))
    return "\n\n".join(parts)


def family_yaml(family: str, eff: Efficiency, before: float, after: float, n: int) -> str:
    head = [
        f"# Efficiency constants for the {family} family, fitted by scripts/fit_published.py",
        f"# to the {n} closed-form throughput rows of the bundled published table",
        f"# (plan/data/published.csv). Fitted: {', '.join(FIT_BOUNDS)}; the others keep",
        f"# their previous values. Loss {before:.4f} -> {after:.4f}. docs/validation.md has the",
        "# cross-validated errors.",
    ]
    body = [f"{name}: {float(f'{value:.4g}')}" for name, value in eff.to_dict().items()]
    return "\n".join(head + body) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--sweeps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--family", action="append", help="Only these families")
    args = parser.parse_args(argv)
    cv_all: list[RowResult] = []
    in_all: list[RowResult] = []
    for family, rows in sorted(fit_rows().items()):
        if args.family and family not in args.family:
            continue
        start = bundled_efficiency(family)
        before = loss(predict(rows, start))
        fitted = fit(rows, start, args.sweeps, args.steps)
        in_sample = predict(rows, fitted)
        print(f"{family}: {len(rows)} rows, loss {before:.4f} -> {loss(in_sample):.4f}")
        print("  " + ", ".join(f"{k}={getattr(fitted, k):.4g}" for k in FIT_BOUNDS), flush=True)
        cv_all.extend(cross_validate(rows, start, args.folds, args.sweeps, args.steps))
        in_all.extend(in_sample)
        if not args.dry_run:
            text = family_yaml(family, fitted, before, loss(in_sample), len(rows))
            (DATA / f"{family}.yaml").write_text(text)
    print(report(cv_all, f"Cross-validated ({args.folds}-fold by configuration)"))
    print()
    print(report(in_all, "In-sample (fitted on every row)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
