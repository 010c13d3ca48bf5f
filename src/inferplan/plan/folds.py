"""Grouped k-fold cross-validation of the published rows, by configuration.

The fit scripts (``scripts/fit_frontend.py``, ``scripts/fit_engine_overheads.py``) fit constants
on some configurations and predict the others: the configurations (``case_id``: one model x GPU x
parallelism x precision x engine version) are dealt round-robin in sorted order into ``k`` folds,
so every row of a configuration is in the same fold and a fold's rows are predicted by constants
that never saw that configuration.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

import numpy as np

from inferplan.plan.calibration import huber
from inferplan.plan.published import PublishedRow


class HasCase(Protocol):
    @property
    def case_id(self) -> str: ...


RowT = TypeVar("RowT", bound=HasCase)


def grouped_folds(rows: Sequence[RowT], k: int) -> Iterator[tuple[list[RowT], list[RowT]]]:
    """(training rows, held-out rows) of each fold: configurations dealt round-robin in sorted
    order into ``min(k, configurations)`` folds."""
    cases = sorted({r.case_id for r in rows})
    for i in range(min(k, len(cases))):
        held = set(cases[i::k])
        yield (
            [r for r in rows if r.case_id not in held],
            [r for r in rows if r.case_id in held],
        )


def metric_key(row: PublishedRow) -> tuple[str, str]:
    """A row's key in the fit scripts' prediction tables: its served run and its metric."""
    return (str(row.run_key), row.metric)


def relative_errors(
    rows: Sequence[PublishedRow], predicted: Mapping[tuple[str, str], float | None]
) -> list[tuple[PublishedRow, float]]:
    """``(row, (predicted - measured) / measured)`` for the rows with a prediction."""
    pairs = [(r, predicted.get(metric_key(r))) for r in rows]
    return [(r, (v - r.value) / r.value) for r, v in pairs if v is not None]


def log_huber_loss(
    rows: Sequence[PublishedRow], predicted: Mapping[tuple[str, str], float | None]
) -> float:
    """Summed Huber loss of ``log(1 + error)`` over ``rows``; a row without a prediction (its
    run failed) costs 1."""
    errs = relative_errors(rows, predicted)
    return sum(huber(math.log(max(1.0 + e, 1e-6))) for _, e in errs) + len(rows) - len(errs)


def error_rows(groups: dict[str, list[float]]) -> list[str]:
    """One Markdown row per group of relative errors: ``| name | n | median abs | p90 abs |
    signed median |`` (the fit scripts' tables)."""
    rows = []
    for name, values in groups.items():
        a = np.array(values)
        rows.append(
            f"| {name} | {a.size} | {np.median(abs(a)):.1%} | {np.percentile(abs(a), 90):.1%} "
            f"| {np.median(a):+.1%} |"
        )
    return rows
