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

``--served`` fits the families and the releases' host costs on every engine's rows in one loss:
the closed-form rows beside the served runs' rows (vLLM v1, SGLang, ``trtllm-serve`` and
TensorRT-LLM 0.14 on Triton, simulated by the event engine as ``validate`` does), a served row
weighing as much as a closed-form row (``--served-weight``). The served rows are simulated
once at the committed constants and once a step off in each constant that reaches them, and
are linear in the constants' logs (fractions) or values (overheads) in between (one
Gauss-Newton linearisation, ``plan/calibration.py`` ``LinearLogModel``); the engines' own
constants (front ends, host costs, kernel factors, ``scripts/fit_frontend.py``) stay as
committed. Its cross-validation holds each fold's served configurations out too and simulates
them with the fold's constants. The whole refit (docs/validation.md, ``joint13``):

    .venv/bin/python scripts/fit_published.py --served --jobs 2 --no-cv

``--owners hopper`` (with ``--served``) refits only the named families' and releases' constants
from the committed files, every other one as committed (``hopdep16``'s Hopper refit).

``--balance`` weighs each engine's rows as one block in a family's or release's loss (``family``:
the same total per engine there; ``overall``: per engine in the whole fit; ``sqrt``: the square
root of its count there) instead of every row alike (``row``, the default: the quick
cross-validation found no rule better over every engine; docs/validation.md, ``block14``).

``--per-hop`` charges NCCL's per-step collective latency (``perf/comm.py``, off by default) and
fits ``collective_latency_s`` as that per-step latency (``PER_HOP_BOUNDS``). ``--gemm-shape``
also fits ``gemm_half_outputs``, the SM-occupancy ramp of TP-sharded GEMMs
(``perf/gemm_shape.py``, ``GEMM_SHAPE_BOUNDS``).
"""

from __future__ import annotations

import argparse
import math
import pickle
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from unittest.mock import patch

import numpy as np

import inferplan.plan.published_runs as published_runs
import inferplan.plan.served as served_module
from inferplan.perf import comm
from inferplan.perf.efficiency import FAMILY_OF_ARCHITECTURE, Efficiency, bundled_efficiency
from inferplan.plan.calibration import LinearLogModel, finite_slope, golden_section, huber
from inferplan.plan.folds import metric_key
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    RowResult,
    engine_release,
    errors_by,
    run_setup,
    validate_rows,
)
from inferplan.plan.served import release_cpu_costs
from inferplan.specs.hardware import GpuSpec, load_gpu

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
    # A Grace host's per-step work against an x86 server's (perf/overlap.py on_host): no faster
    # (the superchips' Neoverse V2 cores against the HGX servers' Xeons) and at most 3x slower.
    "grace_host": (1.0, 3.0),
}
# Host costs that are the release's facts, not fitted (``--overlap-scheduler``: the PyTorch
# backend's overlap scheduler, which trtllm-bench turns on in 0.19 and which is on by default
# from 0.20 on, runs step n + 1's host work while the GPU runs step n: host_overlap 1;
# docs/validation.md, grace17). Empty by default: host_overlap is fitted.
PYTORCH_RELEASES = ("trtllm-pytorch",)
RELEASE_FIXED: dict[str, dict[str, float]] = {}
OVERLAP_SCHEDULER = {release: {"host_overlap": 1.0} for release in PYTORCH_RELEASES}
# Host costs fitted for some releases only: none by default; with ``--overlap-scheduler`` the
# Grace host's speed on the PyTorch backend's Python executor (``grace_host``; the C++ flow's
# only Grace rows are GH200's 18).
RELEASE_ONLY: dict[str, tuple[str, ...]] = {"grace_host": ()}
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


# --served: the served runs' rows (vLLM, SGLang, trtllm-serve, TensorRT-LLM 0.14 on Triton) in
# the families' and releases' loss, each simulated once per constant around the committed
# point and linearised in between (plan/calibration.py LinearLogModel). The engines' own
# constants (front ends, host costs, kernel factors: scripts/fit_frontend.py) stay as committed.
LOG_KEYS = frozenset(k for k, (low, _) in FIT_BOUNDS.items() if low > 0)
# Each constant's finite-difference step, in its transformed value (log for LOG_KEYS): large
# enough to step over the simulations' discrete choices (batch sizes, graph sizes), small
# against the distance the fit moves a constant.
SLOPE_STEPS: dict[str, float] = {
    **dict.fromkeys(LOG_KEYS, 0.05),
    "collective_latency_s": 3e-6,
    "step_overhead_s": 2e-4,
    "per_seq_overhead_s": 2e-6,
    "layer_overhead_s": 5e-6,
    "host_overlap": 0.1,
    "routing_skew": 0.1,
    "grace_host": 0.1,
}


def values_of(c: Constants) -> dict[str, float]:
    """Every fitted constant as ``owner:key`` (a GPU family or an engine release)."""
    out = {f"{f}:{k}": float(getattr(e, k)) for f, e in c.family.items() for k in FIT_BOUNDS}
    out.update({f"{r}:{k}": float(v) for r, costs in c.costs.items() for k, v in costs.items()})
    return out


def with_variable(c: Constants, name: str, value: float) -> Constants:
    owner, key = name.split(":")
    if owner in c.family:
        return _set_family(owner)(c, key, value)
    return _set_release(owner)(c, key, value)


def release_bounds(release: str) -> dict[str, tuple[float, float]]:
    """The host costs fitted for ``release``: ``COST_BOUNDS`` less its fixed ones and those
    fitted for another release only."""
    fixed = RELEASE_FIXED.get(release, {})
    return {
        k: b
        for k, b in COST_BOUNDS.items()
        if k not in fixed and release in RELEASE_ONLY.get(k, (release,))
    }


def owner_of(row: PublishedRow, owner: str) -> bool:
    return family_of(row) == owner or engine_release(row) == owner


def served_rows() -> list[PublishedRow]:
    """The served runs' rows (simulated by the event engine, not in closed form)."""
    return [
        r for r in bundled_published() if skip_reason(r) is None and not run_setup(r).closed_form
    ]


