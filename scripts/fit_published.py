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
    .venv/bin/python scripts/fit_published.py --families blackwell,ada --no-cv  # refit two
    .venv/bin/python scripts/fit_published.py --collectives-only [--per-hop]  # in-sample, fast

``--per-hop`` charges NCCL's per-step collective latency (``perf/comm.py``, off by default) and
fits ``collective_latency_s`` as that per-step latency (``PER_HOP_BOUNDS``). ``--gemm-shape``
also fits ``gemm_half_outputs``, the SM-occupancy ramp of TP-sharded GEMMs
(``perf/gemm_shape.py``, ``GEMM_SHAPE_BOUNDS``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from inferplan.perf import comm
from inferplan.perf.efficiency import FAMILY_OF_ARCHITECTURE, Efficiency, bundled_efficiency
from inferplan.plan.calibration import golden_section, huber
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    RowResult,
    engine_release,
    errors_by,
    run_setup,
    validate_rows,
)
from inferplan.plan.served import release_cpu_costs
from inferplan.specs.hardware import load_gpu

FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute": (0.2, 1.0),
    "memory_bandwidth": (0.4, 1.0),
    "attention_memory": (0.2, 1.0),
    "collective_bandwidth": (0.1, 1.0),
    "collective_latency_s": (0.0, 3e-5),
    "dequant_gemm": (0.1, 1.0),
    "moe_gemm": (0.1, 1.0),
}
# With --per-hop, collective_latency_s is NCCL's per-step latency (perf/comm.py): 0 to 6 us, the
# largest single-node step latency in NCCL's tuning table (PCIe, Ring / Simple: 5.7 us).
PER_HOP_BOUNDS = (0.0, 6e-6)
# With --gemm-shape, the output elements at which SM occupancy halves a TP-sharded GEMM
# (perf/gemm_shape.py): up to one wave of 128 x 256 output tiles on the bundled part with the
# most SMs (RTX PRO 6000 Blackwell, 188 SMs: 6.2 M); the tail of a GEMM's last wave idles at
# most one wave's SMs.
GEMM_SHAPE_BOUNDS = (0.0, 6.2e6)
COLLECTIVE_KEYS = ("collective_bandwidth", "collective_latency_s")
COST_BOUNDS: dict[str, tuple[float, float]] = {
    "step_overhead_s": (0.0, 5e-3),
    "per_seq_overhead_s": (0.0, 5e-5),
    "layer_overhead_s": (0.0, 1e-4),
    "host_overlap": (0.0, 1.0),
    # Zipf exponent of expert popularity (perf/moe.py), hot experts placed load-obliviously.
    # 0 is uniform routing; 0.6 reproduces the per-expert skew TensorRT-LLM measured for
    # DeepSeek-R1 (hottest expert 11.9x the mean; docs/moe.md section 5); at 1.0 every token
    # picks the hottest of 128 or 256 experts (16-32x the mean), beyond any measurement.
    "routing_skew": (0.0, 1.0),
}
DATA = Path("src/inferplan/perf/data/efficiency")
COSTS_FILE = Path("src/inferplan/plan/data/published_cpu_costs.yaml")


@dataclass
class Constants:
    """Per GPU family the physical fractions; per engine release the host costs."""

    family: dict[str, Efficiency]
    costs: dict[str, dict[str, float]]

    def for_row(self, row: PublishedRow) -> Efficiency:
        eff = self.family[family_of(row)]
        release = engine_release(row)
        return replace(eff, **self.costs[release]) if release in self.costs else eff


def family_of(row: PublishedRow) -> str:
    return FAMILY_OF_ARCHITECTURE.get(load_gpu(row.gpu).architecture, "default")


def fit_rows() -> list[PublishedRow]:
    """The closed-form throughput rows (trtllm-bench offline, fixed lengths)."""
    return [
        row
        for row in bundled_published()
        if skip_reason(row) is None and row.family == "throughput" and run_setup(row).closed_form
    ]


def predict(rows: list[PublishedRow], constants: Constants) -> list[RowResult]:
    return validate_rows(rows, efficiency=constants.for_row)


