"""Implicit decode rows (``engine/implicit.py``, issue 10): the scalars a stretch and the vector
step read must equal what the columns give, and a run with the rows implicit must equal the same
run with every fast path reading the columns, bit for bit.

- Random sequences of appends, implicit decode stretches, finishes, pops, truncations and
  column reads: after each, the total context, the fewest tokens left, the blocks of the next
  ``k`` steps and the ``j``-th smallest block offset against numpy on the settled columns, and
  the pending worst gaps (the ITL log) against writing ``np.fmax`` per row as before; the
  finished rows (from the known rows' ``target - generated`` list) against the columns.
- The fast == exact harness's cases, run twice in fast mode: implicit rows on, and off (every
  fast path reading and writing the columns, as before): every record, the ITL histogram and
  the KV trace identical.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import implicit
from inferplan.engine.running import RunningSet
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.metrics.records import RequestRecords
from native_mode import attributes

from .test_fast_equals_exact import BASE, Case, _config, _plan_and_model, _workload, cases
from .test_fused_advances import _assert_identical

_RECORDS = 64  # request ids drawn below this


def _expected_crossings(computed: np.ndarray, k: int, block: int) -> int:
    """Blocks ``k`` decode steps take, step by step: a row takes one where its next token
    starts a block."""
    return sum(int(np.count_nonzero((computed + i) % block == 0)) for i in range(k))


def _check_scalars(run: RunningSet, block: int, k: int) -> None:
    rows = run.rows
    n = len(run)
    # Read the scalars first: reading a column settles the rows and forgets them.
    scalars = (rows.total_context(), rows.fewest_left(), rows.crossings(k))
    offsets_scalar = [rows.kth_offset(j) for j in range(n)]
    by_offset = rows.offset_counts()  # every row known (``total_context`` learnt them)
    # From the known rows' list where no row is past its target, else from the columns.
    finished = [int(row) for row in rows.finished_rows()]
    computed, generated, target = run.num_computed, run.num_generated, run.target
    assert finished == np.flatnonzero(generated >= target).tolist()
    assert scalars == (
        int(computed.sum()) + n,
        int((target - generated).min()),
        _expected_crossings(computed, k, block),
    )
    assert offsets_scalar == sorted(((-computed) % block).tolist())
    assert by_offset == np.bincount(computed % block, minlength=block).tolist()
    assert (run.held_blocks >= -(-computed // block)).all()


@st.composite
def _operations(draw: st.DrawFn) -> tuple[int, list[tuple[str, int]]]:
    block = draw(st.sampled_from([1, 2, 3, 16]))
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(
                    ["append", "decode", "finish", "pop", "truncate", "drop_tail", "read"]
                ),
                st.integers(0, 40),
            ),
            min_size=1,
            max_size=40,
        )
    )
    return block, ops


@settings(max_examples=150, deadline=None)
@given(case=_operations())
def test_scalars_equal_the_columns_and_the_itl_log_the_per_row_maxima(
    case: tuple[int, list[tuple[str, int]]],
) -> None:
    block, ops = case
    max_itl = np.full(_RECORDS, np.nan)
    expected_itl = np.full(_RECORDS, np.nan)
    run = RunningSet(capacity=2, block_size=block, max_itl_s=max_itl)
    next_id, clock = 0, 0.0
    for op, arg in ops:
        n = len(run)
        if op == "append" and next_id < _RECORDS:
            computed = arg * 3 + 1
            held = -(-computed // block)
            run.append(next_id, computed, computed + 1, 1 + arg % 3, 5 + arg, held, clock)
            next_id += 1
        elif op == "decode" and n:
            k = 1 + arg % 20
            _check_scalars(run, block, k)
            rows = run.rows
            rows.decode(k, rows.crossings(k), n)
            gap = 0.5 + (arg % 7) / 8  # gaps that rise and fall, as stretches' do
            rows.itl_mark(gap)
            expected_itl[run.ids] = np.fmax(expected_itl[run.ids], gap)
            clock += 1.0
            rows.emitted(clock)
        elif op == "finish" and n:
            run.drop_row(arg % n)
        elif op == "pop" and n:
            row = arg % n
            rid = int(run.ids[row])
            assert run.pop(row)[0] == rid
        elif op == "truncate" and n:
            run.truncate(arg % (n + 1))
        elif op == "drop_tail" and n:  # the chain's commit: the scalars are kept
            run.drop_tail(arg % (n + 1))
        elif op == "read" and n:
            assert (run.last_token_s <= clock).all()
    if len(run):
        _check_scalars(run, block, 1)
    run.rows.flush_itl()
    np.testing.assert_array_equal(max_itl, expected_itl)


def test_pending_decode_steps_reach_every_column_when_read() -> None:
    run = RunningSet(capacity=2, block_size=16, max_itl_s=np.full(4, np.nan))
    run.append(0, 16, 17, 1, 50, 1, 0.0)
    run.append(1, 31, 32, 2, 9, 2, 0.0)
    rows = run.rows
    assert rows.crossings(1) == 1  # row 0's next token starts its second block
    assert rows.crossings(2) == 2  # and row 1's the step after
    rows.decode(2, rows.crossings(2), 2)
    rows.emitted(0.5)
    assert run.row_values(1) == [1, 33, 34, 4, 9, 3]  # ceil(33 / 16): a block per crossing
    assert rows.fewest_left() == 5
    # By offset in the last block, with the lag: 18 % 16 and 33 % 16 (stored: 16 and 31).
    assert rows.offset_counts() == [0, 1, 1] + [0] * 13
    assert run.num_computed.tolist() == [18, 33]
    assert run.num_tokens.tolist() == [19, 34]
    assert run.num_generated.tolist() == [3, 4]
    assert run.held_blocks.tolist() == [2, 3]
    assert run.last_token_s.tolist() == [0.5, 0.5]
    run.append(2, 3, 4, 0, 5, 1, 0.75)  # a row appended after the decode keeps its own values
    assert run.row_values(2) == [2, 3, 4, 0, 5, 1]


@pytest.mark.parametrize("before", [0, 1, 2, 5])
def test_extend_stores_the_rows_append_stores(before: int) -> None:
    """``RunningSet.extend`` (a waiting pass's admissions) against ``append`` of each row: the
    buffers (grown from 2 rows across one or two doublings), the token times and the rows
    reported to ``appended``, with a lag and an ITL log position pending."""
    one, each = (RunningSet(capacity=2, block_size=16, max_itl_s=np.full(9, np.nan)) for _ in "ab")
    for run in (one, each):
        for rid in range(before):
            run.append(rid, 20 + rid, 21 + rid, 1, 60, 2, 0.25)
        run.rows.lag, run.rows.itl_length = 3, 7
        run.appended = []
    new = [(5, 40, 2, 80, 3), (6, 17, 0, 30, 2), (7, 1, 0, 9, 1)]
    one.extend(new, 0.5)
    for rid, tokens, generated, target, held in new:
        each.append(rid, 0, tokens, generated, target, held, 0.5)
    assert len(one) == len(each) == before + 3
    np.testing.assert_array_equal(one._ints[:, : len(one)], each._ints[:, : len(each)])
    np.testing.assert_array_equal(one._times[: len(one)], each._times[: len(each)])
    assert one.appended == each.appended
    assert one.appended is not None
    assert one.appended[1] == (6, -3, 14, -3, 30, 2, 7)  # stored: the decode columns less the lag


def test_the_itl_log_gives_each_row_the_worst_gap_since_it_joined() -> None:
    max_itl = np.full(4, np.nan)
    max_itl[3] = 9.0  # a gap written directly (a chain, the general step) stays if larger
    run = RunningSet(block_size=16, max_itl_s=max_itl)
    run.append(3, 1, 2, 1, 100, 1, 0.0)
    run.append(0, 1, 2, 1, 100, 1, 0.0)
    run.rows.itl_mark(3.0)
    run.append(1, 1, 2, 1, 100, 1, 0.0)
    run.rows.itl_mark(1.0)
    run.rows.itl_mark(2.0)
    run.append(2, 1, 2, 1, 100, 1, 0.0)
    run.drop_row(1)  # row 1 saw 1.0 and 2.0
    run.drop_row(0)  # row 0 all three
    run.rows.flush_itl()  # row 2 none: no gap yet
    assert max_itl[0] == 3.0 and max_itl[1] == 2.0 and np.isnan(max_itl[2])
    assert max_itl[3] == 9.0


def _fast_run(case: Case, *, implicit: bool) -> SimulationResult:
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
    if not implicit:
        for replica in sim.replicas:
            replica.running.rows.block = 0  # every fast path reads the columns
    return sim.run()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_implicit_rows_give_the_column_run_bit_for_bit(case: Case) -> None:
    _assert_identical(_fast_run(case, implicit=True), _fast_run(case, implicit=False))


def test_implicit_rows_give_the_column_run_near_capacity() -> None:
    """Long stretches ended by arrivals and finishes, many admission steps, no preemption."""
    case = Case(**{**BASE.__dict__, "spare_blocks": None, "request_rate": 2.0})
    _assert_identical(_fast_run(case, implicit=True), _fast_run(case, implicit=False))


def _learnt(block: int, computed: list[int], lag: int, extra_row: int | None, split: int) -> tuple:
    """The scalars ``learn`` gives for rows with these computed tokens, appended while the
    rows lag ``lag`` decode steps; rows ``[0, split)`` learnt first, the rest appended later
    (0: all from nothing); ``extra_row`` holds one block more than ``ceil(computed / B)``."""
    run = RunningSet(capacity=2, block_size=block)
    run.rows.lag = lag
    rows = run.rows
    for row, c in enumerate(computed):
        if row == split and split:
            rows.learn()
        held = -(-c // block) + int(row == extra_row)
        run.append(row, c, c + 1, 1 + row % 3, 5 + row, held, 0.0)
    rows.learn()
    return (
        rows.computed_sum,
        rows.ceil_sum,
        list(rows.hist),
        sorted(rows.due),
        list(rows.left),
        rows.ceil_held,
    )


@settings(max_examples=60, deadline=None)
@given(
    block=st.sampled_from([1, 3, 16]),
    computed=st.lists(st.integers(0, 500), min_size=1, max_size=120),
    lag=st.integers(0, 50),
    extra=st.booleans(),
    split=st.integers(0, 120),
)
def test_learning_many_rows_in_numpy_gives_the_loops_scalars(
    block: int, computed: list[int], lag: int, extra: bool, split: int
) -> None:
    """``ImplicitRows.learn`` in numpy (many rows) and in its Python loop (few) agree on every
    scalar, from nothing and for rows appended to known ones; a row holding one block more
    than ``ceil(computed / B)`` clears ``ceil_held`` in both."""
    computed = [c + lag for c in computed]  # appended while lagging: at least the lag
    extra_row = len(computed) // 2 if extra else None
    split = split % len(computed)
    learnt = []
    for vector_rows in (1, 10**9):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(implicit, "_VECTOR_ROWS", vector_rows)
            learnt.append(_learnt(block, computed, lag, extra_row, split))
    assert learnt[0] == learnt[1]
    assert learnt[0][-1] == (extra_row is None)


def test_finished_rows_from_the_known_rows_list() -> None:
    """A stretch that ends at the first finish: the rows at their target, from the known rows'
    ``target - generated`` list (one row, then two at once), as the columns give them."""
    run = RunningSet(capacity=2, block_size=16, max_itl_s=np.full(8, np.nan))
    for rid, target in enumerate([9, 5, 7, 5, 12]):
        run.append(rid, 100 + rid, 101 + rid, 1, target, 7, 0.0)
    rows = run.rows
    rows.decode(2, rows.crossings(2), len(run))  # generated 3: none done
    assert rows.fewest_left() == 2 and list(rows.finished_rows()) == []
    rows.decode(2, rows.crossings(2), len(run))  # generated 5: rows 1 and 3 reach 5
    assert rows.fewest_left() == 0
    assert list(rows.finished_rows()) == [1, 3]
    run.drop_row(3)
    run.drop_row(1)
    rows.decode(2, rows.crossings(2), len(run))  # generated 7: the row of target 7, now row 1
    assert rows.fewest_left() == 0
    assert rows.finished_rows() == [1]
    assert np.flatnonzero(run.num_generated >= run.target).tolist() == [1]


def _rows_state(run: RunningSet) -> dict[str, object]:
    """Every scalar and list of the implicit rows (the ``gone`` dict's order included)."""
    state = {k: v for k, v in attributes(run.rows).items() if k not in ("run", "max_itl_s")}
    state["gone_order"] = list(run.rows.gone.items())
    return state


def _built(block: int, ops: list[tuple[str, int]]) -> tuple[RunningSet, np.ndarray]:
    """A running set after ``ops`` (appends, implicit decodes with an ITL mark, pops), and its
    records' worst gaps."""
    max_itl = np.full(_RECORDS, np.nan)
    run = RunningSet(capacity=2, block_size=block, max_itl_s=max_itl)
    clock, next_id = 0.0, 0
    for op, arg in ops:
        n = len(run)
        if op == "append" and next_id < _RECORDS:
            computed = arg * 3 + 1
            run.append(
                next_id,
                computed,
                computed + 1,
                1 + arg % 3,
                5 + arg,
                -(-computed // block),
                clock,
            )
            next_id += 1
        elif op == "decode" and n:
            k = 1 + arg % 20
            run.rows.decode(k, run.rows.crossings(k), n)
            run.rows.itl_mark(0.5 + (arg % 7) / 8)
            clock += 1.0
            run.rows.emitted(clock)
        elif op == "pop" and n:
            run.pop(arg % n)
    return run, max_itl


@settings(max_examples=80, deadline=None)
@given(case=_operations(), cut=st.integers(0, 40))
def test_the_tail_leaving_in_one_pass_equals_leaving_row_by_row(
    case: tuple[int, list[tuple[str, int]]], cut: int
) -> None:
    """``RunningSet.drop_tail`` (``ImplicitRows.leave_tail``, a chain's victims) against
    ``ImplicitRows.leave`` of each row from the last: every scalar, list and worst gap."""
    block, ops = case
    (one, one_itl), (each, each_itl) = _built(block, ops), _built(block, ops)
    size = cut % (len(one) + 1)
    one.drop_tail(size)
    for row in range(len(each) - 1, size - 1, -1):
        each.rows.leave(row)
    each._resize(size)
    assert _rows_state(one) == _rows_state(each)
    np.testing.assert_array_equal(one_itl, each_itl)


@settings(max_examples=80, deadline=None)
@given(
    case=_operations(),
    cut=st.integers(0, 40),
    gaps=st.lists(st.sampled_from([-np.inf, 0.25, 0.75, 1.0, 2.0]), min_size=40, max_size=40),
    held=st.sampled_from([1, 3, implicit.VICTIMS_HELD]),
)
def test_a_chains_victims_leave_and_are_recorded_as_row_by_row(
    case: tuple[int, list[tuple[str, int]]],
    cut: int,
    gaps: list[float],
    held: int,
) -> None:
    """``ImplicitRows.leave_chain_tail`` with the survivors' stored computed sum and the
    victims' chain gaps, then ``note_victims`` (held back, applied by ``flush_itl``, or at
    ``VICTIMS_HELD`` victims), against ``leave`` of each row from the last and the victims'
    records written one at a time as ``Scheduler.preempt`` and the chain wrote them: every
    scalar and list but the ceil sum (the chain sets it), and every record."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit, "VICTIMS_HELD", held)
        _check_chain_tail(case, cut, gaps)


def _check_chain_tail(case: tuple[int, list[tuple[str, int]]], cut: int, gaps: list[float]) -> None:
    block, ops = case
    (one, one_itl), (each, each_itl) = _built(block, ops), _built(block, ops)
    if not len(one):
        return
    one.rows.learn()  # every row known, as a chain's ``holds_ceil`` leaves them
    each.rows.learn()
    size = cut % len(one)
    n = len(one)
    # Pop order (the last row first); ``row_values`` settles nothing. A victim's recomputed
    # tokens are its computed ones at its pop, some chain steps on (here 3).
    victims = [one.rows.row_values(row) for row in range(n - 1, size - 1, -1)]
    ids, computed = [v[0] for v in victims], [v[1] + 3 for v in victims]
    victim_gaps = gaps[: n - size]
    # The records' worst gaps are the rows' array (as ``Replica`` builds them).
    one_rec = replace(RequestRecords.empty(_RECORDS), max_itl_s=one_itl)
    each_rec = replace(RequestRecords.empty(_RECORDS), max_itl_s=each_itl)
    for rec in (one_rec, each_rec):
        rec.num_preemptions[:] = np.arange(_RECORDS) % 3  # earlier preemptions
        rec.recomputed_tokens[:] = np.arange(_RECORDS) * 7
    stored_sum = int(one._ints[1, :size].sum())
    chain_gaps = list(victim_gaps)
    one.drop_chain_tail(size, stored_sum, chain_gaps)
    one.rows.note_victims(one_rec, ids, computed, chain_gaps)
    # The same requests preempted again by a later chain, before the first's are applied.
    later = [0.25 if i % 2 else -np.inf for i in range(len(ids))]  # below every log gap
    one.rows.note_victims(one_rec, ids, computed[::-1], list(later))
    for again, gap_list in ((computed, victim_gaps), (computed[::-1], later)):
        for rid, tokens, gap in zip(ids, again, gap_list, strict=True):
            each_rec.num_preemptions[rid] += 1
            each_rec.recomputed_tokens[rid] += tokens
            if gap > -np.inf:
                each_rec.max_itl_s[rid] = np.fmax(each_rec.max_itl_s[rid], gap)
    for row in range(n - 1, size - 1, -1):
        each.rows.leave(row)
    each._resize(size)
    one.rows.ceil_sum = each.rows.ceil_sum
    one.rows.flush_itl()
    each.rows.flush_itl()
    state, expected = _rows_state(one), _rows_state(each)
    assert state.pop("victims_into") is one_rec and expected.pop("victims_into") is None
    assert state == expected  # the held-back lists empty on both sides
    for name in ("num_preemptions", "recomputed_tokens", "max_itl_s"):
        np.testing.assert_array_equal(getattr(one_rec, name), getattr(each_rec, name))
