"""Per-event fast paths of the engine (issue 10, speed near capacity): each must give the same
run, bit for bit, as the path it shortcuts.

- ``Simulation._advance`` with one replica in fast mode runs advances back to back while the
  loop would pick the same replica next (no finish to collect, the next arrival not yet due);
  with ``_fuse_advances`` off it returns to the loop after each, as before.
- ``RunningSet`` keeps its int columns as the rows of one 2-D buffer: a stretch's increment
  (``decode``), a sampled token (``sample``) and a row's removal (``drop_row``) each touch
  exactly their columns and rows.
- ``replica._step_shape``: the vector step's batch shape, with a shortcut for one admitted row.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from inferplan.engine.replica import Replica, _step_shape
from inferplan.engine.running import RunningSet
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_fast_equals_exact import BASE, Case, _config, _plan_and_model, _workload, cases

_RECORD_COLUMNS = (
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "max_itl_s",
    "status",
    "output_tokens",
    "num_preemptions",
    "recomputed_tokens",
    "swapped_bytes",
)


def _fast_run(case: Case, *, fuse: bool) -> tuple[SimulationResult, int]:
    """A fast-mode run with fused advances on or off, and how many times the loop advanced."""
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
    sim._fuse_advances = sim._fuse_advances and fuse
    advances = 0

    def check(replica: object) -> None:
        nonlocal advances
        advances += 1
        sim.replicas[0].check_invariants()

    return sim.run(check=check), advances


def _assert_identical(a: SimulationResult, b: SimulationResult) -> None:
    assert a.num_steps == b.num_steps
    for name in _RECORD_COLUMNS:
        np.testing.assert_array_equal(getattr(a.records, name), getattr(b.records, name), name)
    np.testing.assert_array_equal(a.itl.counts, b.itl.counts)
    # nan (no ITL) equals nan: compiled, each is a new float, which ``==`` of tuples tells apart.
    moment_a = (a.itl.sum_s, a.itl.mean(), a.itl.std())
    np.testing.assert_array_equal(moment_a, (b.itl.sum_s, b.itl.mean(), b.itl.std()))
    assert a.traces[0].summary() == b.traces[0].summary()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_fused_advances_give_the_same_run_bit_for_bit(case: Case) -> None:
    """Every scheduler, policy, client limit and pool of the fast == exact harness."""
    fused, _ = _fast_run(case, fuse=True)
    unfused, _ = _fast_run(case, fuse=False)
    _assert_identical(fused, unfused)


def test_fused_advances_return_to_the_loop_less_often() -> None:
    """Near capacity an admission step is followed by its stretch in the same advance."""
    case = Case(**{**BASE.__dict__, "spare_blocks": None, "request_rate": 2.0})
    fused, fused_advances = _fast_run(case, fuse=True)
    unfused, unfused_advances = _fast_run(case, fuse=False)
    _assert_identical(fused, unfused)
    assert fused_advances < unfused_advances


def test_only_one_replica_in_fast_mode_fuses() -> None:
    plan, model = _plan_and_model()
    wl = _workload(BASE)
    assert Simulation(wl, _config(BASE, wl, plan, exact=False), model)._fuse_advances
    assert not Simulation(wl, _config(BASE, wl, plan, exact=True), model)._fuse_advances
    dp = Case(**{**BASE.__dict__, "data_parallel_size": 2})
    assert not Simulation(wl, _config(dp, wl, plan, exact=False), model)._fuse_advances


def _running(rows: list[tuple[int, int, int, int, int, int, float]]) -> RunningSet:
    run = RunningSet(capacity=2)  # small: appends grow the buffers
    for row in rows:
        run.append(*row)
    return run


ROWS = [
    (10, 100, 101, 1, 50, 7, 0.5),
    (11, 200, 201, 2, 60, 13, 0.25),
    (12, 300, 301, 3, 70, 19, 0.75),
]


def test_running_set_decode_raises_computed_tokens_and_generated_only() -> None:
    run = _running(ROWS)
    run.decode(4)
    assert run.num_computed.tolist() == [104, 204, 304]
    assert run.num_tokens.tolist() == [105, 205, 305]
    assert run.num_generated.tolist() == [5, 6, 7]
    assert run.ids.tolist() == [10, 11, 12]
    assert run.target.tolist() == [50, 60, 70]
    assert run.held_blocks.tolist() == [7, 13, 19]
    run.sample()
    assert run.num_computed.tolist() == [104, 204, 304]
    assert run.num_tokens.tolist() == [106, 206, 306]
    assert run.num_generated.tolist() == [6, 7, 8]


def test_running_set_drop_row_shifts_every_column_of_the_later_rows() -> None:
    run = _running(ROWS)
    run.drop_row(0)
    assert len(run) == 2
    assert run.ids.tolist() == [11, 12]
    assert run.num_computed.tolist() == [200, 300]
    assert run.held_blocks.tolist() == [13, 19]
    assert run.last_token_s.tolist() == [0.25, 0.75]
    assert run.row_values(1) == [12, 300, 301, 3, 70, 19]
    assert run.pop(1) == (12, 300, 301, 19)
    assert run.ids.tolist() == [11]
    run.append(13, 5, 6, 0, 9, 1, 1.0)  # the freed row is reused, not the dropped one's data
    assert run.row_values(1) == [13, 5, 6, 0, 9, 1]
    assert run.last_token_s.tolist() == [0.25, 1.0]


def test_running_set_keep_and_column_assignment_write_through() -> None:
    run = _running(ROWS)
    run.held_blocks = run.held_blocks + 1
    run.keep(np.array([True, False, True]))
    assert run.ids.tolist() == [10, 12]
    assert run.held_blocks.tolist() == [8, 20]
    assert run.last_token_s.tolist() == [0.5, 0.75]


def test_step_shape_of_one_admitted_row_matches_the_general_sums() -> None:
    # A fresh prompt chunk of 512 tokens beside 3 decodes of total context 40.
    assert _step_shape(3, 40, [512], [0]) == (512, 512 * 513 / 2, 0, 1, 3, 40)
    # A chunk of 100 after a 64-token prefix hit: pairs count the cached prefix.
    assert _step_shape(3, 40, [100], [64]) == (100, 100 * 64 + 100 * 101 / 2, 64, 1, 3, 40)
    # One token after a hit is a decode in shape: it reads its 64 + 1 tokens.
    assert _step_shape(3, 40, [1], [64]) == (0, 0.0, 0, 0, 4, 105)
    # A one-token fresh prompt is still a prefill.
    assert _step_shape(3, 40, [1], [0]) == (1, 1.0, 0, 1, 3, 40)
    # Two rows: the general path sums the singles' prefill fields and adds the decodes.
    assert _step_shape(3, 40, [512, 1], [0, 64]) == (512, 512 * 513 / 2, 0, 1, 4, 105)


def _run_without_check(case: Case, *, fuse: bool) -> tuple[SimulationResult, int, list[int]]:
    """A fast-mode run as the CLI runs it (no per-advance ``check``): fused advances then
    collect finishes themselves. Also how many finishes were collected inside ``_advance``,
    and the progress reports."""
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
    sim._fuse_advances = sim._fuse_advances and fuse
    advance, inside = sim._advance, 0
    progress: list[int] = []

    def counting_advance(replica: Replica, next_arrival_s: float) -> None:
        nonlocal inside
        before = sim.num_done
        advance(replica, next_arrival_s)
        inside += sim.num_done - before

    sim._advance = counting_advance  # type: ignore[method-assign]
    return sim.run(on_progress=progress.append), inside, progress


@pure_only  # counts inside ``Simulation._advance`` by patching it
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_fused_advances_collecting_finishes_give_the_same_run(case: Case) -> None:
    """Without a per-advance check, a fused advance collects finishes and goes on while the
    loop would pick its replica again: the same run bit for bit, every request reported."""
    fused, _, fused_progress = _run_without_check(case, fuse=True)
    unfused, inside, unfused_progress = _run_without_check(case, fuse=False)
    _assert_identical(fused, unfused)
    assert inside == 0
    assert sum(fused_progress) == sum(unfused_progress) == case.num_requests


@pure_only  # as above
def test_fused_advances_collect_finishes_near_capacity() -> None:
    """Below capacity most finishes are collected inside an advance, which then goes on."""
    case = Case(**{**BASE.__dict__, "spare_blocks": None, "request_rate": 2.0})
    fused, inside, _ = _run_without_check(case, fuse=True)
    unfused, _, _ = _run_without_check(case, fuse=False)
    _assert_identical(fused, unfused)
    assert inside > case.num_requests // 2