def loss(results: list[RowResult]) -> float:
    terms = [huber(math.log(r.predicted / r.row.value)) for r in results if r.predicted]
    missing = sum(r.predicted is None for r in results)
    return (sum(terms) + missing * 1.0) / max(len(results), 1)


def _descend(
    rows: list[PublishedRow],
    constants: Constants,
    bounds: dict[str, tuple[float, float]],
    with_value: Callable[[Constants, str, float], Constants],
    steps: int,
) -> Constants:
    """One coordinate sweep over ``bounds`` on ``rows``; a move is kept only if it helps."""
    best = loss(predict(rows, constants))
    for name, (low, high) in bounds.items():

        def objective(value: float, name: str = name, base: Constants = constants) -> float:
            return loss(predict(rows, with_value(base, name, value)))

        value = golden_section(objective, low, high, steps)
        trial = with_value(constants, name, value)
        trial_loss = loss(predict(rows, trial))
        if trial_loss < best:
            constants, best = trial, trial_loss
    return constants


def _set_family(family: str) -> Callable[[Constants, str, float], Constants]:
    def setter(c: Constants, name: str, value: float) -> Constants:
        return Constants({**c.family, family: replace(c.family[family], **{name: value})}, c.costs)

    return setter


def _set_release(release: str) -> Callable[[Constants, str, float], Constants]:
    def setter(c: Constants, name: str, value: float) -> Constants:
        return Constants(c.family, {**c.costs, release: {**c.costs[release], name: value}})

    return setter


def fit(
    rows: list[PublishedRow],
    start: Constants,
    rounds: int,
    steps: int,
    only: set[str] | None = None,
) -> Constants:
    """Block coordinate descent: each release's host costs on its rows, then each family's
    fractions on its rows, ``rounds`` times. ``only``: just those families' fractions, every
    other constant as ``start`` has it."""
    constants = start
    for _ in range(rounds):
        for release in sorted(constants.costs) if only is None else []:
            mine = [r for r in rows if engine_release(r) == release]
            if mine:
                constants = _descend(mine, constants, COST_BOUNDS, _set_release(release), steps)
        for family in sorted(constants.family):
            if only is not None and family not in only:
                continue
            mine = [r for r in rows if family_of(r) == family]
            if mine:
                constants = _descend(mine, constants, FIT_BOUNDS, _set_family(family), steps)
    return constants


def folds(rows: list[PublishedRow], k: int) -> list[set[str]]:
    cases = sorted({r.case_id for r in rows})
    return [set(cases[i::k]) for i in range(min(k, len(cases)))]


def _fold(
    rows: list[PublishedRow], held: set[str], start: Constants, rounds: int, steps: int
) -> list[RowResult]:
    train = [r for r in rows if r.case_id not in held]
    test = [r for r in rows if r.case_id in held]
    return predict(test, fit(train, start, rounds, steps))


def cross_validate(
    rows: list[PublishedRow], start: Constants, k: int, rounds: int, steps: int, jobs: int = 1
) -> list[RowResult]:
    """Out-of-fold predictions, fold by fold in order (``jobs`` folds at once in separate
    processes: the same numbers, since each fold's fit is deterministic)."""
    held_out = folds(rows, k)
    args = [(rows, held, start, rounds, steps) for held in held_out]
    out: list[RowResult] = []
    if jobs <= 1:
        for i, arg in enumerate(args):
            out.extend(_fold(*arg))
            print(f"  fold {i + 1}/{k} done", file=sys.stderr, flush=True)
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for result in pool.map(_fold, *zip(*args, strict=True)):
            out.extend(result)
    return out


def model_family(row: PublishedRow) -> str:
    name = row.model.split("/")[-1].lower()
    for prefix in ("llama-4", "llama-3", "mixtral", "mistral", "qwen3", "deepseek", "gpt-oss"):
        if name.startswith(prefix) or prefix in name:
            return prefix
    return name


def parallelism(row: PublishedRow) -> str:
    """As ``scripts/residuals_published.py --by parallel`` spells it."""
    return f"tp{row.tp} pp{row.pp} ep{row.ep or 1}{' adp' if row.attention_dp else ''}"


