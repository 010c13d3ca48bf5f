"""A step and the chunk steps after it in one call (``engine/chunk_run.py``), and a doomed pass
asked again where the last one ended (``Replica.doomed_mark``, ``engine/thrash.py``).

Both run whole simulations against the loop's own path (``Replica.step`` once per pass of the
loop; every doomed pass built) and must leave every record, the ITL histogram and the KV trace
bit for bit the same, each with the mechanism taken many times.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.engine import chunk_run, thrash
from inferplan.engine import simulator as simulator_module
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_chain import _assert_identical
from .test_chunk_step import CHUNKED
from .test_fast_equals_exact import Case, _config, _plan_and_model, _workload
from .test_thrash import THRASH

# Long prompts chunked below capacity: short requests arrive while a long one prefills, and its
# last chunk leaves budget over for them (the intake's arrivals then change the step).
ARRIVING = replace(
    CHUNKED, num_requests=40, max_input=2000, max_output=60, request_rate=30.0, spare_blocks=400
)


def _run(case: Case, *, runs: bool, patch: pytest.MonkeyPatch) -> tuple[SimulationResult, int]:
    """A fast run with ``step_then_chunks`` (``runs``) or with ``Replica.step`` alone in its
    place; and the steps the runner took after its first one."""
    later = [0]

    def counting(r, intake):  # type: ignore[no-untyped-def]
        steps = r.num_steps
        chunk_run.step_then_chunks(r, intake)
        later[0] += max(r.num_steps - steps - 1, 0)

    patch.setattr(
        simulator_module, "step_then_chunks", counting if runs else lambda r, intake: r.step()
    )
    # the partial cycles an arrival cuts on the loop's path, not carried in a pass
    patch.setattr(simulator_module, "PASS_PAST_ARRIVALS", False)
    plan, model = _plan_and_model()
    wl = _workload(case)
    res = Simulation(wl, _config(case, wl, plan, exact=False), model).run()
    return res, later[0]


@pure_only
@pytest.mark.parametrize(
    ("case", "least"), [(THRASH, 60), (replace(THRASH, seed=7), 100), (CHUNKED, 50)]
)
def test_chunk_runs_are_the_loops_steps(case: Case, least: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        fast, later = _run(case, runs=True, patch=patch)
    with pytest.MonkeyPatch.context() as patch:
        loop, _ = _run(case, runs=False, patch=patch)
    assert later >= least
    _assert_identical(fast, loop)


@pure_only
def test_arrivals_are_taken_in_between_chunk_steps() -> None:
    """The intake routes the arrivals that come due inside a run, where the loop would."""
    taken = [0]
    with pytest.MonkeyPatch.context() as patch:
        real = chunk_run.step_then_chunks

        def counting_intake(r, intake):  # type: ignore[no-untyped-def]
            def counted(now: float) -> float | None:
                out = intake(now)
                taken[0] += out is not None
                return out

            real(r, None if intake is None else counted)

        patch.setattr(chunk_run, "step_then_chunks", counting_intake)
        fast, later = _run(ARRIVING, runs=True, patch=patch)
    with pytest.MonkeyPatch.context() as patch:
        loop, _ = _run(ARRIVING, runs=False, patch=patch)
    assert later >= 90 and taken[0] >= 10
    _assert_identical(fast, loop)


@pure_only
@pytest.mark.parametrize(
    "case", [replace(THRASH, num_requests=60), replace(THRASH, num_requests=60, seed=11)]
)
def test_a_pass_asked_again_where_one_ended_takes_nothing(case: Case) -> None:
    """Where ``doomed_mark`` answers, the pass it stands for takes no cycle and leaves the lines as
    they were; and the run equals one that builds every pass."""
    answered = [0]
    real_cycles = thrash.doomed_cycles

    def checking(replica, next_arrival_s, *intake):  # type: ignore[no-untyped-def]
        if replica.doomed_mark == thrash._state_key(replica, next_arrival_s):
            answered[0] += 1
            lines = {k: dict(v[1]) for k, v in thrash._LINES.items()}
            replica.doomed_mark = None  # build the pass it stands for
            assert not real_cycles(replica, next_arrival_s, *intake)
            assert {k: dict(v[1]) for k, v in thrash._LINES.items()} == lines
            return False
        return real_cycles(replica, next_arrival_s, *intake)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulator_module, "doomed_cycles", checking)
        checked, _ = _run(case, runs=True, patch=patch)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(thrash, "_state_key", lambda r, next_arrival_s: object())  # never equal
        built, _ = _run(case, runs=True, patch=patch)
    with pytest.MonkeyPatch.context() as patch:
        skipped, _ = _run(case, runs=True, patch=patch)
    assert answered[0] >= 20
    _assert_identical(checked, built)
    _assert_identical(skipped, built)


@pure_only
@pytest.mark.parametrize(
    ("case", "least"), [(THRASH, 15), (replace(THRASH, seed=7), 40), (ARRIVING, 60)]
)
def test_prefill_on_steps_are_the_loops_steps(case: Case, least: int) -> None:
    """``prefill_on_step`` (a chunk step right after a chunk step, without its questions) is
    taken many times, and the run equals the loop's (``Replica.step`` once per pass)."""
    taken = [0]
    with pytest.MonkeyPatch.context() as patch:
        real = chunk_run.prefill_on_step

        def counting(r):  # type: ignore[no-untyped-def]
            out = real(r)
            taken[0] += out
            return out

        patch.setattr(chunk_run, "prefill_on_step", counting)
        fast, _ = _run(case, runs=True, patch=patch)
    with pytest.MonkeyPatch.context() as patch:
        loop, _ = _run(case, runs=False, patch=patch)
    assert taken[0] >= least
    _assert_identical(fast, loop)