@contextmanager
def bundled_as(c: Constants) -> Iterator[None]:
    """``validate``'s served path with ``c`` as the bundled family files and release costs."""

    def family_efficiency(gpu: GpuSpec) -> Efficiency:
        name = FAMILY_OF_ARCHITECTURE.get(gpu.architecture, "default")
        return c.family[name] if name in c.family else bundled_efficiency(name)

    costs = {**release_cpu_costs(), **c.costs}
    with (
        patch.object(published_runs, "efficiency_for", family_efficiency),
        patch.object(served_module, "release_cpu_costs", lambda: costs),
    ):
        yield


def predict_served(rows: list[PublishedRow], c: Constants) -> list[RowResult]:
    with bundled_as(c):
        return validate_rows(rows)


# --balance: how the engines' rows weigh in a block's loss (a family's fractions, a release's
# host costs). "row": every row alike (the engine with the most rows leads the fit); "family":
# each engine's rows in the block share the same total weight (trtllm-bench's closed form, vLLM,
# SGLang, trtllm-serve and Triton count alike on a family whatever their row counts); "overall":
# each engine's rows in the whole fit share the same total weight; "sqrt": each engine's rows in
# the block weigh the square root of their count in all (between "row" and "family").
BALANCES = ("row", "family", "overall", "sqrt")
CLOSED_FORM = "trtllm-bench"


@dataclass
class Served:
    """The served rows of one fit, linearised (``model``, row ``i`` is ``rows[i]``), counted
    ``weight`` each against a closed-form row, the engines balanced as ``balance`` says
    (``totals``: each engine's rows in the whole fit, for ``overall``)."""

    rows: list[PublishedRow]
    model: LinearLogModel
    weight: float = 1.0
    balance: str = "row"
    totals: dict[str, int] | None = None

    def block(self, keep: Callable[[PublishedRow], bool]) -> Served | None:
        mask = np.array([keep(r) for r in self.rows], dtype=bool)
        if not mask.any() or self.weight <= 0:
            return None
        return self._masked(mask)

    def subset(self, keep: Callable[[PublishedRow], bool]) -> Served:
        return self._masked(np.array([keep(r) for r in self.rows], dtype=bool))

    def _masked(self, mask: np.ndarray) -> Served:
        rows = [r for r, m in zip(self.rows, mask, strict=True) if m]
        return replace(self, rows=rows, model=self.model.subset(mask))