def table(results: list[RowResult], key: Callable[[PublishedRow], str], title: str) -> str:
    lines = [f"| {title} | n | median | p90 | max |", "|---|---:|---:|---:|---:|"]
    for name, signed in errors_by(results, key).items():
        e = np.abs(signed)
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
    parts.append(table(results, parallelism, "parallelism"))
    parts.append(table(results, lambda r: r.metric, "metric"))
    return "\n\n".join(parts)


def family_yaml(family: str, eff: Efficiency, results: list[RowResult]) -> str:
    errors = [abs(r.error) for r in results if r.error is not None]
    head = [
        f"# Efficiency constants for the {family} family, fitted by scripts/fit_published.py",
        f"# to the {len(errors)} closed-form throughput rows of the bundled published table",
        "# (plan/data/published.csv) of this family, with the engine releases' host costs",
        f"# (plan/data/published_cpu_costs.yaml). Fitted: {', '.join(FIT_BOUNDS)}; the others",
        "# keep their previous values. docs/validation.md has the cross-validated errors.",
        f"# In-sample median |error| {statistics.median(errors):.4f} over {len(errors)} rows",
    ]
    body = [f"{name}: {float(f'{value:.4g}')}" for name, value in eff.to_dict().items()]
    return "\n".join(head + body) + "\n"


def costs_yaml(costs: dict[str, dict[str, float]]) -> str:
    lines = [
        "# Host-side costs per engine release, fitted by scripts/fit_published.py to the",
        "# closed-form throughput rows of the bundled published table, jointly with each GPU",
        "# family's fractions: TensorRT-LLM's C++ engine flow (0.14, 0.17) and its PyTorch",
        "# backend (0.19 on). They replace the family's step_overhead_s and per_seq_overhead_s.",
        "# routing_skew: the Zipf exponent of expert popularity where a run states no routing",
        "# (perf/moe.py default_routing), fitted on the same rows.",
    ]
    for release, values in sorted(costs.items()):
        lines.append(f"{release}:")
        lines.extend(f"  {k}: {float(f'{v:.4g}')}" for k, v in values.items())
    return "\n".join(lines) + "\n"


def _sig4(value: float) -> float:
    return float(f"{value:.4g}")


def as_written(c: Constants) -> Constants:
    """The constants rounded as the files hold them, so the residuals written are reproduced."""
    family = {
        f: replace(e, **{k: _sig4(v) for k, v in e.to_dict().items()}) for f, e in c.family.items()
    }
    costs = {r: {k: _sig4(v) for k, v in v.items()} for r, v in c.costs.items()}
    return Constants(family, costs)


def start_constants(rows: list[PublishedRow]) -> Constants:
    families = {family_of(r) for r in rows}
    releases = {engine_release(r) for r in rows} - {None}
    # Every fit (the in-sample one and each fold's) starts from the same priors, the default
    # family file's values, never from constants already fitted to the whole table.
    prior = bundled_efficiency("default")
    # A prior outside its bounds (--per-hop's per-step latency) starts at the nearest bound.
    fitted_keys = {k: min(max(getattr(prior, k), lo), hi) for k, (lo, hi) in FIT_BOUNDS.items()}
    family = {f: replace(bundled_efficiency(f), **fitted_keys) for f in sorted(families)}
    base = {
        "step_overhead_s": prior.step_overhead_s,
        "per_seq_overhead_s": prior.per_seq_overhead_s,
        "layer_overhead_s": 0.0,
        "host_overlap": 0.0,
        "routing_skew": 0.0,
    }
    return Constants(family, {str(r): dict(base) for r in sorted(releases, key=str)})


def committed_constants(rows: list[PublishedRow], refit: set[str]) -> Constants:
    """The committed family files and release costs, the ``refit`` families back at the priors
    (``--families``: refit some families without moving the others or the host costs)."""
    prior = start_constants(rows)
    family = {f: prior.family[f] if f in refit else bundled_efficiency(f) for f in prior.family}
    committed = release_cpu_costs()
    costs = {r: {**v, **committed.get(r, {})} for r, v in prior.costs.items()}
    return Constants(family, costs)


