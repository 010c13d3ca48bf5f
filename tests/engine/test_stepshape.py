"""The vector step's batch shape (``engine/stepshape.py``) against the general path's sums
(``Replica._batch`` over the step's columns), for any mix of admitted rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from inferplan.engine.stepshape import step_shape

_ROWS = st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 100_000)), max_size=12)


def _general(decoders: list[int], chunks: list[int], hits: list[int]) -> tuple[float, ...]:
    """``Replica._batch``: decoders scheduled one token, admitted rows their chunk at their hit."""
    computed = np.array(decoders + hits, dtype=np.int64)
    sched = np.array([1] * len(decoders) + chunks, dtype=np.int64)
    decode = (sched == 1) & (computed > 0)
    prefill = (sched > 0) & ~decode
    q, o = sched[prefill], computed[prefill]
    num_decode = int(decode.sum())
    return (
        int(q.sum()),
        float((q * o + q * (q + 1) / 2).sum()),
        int(o.sum()),
        len(q),
        num_decode,
        int(computed[decode].sum()) + num_decode,
    )


@given(decoders=st.lists(st.integers(1, 100_000), max_size=20), rows=_ROWS)
def test_step_shape_equals_the_general_sums(
    decoders: list[int], rows: list[tuple[int, int]]
) -> None:
    chunks, hits = [q for q, _ in rows], [o for _, o in rows]
    n = len(decoders)
    assert step_shape(n, sum(decoders) + n, chunks, hits) == _general(decoders, chunks, hits)


def test_one_token_chunks_after_a_hit_are_decodes_and_fresh_ones_prefills() -> None:
    # Three rows: a 100-token chunk after 64 cached, one token after 64 (a decode reading 65),
    # a one-token fresh prompt (a prefill), beside two decodes of total context 10.
    assert step_shape(2, 10, [100, 1, 1], [64, 64, 0]) == (
        101, 100 * 64 + 100 * 101 / 2 + 1.0, 64, 2, 3, 10 + 65,
    )  # fmt: skip
    assert step_shape(2, 10, [], []) == (0, 0.0, 0, 0, 2, 10)