def served_engine(row: PublishedRow) -> str:
    """A served row's engine as the report names it (TensorRT-LLM by its front end)."""
    if row.engine == "tensorrt-llm":
        return "triton (trtllm 0.14)" if engine_release(row) == "trtllm-cpp" else "trtllm-serve"
    return row.engine


def engine_totals(rows: list[PublishedRow], served: Served | None) -> dict[str, int]:
    """Each engine's row count: ``rows`` (closed form) and ``served``'s."""
    totals = Counter(served_engine(r) for r in served.rows) if served else Counter()
    if rows:
        totals[CLOSED_FORM] = len(rows)
    return dict(totals)


def block_weights(rows: list[PublishedRow], served: Served | None) -> tuple[float, np.ndarray]:
    """One block's weights: a closed-form row's (``rows`` are all ``trtllm-bench``'s) and each
    of ``served``'s rows' (times ``served.weight``), as ``served.balance`` deals them."""
    if served is None or not served.rows:
        return 1.0, np.zeros(0)
    engines = [served_engine(r) for r in served.rows]
    if served.balance == "row":
        counts: dict[str, int] = {}
    elif served.balance in ("family", "sqrt"):
        counts = engine_totals(rows, served)
    else:
        counts = served.totals or engine_totals(rows, served)
    power = 0.5 if served.balance == "sqrt" else 1.0

    def weight(engine: str) -> float:
        return counts[engine] ** -power if counts else 1.0

    each = np.array([weight(e) for e in engines]) * served.weight
    return (weight(CLOSED_FORM) if rows else 1.0), each


def joint_loss(
    rows: list[PublishedRow],
    c: Constants,
    served: Served | None,
    weights: tuple[float, np.ndarray] | None = None,
) -> float:
    """Weighted mean Huber loss of log errors over ``rows`` (predicted in closed form) and
    ``served``'s rows (linearised), weighted as ``block_weights`` deals them (``weights``:
    computed once by the caller)."""
    closed_w, served_w = weights if weights is not None else block_weights(rows, served)
    results = predict(rows, c) if rows else []
    terms = sum(huber(math.log(r.predicted / r.row.value)) for r in results if r.predicted)
    terms += sum(r.predicted is None for r in results) * 1.0
    terms *= closed_w
    count = closed_w * len(results)
    if served is not None and served.rows:
        terms += float(served_w @ served.model.huber_terms(values_of(c)))
        count += float(served_w.sum())
    return terms / count if count > 0 else terms


def _step(name: str, value: float) -> float:
    """The finite-difference step of ``name`` at ``value``, away from its upper bound."""
    key = name.split(":")[1]
    step = SLOPE_STEPS[key]
    high = {**FIT_BOUNDS, **COST_BOUNDS}[key][1]
    moved = value * math.exp(step) if key in LOG_KEYS else value + step
    return -step if moved > high else step


def _column(rows: list[PublishedRow], c: Constants, name: str, step: float) -> list[float | None]:
    value = values_of(c)[name]
    key = name.split(":")[1]
    shifted = value * math.exp(step) if key in LOG_KEYS else value + step
    return [r.predicted for r in predict_served(rows, with_variable(c, name, shifted))]