def collectives_only(rounds: int, steps: int) -> int:
    """In-sample: every family's collective constants refitted, everything else as committed."""
    rows = fit_rows()
    origin = committed_constants(rows, set())
    before = predict(rows, origin)
    bounds = {k: FIT_BOUNDS[k] for k in COLLECTIVE_KEYS}
    fitted = origin
    for _ in range(rounds):
        for family in sorted(fitted.family):
            mine = [r for r in rows if family_of(r) == family]
            if mine:
                fitted = _descend(mine, fitted, bounds, _set_family(family), steps)
    after = predict(rows, fitted)
    for family, eff in fitted.family.items():
        print(f"  {family}: " + ", ".join(f"{k}={getattr(eff, k):.4g}" for k in COLLECTIVE_KEYS))
    print(report(before, "Committed constants (in-sample)"))
    print()
    print(report(after, "Collective constants refitted (in-sample)"), flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--no-cv", action="store_true", help="Fit only")
    parser.add_argument("--cv-only", action="store_true", help="Cross-validate only (no files)")
    parser.add_argument("--jobs", type=int, default=1, help="Folds fitted at once (processes)")
    parser.add_argument(
        "--families",
        help="In-sample fit of these families only (comma-separated, e.g. blackwell,ada), "
        "from the priors; the other families and the release costs stay as committed, and "
        "only these files are written. The cross-validation still fits everything per fold.",
    )
    parser.add_argument(
        "--per-hop",
        action="store_true",
        help="Charge NCCL's per-step latency (perf/comm.py PER_HOP_LATENCY) and fit it",
    )
    parser.add_argument(
        "--gemm-shape",
        action="store_true",
        help="Fit gemm_half_outputs, the SM-occupancy ramp of TP-sharded GEMMs "
        "(perf/gemm_shape.py)",
    )
    parser.add_argument(
        "--collectives-only",
        action="store_true",
        help="In-sample refit of the collective constants alone from the committed files; "
        "prints, writes nothing",
    )
    args = parser.parse_args(argv)
    if args.per_hop:
        comm.PER_HOP_LATENCY = True
        FIT_BOUNDS["collective_latency_s"] = PER_HOP_BOUNDS
    if args.gemm_shape:
        FIT_BOUNDS["gemm_half_outputs"] = GEMM_SHAPE_BOUNDS
    if args.collectives_only:
        return collectives_only(args.rounds, args.steps)
    if args.jobs < 1:
        print("error: --jobs: must be at least 1", file=sys.stderr)
        return 2
    rows = fit_rows()
    start = start_constants(rows)
    only = set(args.families.split(",")) if args.families else None
    if only is not None and not only <= set(start.family):
        known = ", ".join(sorted(start.family))
        print(f"error: --families: choose from {known}", file=sys.stderr)
        return 2
    if args.cv_only:
        cv = cross_validate(rows, start, args.folds, args.rounds, args.steps, args.jobs)
        print(report(cv, f"Cross-validated ({args.folds}-fold by configuration)"))
        return 0
    origin = start if only is None else committed_constants(rows, only)
    before = predict(rows, origin)
    fitted = as_written(fit(rows, origin, args.rounds, args.steps, only))
    in_sample = predict(rows, fitted)
    print(f"{len(rows)} rows; loss {loss(before):.4f} -> {loss(in_sample):.4f}")
    for family, eff in fitted.family.items():
        values = ", ".join(f"{k}={getattr(eff, k):.4g}" for k in FIT_BOUNDS)
        print(f"  {family}: {values}")
    for release, costs in fitted.costs.items():
        print(f"  {release}: " + ", ".join(f"{k}={v:.4g}" for k, v in costs.items()))
    print(report(before, "Starting constants (in-sample)"))
    print()
    print(report(in_sample, "In-sample (fitted on every row)"), flush=True)
    if not args.dry_run:
        for family, eff in fitted.family.items():
            if only is not None and family not in only:
                continue
            mine = [r for r in in_sample if family_of(r.row) == family]
            (DATA / f"{family}.yaml").write_text(family_yaml(family, eff, mine))
        if only is None:
            COSTS_FILE.write_text(costs_yaml(fitted.costs))
    if not args.no_cv:
        cv = cross_validate(rows, start, args.folds, args.rounds, args.steps, args.jobs)
        print()
        print(report(cv, f"Cross-validated ({args.folds}-fold by configuration)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
