"""Grouped folds by configuration (``plan/folds.py``), shared by the fit scripts."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from inferplan.plan.folds import (
    error_rows,
    grouped_folds,
    log_huber_loss,
    metric_key,
    relative_errors,
)
from inferplan.plan.published import bundled_published


@dataclass(frozen=True)
class Row:
    case_id: str
    value: int


def test_each_configuration_is_held_out_once_whole_and_dealt_round_robin() -> None:
    rows = [Row(case, i) for i, case in enumerate("ecabdcae")]  # 5 configurations
    folds = list(grouped_folds(rows, 2))
    assert [sorted({r.case_id for r in held}) for _, held in folds] == [["a", "c", "e"], ["b", "d"]]
    for train, held in folds:
        assert not {r.case_id for r in train} & {r.case_id for r in held}
        assert sorted(train + held, key=lambda r: r.value) == rows
    assert len(list(grouped_folds(rows, 9))) == 5  # never more folds than configurations


def test_error_rows_give_median_p90_and_signed_median_by_hand() -> None:
    # |errors| 0.1, 0.2, 0.3, 0.4: median 25.0 %, p90 (linear) 37.0 %; signed median +5.0 %.
    (row,) = error_rows({"ttft": [-0.1, 0.2, -0.3, 0.4]})
    assert row == "| ttft | 4 | 25.0% | 37.0% | +5.0% |"


def test_relative_errors_and_log_huber_loss_by_hand() -> None:
    rows = [r for r in bundled_published() if r.family == "latency"][:3]
    predicted: dict[tuple[str, str], float | None] = {
        metric_key(rows[0]): rows[0].value * 1.1,  # 10 % slow
        metric_key(rows[1]): None,  # its run failed
    }  # rows[2]: not in the table either
    errs = relative_errors(rows, predicted)
    assert [(r is rows[0], round(e, 12)) for r, e in errs] == [(True, 0.1)]
    # Huber of log(1.1) = 0.0953 (inside the quadratic zone: 0.5 x^2) + 1 per missing row
    assert log_huber_loss(rows, predicted) == pytest.approx(0.5 * math.log(1.1) ** 2 + 2)