def linearize(rows: list[PublishedRow], origin: Constants, jobs: int = 1) -> Served:
    """``rows`` simulated at ``origin`` and one step off it in each constant that reaches
    them (the runs of its GPU family or engine release): the rows predicted at ``origin``,
    with their slopes."""
    base = [r for r in predict_served(rows, origin) if r.predicted]
    kept = [r.row for r in base]
    values = values_of(origin)
    names = [n for n in values if n.split(":")[1] in SLOPE_STEPS]
    names = [n for n in names if any(owner_of(r, n.split(":")[0]) for r in kept)]
    tasks = []
    for name in names:
        mine = [r for r in kept if owner_of(r, name.split(":")[0])]
        tasks.append((mine, origin, name, _step(name, values[name])))
    if jobs <= 1:
        columns = [_column(*t) for t in tasks]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            columns = list(pool.map(_column, *zip(*tasks, strict=True)))
    index = {metric_key(r): i for i, r in enumerate(kept)}
    slopes = {}
    for (mine, _, name, step), column in zip(tasks, columns, strict=True):
        slope = np.zeros(len(kept))
        for row, shifted in zip(mine, column, strict=True):
            i = index[metric_key(row)]
            slope[i] = finite_slope(float(base[i].predicted or 0.0), shifted, step)
        slopes[name] = slope
    logs = frozenset(n for n in names if n.split(":")[1] in LOG_KEYS)
    model = LinearLogModel(
        base=np.log([float(r.predicted or 0.0) for r in base]),
        target=np.log([r.row.value for r in base]),
        origin={n: values[n] for n in names},
        slopes=slopes,
        logs=logs,
    )
    return Served(kept, model)


def engine_label(row: PublishedRow) -> str:
    """The served engine as the report names it, with the row's family."""
    return f"{served_engine(row)} {row.family}"


def served_report(results: list[RowResult], label: str) -> str:
    return f"### {label}\n\n" + table(results, engine_label, "served engine, family")


def _descend(
    rows: list[PublishedRow],
    constants: Constants,
    bounds: dict[str, tuple[float, float]],
    with_value: Callable[[Constants, str, float], Constants],
    steps: int,
    served: Served | None = None,
) -> Constants:
    """One coordinate sweep over ``bounds`` on ``rows`` (and ``served``'s linearised rows);
    a move is kept only if it helps."""

    weights = block_weights(rows, served)

    def total(c: Constants) -> float:
        return joint_loss(rows, c, served, weights)

    best = total(constants)
    for name, (low, high) in bounds.items():

        def objective(value: float, name: str = name, base: Constants = constants) -> float:
            return total(with_value(base, name, value))

        value = golden_section(objective, low, high, steps)
        trial = with_value(constants, name, value)
        trial_loss = total(trial)
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


def _of_release(release: str) -> Callable[[PublishedRow], bool]:
    return lambda row: engine_release(row) == release


def _of_family(family: str) -> Callable[[PublishedRow], bool]:
    return lambda row: family_of(row) == family


def fit(
    rows: list[PublishedRow],
    start: Constants,
    rounds: int,
    steps: int,
    only: set[str] | None = None,
    served: Served | None = None,
    owners: set[str] | None = None,
) -> Constants:
    """Block coordinate descent: each release's host costs on its rows, then each family's
    fractions on its rows, ``rounds`` times. ``only``: just those families' fractions and
    releases' host costs, every other constant as ``start`` has it. ``served``: the served
    runs' rows join each block's loss (their release's or GPU family's), linearised.
    ``owners``: just these families' and releases' constants."""
    constants = start
    if served is not None and served.balance == "overall":
        served = replace(served, totals=engine_totals(rows, served))
    for _ in range(rounds):
        for release in (
            sorted(constants.costs) if only is None else sorted(only & set(constants.costs))
        ):
            if owners is not None and release not in owners:
                continue
            mine = [r for r in rows if engine_release(r) == release]
            part = served.block(_of_release(release)) if served else None
            if mine or part:
                setter = _set_release(release)
                bounds = release_bounds(release)
                constants = _descend(mine, constants, bounds, setter, steps, part)
        for family in sorted(constants.family):
            if (only is not None and family not in only) or (owners and family not in owners):
                continue
            mine = [r for r in rows if family_of(r) == family]
            part = served.block(_of_family(family)) if served else None
            if mine or part:
                setter = _set_family(family)
                constants = _descend(mine, constants, FIT_BOUNDS, setter, steps, part)
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


