"""Resumed requests re-admitted by the implicit vector step (``engine/implicit_step.py``).

Above capacity the victims of recompute preemption come back at the queue's head and the step
after a finish re-admits them with their whole recomputed KV as one chunk. That step keeps the
rows implicit (one ITL sample per row that emitted one step ago, the resumed rows' worst gap
written, no first token) where the column form (``_general_emit``) did the same work on settled
columns; here both forms run and must leave every record, the ITL histogram and the KV trace
bit for bit the same, with the implicit form taken many times.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import implicit_step
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_chain import TAIL, _assert_identical
from .test_fast_equals_exact import Case, _check_case, _config, _plan_and_model, _workload


def _fast(case: Case, *, implicit: bool, check: bool = False) -> tuple[SimulationResult, int]:
    """A fast run with resumed admissions in implicit form (and how many took it), or in the
    column form only; ``check``: the invariants after every step."""
    taken = [0]
    resumed_gaps = implicit_step._resumed_gaps

    def counting(*args):  # type: ignore[no-untyped-def]
        taken[0] += 1
        resumed_gaps(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit_step, "_resumed_gaps", counting)
        if not implicit:
            patch.setattr(implicit_step, "_one_step_gaps", lambda *args: False)
        plan, model = _plan_and_model()
        wl = _workload(case)
        sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
        res = sim.run(check=(lambda replica: replica.check_invariants()) if check else None)
    return res, taken[0]


RESUMING = replace(TAIL, num_requests=60, max_input=60, max_output=700, spare_blocks=60)


@pure_only
def test_resumed_admissions_implicit_equal_the_column_form() -> None:
    implicit, taken = _fast(RESUMING, implicit=True)
    columns, _ = _fast(RESUMING, implicit=False)
    assert implicit.records.num_preemptions.sum() > 100
    assert taken > 20
    _assert_identical(implicit, columns)


@pure_only
def test_resumed_admissions_keep_the_invariants_and_fast_equals_exact() -> None:
    # Reading the columns after each step settles the rows: the column form runs there.
    checked, _ = _fast(RESUMING, implicit=True, check=True)
    _assert_identical(checked, _fast(RESUMING, implicit=True)[0])
    _check_case(RESUMING)


@st.composite
def resuming_cases(draw: st.DrawFn) -> Case:
    return replace(
        RESUMING,
        num_requests=draw(st.integers(20, 50)),
        max_input=draw(st.integers(8, 300)),
        max_output=draw(st.integers(100, 800)),
        request_rate=draw(st.sampled_from([float("inf"), 50.0, 10.0])),
        seed=draw(st.integers(0, 10_000)),
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        spare_blocks=draw(st.integers(0, 80)),
        max_num_batched_tokens=draw(st.sampled_from([256, 512, 2048])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "spf"])),
    )


@pure_only
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=resuming_cases())
def test_resumed_admissions_bit_for_bit(case: Case) -> None:
    _assert_identical(_fast(case, implicit=True)[0], _fast(case, implicit=False)[0])
