"""The step of a prefilling last row beside implicit decoders (``engine/chunk_step.py``).

Above capacity resumed requests come back with more KV to recompute than one step's budget: the
last one admitted prefills in chunks beside the decoders, and the queue's next resumed requests
join behind it. ``chunk_step`` runs those steps in closed form where the general path
(``Scheduler.schedule`` -> ``_batch`` -> ``_finish_step``) ran them on the columns; here both
run whole preempting simulations and must leave every record, the ITL histogram and the KV
trace bit for bit the same, with the closed form taken many times.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import chunk_step, implicit_step, replica
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_chain import TAIL, _assert_identical
from .test_fast_equals_exact import Case, _check_case, _config, _plan_and_model, _workload

# Recomputes of up to ~1,000 tokens against a 256-token budget: several chunks each.
CHUNKED = replace(
    TAIL, num_requests=50, max_input=300, max_output=700, spare_blocks=40,
    max_num_batched_tokens=256,
)  # fmt: skip


def _fast(
    case: Case, *, closed: bool, columns: bool = False, check: bool = False
) -> tuple[SimulationResult, int]:
    """A fast run with the chunk step and the vector step's emission of a prefilling
    admitted row (and how many steps took them), or with the general path and column form
    only; ``columns``: the chunk step finishes every step in column form; ``check``: the
    invariants after every step."""
    taken = [0]

    def counting(r):  # type: ignore[no-untyped-def]
        ran = chunk_step.chunk_step(r)
        taken[0] += ran
        return ran

    def counting_admitted(*args):  # type: ignore[no-untyped-def]
        ran = chunk_step.emit_admitted(*args)
        taken[0] += ran
        return ran

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replica, "chunk_step", counting if closed else lambda r: False)
        patch.setattr(
            implicit_step, "emit_admitted", counting_admitted if closed else lambda *a: False
        )
        if columns:
            patch.setattr(
                chunk_step, "emit_rows", lambda r, last, after, duration: chunk_step.column_finish(
                    r, last, [row[3] for row in after], duration
                ),
            )  # fmt: skip
        plan, model = _plan_and_model()
        wl = _workload(case)
        sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
        res = sim.run(check=(lambda rep: rep.check_invariants()) if check else None)
    return res, taken[0]


@pure_only
def test_chunk_steps_equal_the_general_path() -> None:
    closed, taken = _fast(CHUNKED, closed=True)
    general, _ = _fast(CHUNKED, closed=False)
    assert closed.records.num_preemptions.sum() > 100
    assert taken > 50
    _assert_identical(closed, general)


@pure_only
def test_chunk_steps_in_column_form_equal_the_general_path() -> None:
    # The fallback where a gap is not one step long in floats, taken at every step.
    columns, taken = _fast(CHUNKED, closed=True, columns=True)
    assert taken > 50
    _assert_identical(columns, _fast(CHUNKED, closed=False)[0])


@pure_only
def test_chunk_steps_keep_the_invariants_and_fast_equals_exact() -> None:
    # Reading the columns after each step settles the rows: the chunk step relearns them.
    checked, taken = _fast(CHUNKED, closed=True, check=True)
    assert taken > 50
    _assert_identical(checked, _fast(CHUNKED, closed=True)[0])
    _check_case(CHUNKED)


@st.composite
def chunked_cases(draw: st.DrawFn) -> Case:
    return replace(
        CHUNKED,
        num_requests=draw(st.integers(15, 40)),
        max_input=draw(st.integers(8, 400)),
        max_output=draw(st.integers(100, 700)),
        request_rate=draw(st.sampled_from([float("inf"), 50.0, 10.0])),
        seed=draw(st.integers(0, 10_000)),
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        spare_blocks=draw(st.integers(0, 80)),
        max_num_batched_tokens=draw(st.sampled_from([64, 256, 512])),
        max_num_seqs=draw(st.sampled_from([8, 1024])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "spf"])),
    )


@pure_only
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=chunked_cases())
def test_chunk_steps_bit_for_bit(case: Case) -> None:
    _assert_identical(_fast(case, closed=True)[0], _fast(case, closed=False)[0])


@pure_only
def test_one_token_left_after_a_sample_reads_as_a_decode() -> None:
    # A resumed row cut one token short of its recompute is a decode to ``all_decoding``: the
    # next step may be a stretch (here a preempting decode step), as after the column form.
    case = replace(
        CHUNKED, num_requests=37, max_input=8, max_output=100, request_rate=float("inf"),
        seed=0, block_size=1, spare_blocks=0, max_num_seqs=8, max_num_batched_tokens=64,
    )  # fmt: skip
    closed, taken = _fast(case, closed=True)
    assert taken > 20
    _assert_identical(closed, _fast(case, closed=False)[0])
