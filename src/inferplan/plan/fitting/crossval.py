"""Grouped k-fold cross-validation of the fit by configuration (``case_id``).

The configurations are dealt round-robin into ``k`` folds in sorted order; each fold is
predicted with the constants fitted on the others, from the same starting point. With the
served rows, each fold holds out its served configurations too and simulates them with the
fold's constants. Folds run one after another, or ``jobs`` at once in separate processes: the
same numbers, since each fold's fit is deterministic.
"""

from __future__ import annotations

import sys

import numpy as np

from inferplan.plan.fitting.config import Constants, FitConfig, predict, worker_pool
from inferplan.plan.fitting.descent import fit
from inferplan.plan.fitting.report import engine_label
from inferplan.plan.fitting.served_fit import CLOSED_FORM, Served, predict_served
from inferplan.plan.published import PublishedRow
from inferplan.plan.published_runs import RowResult, errors_by


def folds(rows: list[PublishedRow], k: int) -> list[set[str]]:
    cases = sorted({r.case_id for r in rows})
    return [set(cases[i::k]) for i in range(min(k, len(cases)))]


def _fold(
    rows: list[PublishedRow],
    held: set[str],
    start: Constants,
    config: FitConfig,
    rounds: int,
    steps: int,
) -> list[RowResult]:
    train = [r for r in rows if r.case_id not in held]
    test = [r for r in rows if r.case_id in held]
    return predict(test, fit(train, start, config, rounds, steps))


def cross_validate(
    rows: list[PublishedRow],
    start: Constants,
    config: FitConfig,
    k: int,
    rounds: int,
    steps: int,
    jobs: int = 1,
) -> list[RowResult]:
    """Out-of-fold predictions, fold by fold in order."""
    held_out = folds(rows, k)
    args = [(rows, held, start, config, rounds, steps) for held in held_out]
    out: list[RowResult] = []
    if jobs <= 1:
        for i, arg in enumerate(args):
            out.extend(_fold(*arg))
            print(f"  fold {i + 1}/{k} done", file=sys.stderr, flush=True)
        return out
    with worker_pool(jobs) as pool:
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
    config: FitConfig,
    rounds: int,
    steps: int,
    owners: set[str] | None = None,
) -> tuple[list[RowResult], list[RowResult]]:
    """A fold's held-out closed-form rows (closed form) and served rows (simulated) with the
    constants fitted on the other configurations' rows of both (``owners``: only theirs)."""
    train = [r for r in rows if r.case_id not in held]
    part = served.subset(lambda r: r.case_id not in held)
    fitted = fit(train, start, config, rounds, steps, None, part, owners)
    test = [r for r in rows if r.case_id in held]
    return predict(test, fitted), predict_served(
        [r for r in served.rows if r.case_id in held], fitted
    )


def joint_cross_validate(
    rows: list[PublishedRow],
    served: Served,
    start: Constants,
    config: FitConfig,
    k: int,
    rounds: int,
    steps: int,
    jobs: int = 1,
    owners: set[str] | None = None,
) -> tuple[list[RowResult], list[RowResult]]:
    """Out-of-fold predictions of the closed-form and the served rows (``joint_folds``)."""
    args = [
        (rows, served, held, start, config, rounds, steps, owners)
        for held in joint_folds(rows, served.rows, k)
    ]
    closed: list[RowResult] = []
    out: list[RowResult] = []
    with worker_pool(max(jobs, 1)) as pool:
        for i, (a, b) in enumerate(pool.map(_joint_fold, *zip(*args, strict=True))):
            closed.extend(a)
            out.extend(b)
            print(f"  fold {i + 1}/{len(args)}: {fold_summary(a, b)}", file=sys.stderr, flush=True)
    return closed, out


def fold_summary(closed: list[RowResult], served: list[RowResult]) -> str:
    """One fold's held-out median |error| per engine and metric family (progress line)."""
    groups = errors_by(closed, lambda r: CLOSED_FORM) | errors_by(served, engine_label)
    return "; ".join(f"{k} {len(e)} {np.median(np.abs(e)):.1%}" for k, e in groups.items())
