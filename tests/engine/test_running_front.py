"""The running set's first row leaves without moving the others (``engine/running.py``).

``RunningSet.drop_row(0)`` moves the buffers' row 0 on (``_start``) instead of shifting every
row down; ``_ints``, ``_times`` and ``_flat`` view the buffers from there, and appends reuse the
freed front by moving the rows back (``_grow``). These tests drive a running set by hand against
a plain list of rows: every row read back (through the columns, the flat view and the implicit
scalars) must be the list's, so a row read from the old position, a dropped row still counted
as running, or a move back that loses a row fails them.
"""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.engine.running import RunningSet

BLOCK = 4
MAX_ROWS = 400  # ids below this


def _ref_row(rid: int, computed: int, tokens: int, generated: int, target: int) -> list[int]:
    return [rid, computed, tokens, generated, target, -(-computed // BLOCK)]


def _check(run: RunningSet, ref: list[list[int]], times: list[float]) -> None:
    """Every view of the running set gives the reference rows, without settling them first
    (``row_values`` and the scalars read the stored columns and the pending state)."""
    assert len(run) == len(ref)
    for row, want in enumerate(ref):
        assert run.row_values(row) == want
        stored = run.stored_row(row)
        assert stored == run._ints[:, row].tolist()  # ``_flat`` views the same row
    if ref and run.rows.block:
        assert run.rows.total_context() == sum(r[1] for r in ref) + len(ref)
        assert run.rows.fewest_left() == min(r[4] - r[3] for r in ref)
        assert run.rows.crossings(1) == sum(1 for r in ref if r[1] % BLOCK == 0)
    # Reading the columns settles them: they must be the reference's too.
    assert run.ids.tolist() == [r[0] for r in ref]
    assert run.num_computed.tolist() == [r[1] for r in ref]
    assert run.num_tokens.tolist() == [r[2] for r in ref]
    assert run.num_generated.tolist() == [r[3] for r in ref]
    assert run.target.tolist() == [r[4] for r in ref]
    assert run.held_blocks.tolist() == [r[5] for r in ref]
    assert run.last_token_s.tolist() == times


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 40), st.integers(1, 60)),
        st.tuples(st.just("extend"), st.integers(1, 6), st.integers(1, 60)),
        st.tuples(st.just("drop_first"), st.just(0), st.just(0)),
        st.tuples(st.just("drop"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("pop"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("decode"), st.integers(1, 9), st.just(0)),
        st.tuples(st.just("drop_many"), st.integers(0, 1000), st.integers(0, 1000)),
        st.tuples(st.just("check"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, capacity=st.sampled_from([1, 2, 4, 64]))
def test_rows_read_back_as_a_list_of_rows_through_front_drops(
    ops: list[tuple[str, int, int]], capacity: int
) -> None:
    """Appends, passes' extends, first-row and other drops, pops, multi-row drops and implicit
    decode stretches in any order: the rows read back are the list's (``_check``), with the
    decode state pending across the drops (the lag, the held-blocks and token-time prefixes)."""
    run = RunningSet(capacity=capacity, block_size=BLOCK, max_itl_s=np.full(MAX_ROWS, np.nan))
    ref: list[list[int]] = []
    times: list[float] = []
    next_id, now = 0, 0.0
    for op, a, b in ops:
        if op == "append" and next_id < MAX_ROWS:
            tokens = b
            computed = b - 1 if a >= 20 else min(a, b - 1)  # decoding, or a prompt left
            run.append(next_id, computed, tokens, 1, tokens + 5, -(-computed // BLOCK), now)
            ref.append(_ref_row(next_id, computed, tokens, 1, tokens + 5))
            times.append(now)
            next_id += 1
        elif op == "extend" and next_id + a <= MAX_ROWS:
            new = [(next_id + i, b + i, 0, b + i + 3, -(-(b + i) // BLOCK)) for i in range(a)]
            run.extend(new, now)
            for rid, tokens, _, target, held in new:
                ref.append([rid, 0, tokens, 0, target, held])
                times.append(now)
            next_id += a
        elif op in ("drop_first", "drop", "pop") and ref:
            row = a % len(ref)
            if op == "pop":
                got = run.pop(row)
                want = ref[row]
                assert got == (want[0], want[1], want[2], want[5])
            else:
                run.drop_row(row)
            del ref[row], times[row]
        elif op == "drop_many" and len(ref) >= 2:
            rows = sorted({a % len(ref), b % len(ref), 0})
            if len(rows) >= 2:
                run.drop(np.array(rows, dtype=np.int64))
                for row in reversed(rows):
                    del ref[row], times[row]
        elif op == "decode" and ref and all(r[2] - r[1] == 1 for r in ref):
            # An implicit stretch of ``a`` decode steps (``engine/stretch.py``'s writes).
            implicit = run.rows
            new_blocks = implicit.crossings(a)
            implicit.decode(a, new_blocks, len(run))
            now += 1.0
            implicit.emitted(now)
            for r in ref:
                r[1] += a
                r[2] += a
                r[3] += a
                r[5] = -(-r[1] // BLOCK)
            times = [now] * len(ref)
        elif op == "check":
            _check(run, ref, times)
    _check(run, ref, times)


def test_the_first_row_leaves_without_moving_the_others() -> None:
    """``drop_row(0)`` moves row 0 on in the same buffers (no row copied), with a decode step
    pending; the dropped row is no longer counted (size, context, fewest left, crossings)."""
    run = RunningSet(capacity=8, block_size=BLOCK, max_itl_s=np.full(8, np.nan))
    for rid in range(4):
        run.append(rid, 3 + rid, 4 + rid, 1, 20 + rid, -(-(3 + rid) // BLOCK), 0.5)
    rows = run.rows
    rows.decode(2, rows.crossings(2), 4)
    rows.emitted(1.5)
    base, second = run._base, run._base[:, 1].copy()
    run.drop_row(0)
    assert run._base is base and run._start == 1
    np.testing.assert_array_equal(run._base[:, 1], second)  # row 1 stayed where it was
    assert len(run) == 3
    assert [run.row_values(row) for row in range(3)] == [
        [1, 6, 7, 3, 21, 2],
        [2, 7, 8, 3, 22, 2],
        [3, 8, 9, 3, 23, 2],
    ]
    assert rows.total_context() == 6 + 7 + 8 + 3
    assert rows.fewest_left() == 21 - 3
    assert rows.crossings(1) == 1  # only the row at 8 tokens crosses at its next step
    assert run.last_token_s.tolist() == [1.5, 1.5, 1.5]


def test_appends_reuse_the_freed_front() -> None:
    """Rows appended past the buffers' end move the live rows back to column 0 where the freed
    front holds them (the same capacity), else double: either way the rows read back."""
    run = RunningSet(capacity=4, block_size=BLOCK, max_itl_s=np.full(16, np.nan))
    for rid in range(4):
        run.append(rid, 0, 5 + rid, 0, 9 + rid, 2, float(rid))
    run.drop_row(0)
    run.drop_row(0)  # two rows left at columns 2 and 3
    assert run._start == 2
    run.append(4, 0, 9, 0, 13, 3, 4.0)  # moved back: columns 0-2
    assert run._start == 0 and run._capacity == 4
    run.extend([(5, 10, 0, 14, 3), (6, 11, 0, 15, 3)], 5.0)  # doubled
    assert run._capacity == 8
    assert run.ids.tolist() == [2, 3, 4, 5, 6]
    assert run.num_tokens.tolist() == [7, 8, 9, 10, 11]
    assert run.last_token_s.tolist() == [2.0, 3.0, 4.0, 5.0, 5.0]


def test_a_copy_views_its_own_buffers() -> None:
    """A deep copy after front drops: its flat view writes into its own columns, not the
    original's (``__getstate__``/``__setstate__`` make the views again)."""
    run = RunningSet(capacity=4, block_size=BLOCK, max_itl_s=np.full(8, np.nan))
    for rid in range(3):
        run.append(rid, 0, 5, 0, 9, 2, 0.0)
    run.drop_row(0)
    twin = copy.deepcopy(run)
    assert twin._start == 1 and twin.ids.tolist() == [1, 2]
    twin._flat[0] = 7  # row 0's id
    assert twin.ids.tolist() == [7, 2]
    assert run.ids.tolist() == [1, 2]


def test_a_full_buffer_with_a_short_front_doubles_once() -> None:
    """Where the freed front cannot hold the rows, the buffers double (not made again at the
    same capacity on every append: a row dropped from the front then one appended, over and
    over, is a FIFO running set's steady state)."""
    run = RunningSet(capacity=4, block_size=BLOCK, max_itl_s=np.full(64, np.nan))
    for rid in range(4):
        run.append(rid, 0, 5, 0, 9, 2, 0.0)
    bases = set()
    for rid in range(4, 40):
        run.drop_row(0)
        run.append(rid, 0, 5, 0, 9, 2, 0.0)
        bases.add(id(run._base))
    assert run._capacity == 8 and len(bases) == 1  # doubled once, then moved back in place
    assert run.ids.tolist() == [36, 37, 38, 39]
