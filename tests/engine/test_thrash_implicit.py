"""A doomed pass through the running rows' implicit state (``engine/thrash.py``, ``_implicit``):
its cycles read the block-offset histogram, the held blocks, the context and the fewest tokens
left from the rows' scalars and commit as ``k`` decode steps of every row, the columns written
only when next read. Whole runs must equal the same runs through the columns, and after each
pass the scalars must be those a relearn from the settled columns gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.engine import thrash as thrash_module
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_chain import _assert_identical
from .test_fast_equals_exact import _config, _plan_and_model, _workload
from .test_thrash import THRASH

CASE = replace(THRASH, max_output=2000, spare_blocks=30)


def _run(*, implicit: bool, check_rows: bool = False) -> tuple[SimulationResult, int]:
    """A fast run (and how many passes committed through the implicit rows); ``implicit``
    False reads and writes the columns, as before; ``check_rows`` compares the scalars after
    each implicit pass with a relearn from the settled columns."""
    passes = [0]
    commit = thrash_module._Cycles._commit_implicit

    def counting(cycles):  # type: ignore[no-untyped-def]
        commit(cycles)
        passes[0] += 1
        if check_rows:
            rows = cycles.r.running.rows
            kept = (rows.hist, rows.ceil_sum, rows.computed_sum, rows.lag, sorted(rows.left))
            kept_left = rows.fewest_left()
            cycles.r.running.num_computed  # noqa: B018 (settles the columns, forgets)
            rows.learn()
            assert rows.fewest_left() == kept_left
            again = (rows.hist, rows.ceil_sum, rows.computed_sum, rows.lag, sorted(rows.left))
            # The same offsets, blocks, context and tokens left (stored minus the lag).
            lag, block = rows.lag, rows.block
            assert [kept[0][(o - kept[3]) % block] for o in range(block)] == [
                again[0][(o - lag) % block] for o in range(block)
            ]
            assert kept[1] == again[1]
            assert kept[2] + len(kept[4]) * kept[3] == again[2] + len(again[4]) * lag
            assert [x - kept[3] for x in kept[4]] == [x - lag for x in again[4]]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(thrash_module._Cycles, "_commit_implicit", counting)
        if not implicit:
            patch.setattr(thrash_module, "_implicit", lambda rows, block: False)
        plan, model = _plan_and_model()
        wl = _workload(CASE)
        res = Simulation(wl, _config(CASE, wl, plan, exact=False), model).run(
            check=lambda replica: replica.check_invariants()
        )
    return res, passes[0]


@pure_only
def test_a_pass_through_the_implicit_rows_equals_one_through_the_columns() -> None:
    through_rows, passes = _run(implicit=True)
    through_columns, none = _run(implicit=False)
    assert passes > 5 and none == 0
    _assert_identical(through_rows, through_columns)


@pure_only
def test_the_rows_scalars_after_a_pass_are_the_settled_columns() -> None:
    checked, passes = _run(implicit=True, check_rows=True)
    assert passes > 5
    _assert_identical(checked, _run(implicit=False)[0])