def joint_folds(rows: list[PublishedRow], served: list[PublishedRow], k: int) -> list[set[str]]:
    """``folds`` of the closed-form configurations, each with the served configurations
    (those not among them) dealt round-robin in sorted order beside them."""
    held = folds(rows, k)
    extra = sorted({r.case_id for r in served} - {r.case_id for r in rows})
    for i, fold in enumerate(held):
        fold |= set(extra[i :: len(held)])
    return held


def _joint_fold(
    rows: list[PublishedRow],
    served: Served,
    held: set[str],
    start: Constants,
    rounds: int,
    steps: int,
    owners: set[str] | None = None,
) -> tuple[list[RowResult], list[RowResult]]:
    """A fold's held-out closed-form rows (closed form) and served rows (simulated) with the
    constants fitted on the other configurations' rows of both (``owners``: only theirs)."""
    train = [r for r in rows if r.case_id not in held]
    part = served.subset(lambda r: r.case_id not in held)
    fitted = fit(train, start, rounds, steps, None, part, owners)
    test = [r for r in rows if r.case_id in held]
    return predict(test, fitted), predict_served(
        [r for r in served.rows if r.case_id in held], fitted
    )


def joint_cross_validate(
    rows: list[PublishedRow],
    served: Served,
    start: Constants,
    k: int,
    rounds: int,
    steps: int,
    jobs: int = 1,
    owners: set[str] | None = None,
) -> tuple[list[RowResult], list[RowResult]]:
    """Out-of-fold predictions of the closed-form and the served rows (``joint_folds``)."""
    args = [
        (rows, served, held, start, rounds, steps, owners)
        for held in joint_folds(rows, served.rows, k)
    ]
    closed: list[RowResult] = []
    out: list[RowResult] = []
    with ProcessPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for i, (a, b) in enumerate(pool.map(_joint_fold, *zip(*args, strict=True))):
            closed.extend(a)
            out.extend(b)
            print(f"  fold {i + 1}/{len(args)}: {fold_summary(a, b)}", file=sys.stderr, flush=True)
    return closed, out


def fold_summary(closed: list[RowResult], served: list[RowResult]) -> str:
    """One fold's held-out median |error| per engine and metric family (progress line)."""
    groups = errors_by(closed, lambda r: CLOSED_FORM) | errors_by(served, engine_label)
    return "; ".join(f"{k} {len(e)} {np.median(np.abs(e)):.1%}" for k, e in groups.items())


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


def family_yaml(family: str, eff: Efficiency, results: list[RowResult], served: int = 0) -> str:
    errors = [abs(r.error) for r in results if r.error is not None]
    rows = f"# to the {len(errors)} closed-form throughput rows of the bundled published table"
    if served:
        rows = f"# --served to the {len(errors)} closed-form and {served} served rows of the table"
    head = [
        f"# Efficiency constants for the {family} family, fitted by scripts/fit_published.py",
        rows,
        "# (plan/data/published.csv) of this family, with the engine releases' host costs",
        f"# (plan/data/published_cpu_costs.yaml). Fitted: {', '.join(FIT_BOUNDS)}; the others",
        "# keep their previous values. docs/validation.md has the cross-validated errors.",
        f"# In-sample median |error| {statistics.median(errors):.4f} over {len(errors)} rows",
    ]
    body = [f"{name}: {float(f'{value:.4g}')}" for name, value in eff.to_dict().items()]
    return "\n".join(head + body) + "\n"


def costs_yaml(costs: dict[str, dict[str, float]], served: bool = False) -> str:
    lines = [
        "# Host-side costs per engine release, fitted by scripts/fit_published.py to the",
        "# closed-form throughput rows of the bundled published table, jointly with each GPU",
        "# family's fractions: TensorRT-LLM's C++ engine flow (0.14, 0.17) and its PyTorch",
        "# backend (0.19 on). They replace the family's step_overhead_s and per_seq_overhead_s.",
        "# routing_skew: the Zipf exponent of expert popularity where a run states no routing",
        "# (perf/moe.py default_routing), fitted on the same rows. grace_host (where given):",
        "# the release's host work on a Grace-hosted part (GB200, GB300) against an x86",
        "# server's (perf/overlap.py on_host; --overlap-scheduler, not committed).",
    ]
    if served:
        lines.append("# --served: with the served runs' rows (TensorRT-LLM 0.14 on Triton's here).")
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
    costs = {}
    for release in sorted(releases, key=str):
        mine = {**base, **RELEASE_FIXED.get(str(release), {})}
        mine.update({k: 1.0 for k, owners in RELEASE_ONLY.items() if release in owners})
        costs[str(release)] = mine
    return Constants(family, costs)


