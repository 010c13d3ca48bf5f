"""Grouped folds by configuration (``plan/folds.py``), shared by the fit scripts."""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.plan.folds import error_rows, grouped_folds


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
