"""Grouped folds by configuration (``plan/folds.py``), shared by the fit scripts."""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.plan.folds import grouped_folds


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