def committed_constants(rows: list[PublishedRow], refit: set[str]) -> Constants:
    """The committed family files and release costs, the ``refit`` families back at the priors
    (``--families``: refit some families without moving the others or the host costs), each
    release's fixed costs (``RELEASE_FIXED``) as they are."""
    prior = start_constants(rows)
    family = {f: prior.family[f] if f in refit else bundled_efficiency(f) for f in prior.family}
    committed = release_cpu_costs()
    costs = {
        r: {**v, **committed.get(r, {}), **RELEASE_FIXED.get(r, {})} for r, v in prior.costs.items()
    }
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
        "from the priors, and of the releases named beside them (e.g. trtllm-pytorch), from "
        "the committed file; every other constant stays as committed, and only these files "
        "are written. The cross-validation still fits everything per fold.",
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
        "--overlap-scheduler",
        action="store_true",
        help="The PyTorch backend's host work behind the GPU's (host_overlap 1, not fitted) and "
        "its speed on a Grace host fitted (grace_host); tried, not committed (docs/validation.md, "
        "grace17)",
    )
    parser.add_argument(
        "--collectives-only",
        action="store_true",
        help="In-sample refit of the collective constants alone from the committed files; "
        "prints, writes nothing",
    )
    parser.add_argument(
        "--served",
        action="store_true",
        help="Fit the families and releases on the served runs' rows too (vLLM, SGLang, "
        "trtllm-serve, TensorRT-LLM 0.14 on Triton), linearised around the committed constants",
    )
    parser.add_argument(
        "--served-weight",
        type=float,
        default=1.0,
        help="With --served: a served row's weight against a closed-form row's (0: the "
        "closed-form fit, the served rows predicted beside it)",
    )
    parser.add_argument(
        "--balance",
        choices=BALANCES,
        default="row",
        help="With --served: how the engines' rows weigh in each family's and release's loss "
        "(row: every row alike; family: each engine's rows there the same total; overall: "
        "each engine's rows in the whole fit the same total; sqrt: each engine's rows there "
        "the square root of their count)",
    )
    parser.add_argument(
        "--served-save", help="With --served: pickle the linearised served rows to this file"
    )
    parser.add_argument(
        "--served-load",
        help="With --served: read the linearised served rows from --served-save's file "
        "(made on the same committed constants) instead of simulating them",
    )
    parser.add_argument(
        "--owners",
        help="With --served: the in-sample fit refits only these families' and releases' "
        "constants (comma-separated, e.g. hopper), from the committed files, every other "
        "constant as committed; only their files are written",
    )
    parser.add_argument(
        "--cv-owners",
        help="With --served --cv-only: refit per fold only these families' and releases' "
        "constants (comma-separated, e.g. ampere,hopper,trtllm-cpp), from the committed "
        "files, on these families' rows (a quicker check than every constant from the priors)",
    )
    args = parser.parse_args(argv)
    if args.per_hop:
        comm.PER_HOP_LATENCY = True
        FIT_BOUNDS["collective_latency_s"] = PER_HOP_BOUNDS
    if args.gemm_shape:
        FIT_BOUNDS["gemm_half_outputs"] = GEMM_SHAPE_BOUNDS
    if args.overlap_scheduler:
        RELEASE_FIXED.update(OVERLAP_SCHEDULER)
        RELEASE_ONLY["grace_host"] = PYTORCH_RELEASES
    if args.collectives_only:
        return collectives_only(args.rounds, args.steps)
    if args.jobs < 1:
        print("error: --jobs: must be at least 1", file=sys.stderr)
        return 2
    rows = fit_rows()
    start = start_constants(rows)
    only = set(args.families.split(",")) if args.families else None
    if only is not None and not only <= set(start.family) | set(start.costs):
        known = ", ".join(sorted(set(start.family) | set(start.costs)))
        print(f"error: --families: choose from {known}", file=sys.stderr)
        return 2
    known_owners = set(start.family) | set(start.costs)
    for flag, names in (("--owners", args.owners), ("--cv-owners", args.cv_owners)):
        if names and not set(names.split(",")) <= known_owners:
            print(f"error: {flag}: choose from {', '.join(sorted(known_owners))}", file=sys.stderr)
            return 2
    served = None
    if args.served:
        if only is not None:
            print("error: --served: refits every family (no --families)", file=sys.stderr)
            return 2
        began = time.monotonic()
        if args.served_load:
            served = pickle.loads(Path(args.served_load).read_bytes())
        else:
            served = linearize(served_rows(), committed_constants(rows, set()), args.jobs)
        if args.served_save:
            Path(args.served_save).write_bytes(pickle.dumps(served))
        served.weight = args.served_weight
        served.balance = args.balance
        print(
            f"{len(served.rows)} served rows linearised in {len(served.model.slopes)} constants, "
            f"{time.monotonic() - began:.0f} s wall",
            flush=True,
        )
    if args.cv_only:
        if served is not None and args.cv_owners:
            # The quick check: only these owners refitted per fold, from the committed files,
            # on their families' closed-form rows; every other constant as committed.
            cv_owners = set(args.cv_owners.split(","))
            owned = [r for r in rows if family_of(r) in cv_owners]
            closed, out = joint_cross_validate(
                owned,
                served,
                committed_constants(rows, set()),
                args.folds,
                args.rounds,
                args.steps,
                args.jobs,
                cv_owners,
            )
            title = f"Cross-validated ({args.folds}-fold by configuration; {args.cv_owners})"
            print(report(closed, title) + "\n\n" + served_report(out, title + ", served rows"))
            return 0
        if served is not None:
            closed, out = joint_cross_validate(
                rows, served, start, args.folds, args.rounds, args.steps, args.jobs
            )
            title = f"Cross-validated ({args.folds}-fold by configuration)"
            print(report(closed, title) + "\n\n" + served_report(out, title + ", served rows"))
            return 0
        cv = cross_validate(rows, start, args.folds, args.rounds, args.steps, args.jobs)
        print(report(cv, f"Cross-validated ({args.folds}-fold by configuration)"))
        return 0
    owners = set(args.owners.split(",")) if args.owners else None
    if owners is not None and served is None:
        print("error: --owners: needs --served (else --families)", file=sys.stderr)
        return 2
    origin = start if only is None and owners is None else committed_constants(rows, only or set())
    before = predict(rows, origin)
    fitted = as_written(fit(rows, origin, args.rounds, args.steps, only, served, owners))
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
    if served is not None:
        print()
        print(
            served_report(
                predict_served(served.rows, committed_constants(rows, set())),
                "Served rows, committed constants",
            )
        )
        print()
        print(served_report(predict_served(served.rows, fitted), "Served rows, in-sample"))
    if not args.dry_run:
        for family, eff in fitted.family.items():
            if (only is not None and family not in only) or (owners and family not in owners):
                continue
            mine = [r for r in in_sample if family_of(r.row) == family]
            theirs = sum(family_of(r) == family for r in served.rows) if served else 0
            (DATA / f"{family}.yaml").write_text(family_yaml(family, eff, mine, theirs))
        refit_costs = owners if only is None else only
        if refit_costs is None or refit_costs & set(fitted.costs):
            COSTS_FILE.write_text(costs_yaml(fitted.costs, served is not None))
    if not args.no_cv:
        title = f"Cross-validated ({args.folds}-fold by configuration)"
        if served is not None:
            closed, out = joint_cross_validate(
                rows, served, start, args.folds, args.rounds, args.steps, args.jobs
            )
            print("\n" + report(closed, title) + "\n\n" + served_report(out, title + ", served"))
            return 0
        cv = cross_validate(rows, start, args.folds, args.rounds, args.steps, args.jobs)
        print()
        print(report(cv, title))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
