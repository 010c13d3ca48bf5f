"""The step whose prefilling last row is preempted, in closed form (``engine/preempt_step.py``).

Above capacity the pool often cannot give a chunked resumed row its next chunk beside the
decoders: vLLM v1's running pass preempts that row (the last admitted) and the decoders run a
pure decode step. ``preempt_step`` runs it on the implicit scalars where the general path
(``Scheduler._schedule_running_with_preemption`` -> ``_batch`` -> ``_finish_step``) ran it on
the columns. Here the two run from one state, step for step, and whole preempting simulations
run with and without the closed form: the same records, ITL histogram and KV trace bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import preempt_step, replica, simulator
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_chain import _assert_identical
from .test_chunk_step import CHUNKED, chunked_cases
from .test_fast_equals_exact import Case, _check_case, _config, _plan_and_model, _workload

# The chunk step's case with a 128-token budget and a smaller pool: resumed rows cut into many
# chunks, the pool often short of the next one (about 50 such steps in 1,400 preemptions).
PREEMPTING = replace(CHUNKED, max_num_batched_tokens=128, spare_blocks=20)


class _ReachedError(Exception):
    """Raised after the step under test, leaving the simulation's state as that step left it."""


def _simulation(case: Case) -> Simulation:
    plan, model = _plan_and_model()
    wl = _workload(case)
    return Simulation(wl, _config(case, wl, plan, exact=False), model)


def _fast(
    case: Case, *, closed: bool, columns: bool = False, check: bool = False
) -> tuple[SimulationResult, int]:
    """A fast run with the closed form (and how many steps took it) or the general path in its
    place; ``columns``: every closed-form step finishes in column form; ``check``: the
    invariants after every step."""
    taken = [0]

    def counting(r: Any) -> bool:
        ran = preempt_step.preempt_step(r)
        taken[0] += ran
        return ran

    with pytest.MonkeyPatch.context() as patch:
        # the partial cycles' preempting steps on the loop's path, not carried in a pass
        patch.setattr(simulator, "PASS_PAST_ARRIVALS", False)
        patch.setattr(replica, "preempt_step", counting if closed else lambda r: False)
        if columns:
            patch.setattr(
                preempt_step,
                "emit_rows",
                lambda r, last, after, duration: preempt_step.column_finish(r, last, [], duration),
            )
        sim = _simulation(case)
        res = sim.run(check=(lambda rep: rep.check_invariants()) if check else None)
    return res, taken[0]


def _state_after(case: Case, k: int, *, closed: bool) -> tuple[Any, ...]:
    """Run ``case`` on the general path up to the ``k``-th step the closed form covers, take
    that step in closed form or on the general path, and return everything either could
    change: the running columns, pool, queue, clock, records, ITL histogram and KV trace."""
    seen = [0]

    def one_step(r: Any) -> bool:
        if preempt_step.victim_crossing(r) is None:
            return False
        seen[0] += 1
        if seen[0] < k:
            return False
        r.stop_after = True  # this step, closed or general, is the one compared
        return closed and preempt_step.preempt_step(r)

    step = replica.Replica.step

    def stepping(r: Any) -> None:
        step(r)
        if getattr(r, "stop_after", False):
            raise _ReachedError

    sim = _simulation(case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulator, "PASS_PAST_ARRIVALS", False)
        patch.setattr(replica, "preempt_step", one_step)
        patch.setattr(replica.Replica, "step", stepping)
        with pytest.raises(_ReachedError):
            sim.run()
    (r,) = sim.replicas
    r.running.rows.flush_itl()  # the implicit rows' pending worst gaps, written
    run, rec, itl = r.running, r.records, r.itl
    columns = [run.ids, run.num_computed, run.num_tokens, run.num_generated, run.target]
    records = [
        getattr(rec, name)
        for name in ("num_preemptions", "recomputed_tokens", "first_token_s", "max_itl_s")
    ]
    return (
        r.num_steps,
        r.now,
        r.pool.free_blocks,
        list(r.waiting._fifo),
        dict(r.waiting.tokens),
        r.is_decoding(),
        [c.tolist() for c in columns],
        run.held_blocks.tolist(),
        run.last_token_s.tolist(),
        [np.nan_to_num(a, nan=-1.0).tolist() for a in records],
        itl.counts.tolist(),
        [itl.sum_s, itl.total_weight, itl.min_s, itl.max_s],
        r.trace.summary(),
    )


@pure_only
@pytest.mark.parametrize("k", [1, 20, 50])
def test_one_step_from_the_same_state_equals_the_general_path(k: int) -> None:
    closed = _state_after(PREEMPTING, k, closed=True)
    general = _state_after(PREEMPTING, k, closed=False)
    assert closed == general
    num_preemptions = closed[9][0]
    assert sum(num_preemptions) >= k  # the step preempted (the victim counted)


@pure_only
def test_preempting_steps_equal_the_general_path() -> None:
    closed, taken = _fast(PREEMPTING, closed=True)
    general, _ = _fast(PREEMPTING, closed=False)
    assert taken > 40
    _assert_identical(closed, general)


@pure_only
def test_preempting_steps_in_column_form_equal_the_general_path() -> None:
    # The fallback where a gap is not one step long in floats, taken at every such step.
    columns, taken = _fast(PREEMPTING, closed=True, columns=True)
    assert taken > 40
    _assert_identical(columns, _fast(PREEMPTING, closed=False)[0])


@pure_only
def test_preempting_steps_keep_the_invariants_and_fast_equals_exact() -> None:
    checked, taken = _fast(PREEMPTING, closed=True, check=True)
    assert taken > 40
    _assert_identical(checked, _fast(PREEMPTING, closed=True)[0])
    _check_case(PREEMPTING)


@st.composite
def preempting_cases(draw: st.DrawFn) -> Case:
    # The chunk step's cases, with the priority policy and swaps (the closed form declines).
    case = draw(chunked_cases())
    policy = draw(st.sampled_from([case.scheduling_policy, "priority"]))
    mode = draw(st.sampled_from(["recompute", "recompute", "swap"]))
    return replace(case, scheduling_policy=policy, preemption_mode=mode)


@pure_only
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=preempting_cases())
def test_preempting_steps_bit_for_bit(case: Case) -> None:
    _assert_identical(_fast(case, closed=True)[0], _fast(case, closed=False)[0])


@pure_only
def test_more_victims_than_the_prefilling_row_take_the_general_path() -> None:
    # Here once the decoders' crossings exceed the free blocks and the prefilling row's
    # (``crossing > free + held``): the running pass preempts decoders too.
    case = replace(
        PREEMPTING, num_requests=30, max_input=400, max_output=700, request_rate=float("inf"),
        seed=2, block_size=32, spare_blocks=0, max_num_batched_tokens=64,
    )  # fmt: skip
    closed, taken = _fast(case, closed=True)
    assert taken > 20
    _assert_identical(closed, _fast(case, closed=False)[0])
