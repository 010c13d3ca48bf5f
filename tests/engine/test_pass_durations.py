"""``_Cycles.all_durations``: a pass written once hands its one array on uncopied (the ITL keeps
it, ``metrics/itl_log.py``), a pass written in parts their concatenation in order."""

from __future__ import annotations

import numpy as np

from inferplan.engine.thrash import _Cycles


def _cycles(parts: list[np.ndarray]) -> _Cycles:
    c = _Cycles.__new__(_Cycles)
    c.durations = parts
    return c


def test_one_write_is_handed_on_as_it_is() -> None:
    part = np.array([0.25, 0.5, 0.75])
    got = _cycles([part]).all_durations()
    assert got is part


def test_several_writes_are_joined_in_order() -> None:
    parts = [np.array([1.0, 2.0]), np.array([3.0]), np.array([4.0, 5.0])]
    got = _cycles(parts).all_durations()
    assert got.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(got is not part for part in parts)


def test_no_write_is_empty() -> None:
    got = _cycles([]).all_durations()
    assert got.shape == (0,) and got.dtype == np.float64
