"""The clock: every run ends in a bounded number of events, and where a trace's times start
changes nothing (issue 9, items 1 and 2).

- A far arrival (rate 1e-100, a trace row at 1e300 s) once made ``_steps_before`` walk one
  float at a time forever; the search is now bounded by the stretch's own length.
- The same-instant tolerance once grew with the absolute clock (1e-9 of 1.7e9 s is 1.7 s, so
  requests were served before they arrived); the clock now starts at the first arrival.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.session import ServingOptions, simulate
from inferplan.engine.simulator import SimulationResult
from inferplan.engine.stretch import _steps_before
from inferplan.memory.plan import MemoryPlan
from inferplan.metrics.records import RequestStatus
from inferplan.metrics.summary import summarize
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload


@cache
def _plan_and_model() -> tuple[MemoryPlan, StepTimeModel]:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return plan, build_step_model(plan)


def _workload(arrival_s: np.ndarray, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    n = len(arrival_s)
    return Workload(
        arrival_s=np.asarray(arrival_s, dtype=np.float64),
        input_tokens=rng.integers(1, 400, size=n).astype(np.int64),
        output_tokens=rng.integers(1, 300, size=n).astype(np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )


def _run(wl: Workload, **options: object) -> SimulationResult:
    plan, model = _plan_and_model()
    return simulate(plan, model, wl, ServingOptions(**options))  # type: ignore[arg-type]


def _elapsed(i: int, a: float, b: float, context: int, n: int) -> float:
    return i * a + b * (i * context + n * i * (i - 1) / 2)


@settings(max_examples=200, deadline=None)
@given(
    window_s=st.floats(1e-6, 1e300),
    a=st.floats(1e-4, 0.1),
    b=st.floats(0.0, 1e-8),
    context=st.integers(1, 10**6),
    n=st.integers(1, 1024),
    cap=st.integers(0, 10**7),
)
def test_steps_before_is_the_first_step_that_reaches_the_window(
    window_s: float, a: float, b: float, context: int, n: int, cap: int
) -> None:
    i = _steps_before(window_s, a, b, context, n, cap)
    assert 0 <= i <= cap
    if i < cap:  # step i is the first whose elapsed time reaches the window
        assert _elapsed(i, a, b, context, n) >= window_s
    if i > 0:
        assert _elapsed(i - 1, a, b, context, n) < window_s


def test_steps_before_far_window_returns_the_cap() -> None:
    assert _steps_before(1e100, 0.01, 1e-9, 1000, 4, 500) == 500
    assert _steps_before(1e300, 0.01, 0.0, 1000, 4, 10**9) == 10**9


def test_vanishing_request_rate_ends() -> None:
    """Regression: requests 1e100 s apart (``--request-rate 1e-100``) span a stretch whose next
    arrival is beyond any float step; the run ends and serves every request alone."""
    wl = _workload(np.arange(20) * 1e100)
    res = _run(wl)
    assert np.all(res.records.status == int(RequestStatus.COMPLETED))
    # Each request runs alone: one prefill step, then its decodes, as a few stretches.
    assert res.num_steps <= int(wl.output_tokens.sum())


def test_trace_rows_at_zero_and_1e300_end() -> None:
    wl = _workload(np.array([0.0, 0.0, 1.0, 1e300]))
    res = _run(wl)
    assert np.all(res.records.status == int(RequestStatus.COMPLETED))


def _summary(res: SimulationResult) -> dict[str, object]:
    return summarize(res.records, res.itl, duration_s=res.duration_s)


def test_shifted_arrivals_give_identical_summaries() -> None:
    """Regression: shifting every arrival by 0, 1e6 s or Unix-epoch seconds (1.7e9) gives the
    same run. Arrivals on a 1/1024-s grid stay exact after the shift, so the summaries must be
    equal to the last bit; tight bursts make arrivals tie with step boundaries."""
    rng = np.random.default_rng(7)
    base = np.cumsum(rng.integers(0, 40, size=300)) / 1024.0
    summaries = []
    for shift_s in (0.0, 1e6, 1.7e9):
        shifted = base + shift_s
        assert np.array_equal(shifted - shift_s, base)  # the grid survives the shift
        res = _run(_workload(shifted, seed=1))
        assert res.time_offset_s == shift_s + base[0]
        assert np.all(res.records.status == int(RequestStatus.COMPLETED))
        assert np.all(res.records.first_token_s >= res.records.arrival_s)
        summaries.append(_summary(res))
    assert summaries[0] == summaries[1] == summaries[2]


def test_shifted_poisson_trace_matches_to_rounding() -> None:
    """Poisson times at Unix-epoch seconds lose their low bits; the summary still matches the
    unshifted run to the rounding of the arrival times."""
    rng = np.random.default_rng(3)
    base = np.cumsum(rng.exponential(0.05, size=200))
    plain = _summary(_run(_workload(base, seed=2)))
    epoch = _summary(_run(_workload(base + 1.7e9, seed=2)))
    for key in ("mean_ttft_ms", "mean_tpot_ms", "duration", "completed"):
        value, other = plain[key], epoch[key]
        assert isinstance(value, float | int) and isinstance(other, float | int)
        assert math.isclose(value, other, rel_tol=1e-4), key
