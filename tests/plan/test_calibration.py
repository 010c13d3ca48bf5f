"""The efficiency fit: robust loss, bounded search, recovery of known constants."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from inferplan.perf.efficiency import Efficiency, bundled_efficiency
from inferplan.plan import calibration
from inferplan.plan.calibration import BOUNDS, fit_efficiency, golden_section, huber, loss
from inferplan.plan.validation import Result, Run, bundled_cases, runs_for


def test_huber_is_quadratic_then_linear() -> None:
    knee = calibration.HUBER_KNEE
    assert huber(0.1) == pytest.approx(0.005)
    assert huber(-0.1) == huber(0.1)
    assert huber(2 * knee) == pytest.approx(knee * 1.5 * knee)  # linear beyond the knee


def test_loss_is_zero_only_for_exact_predictions() -> None:
    run = runs_for(bundled_cases()[0])[0]
    assert loss([Result(run, run.measured)]) == 0.0
    assert loss([Result(run, run.measured * 2)]) == loss([Result(run, run.measured / 2)]) > 0


def testgolden_section_section_finds_a_bounded_minimum() -> None:
    assert golden_section(lambda x: (x - 0.37) ** 2, 0.0, 1.0, 30) == pytest.approx(0.37, abs=1e-4)
    assert golden_section(lambda x: -x, 0.2, 1.0, 30) == pytest.approx(1.0, abs=1e-4)


def test_fit_recovers_known_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in simulator whose predictions equal the measurements exactly at known constants
    (throughput proportional to the GEMM efficiency, latency to the per-step overhead): the fit
    must find those constants from a wrong start."""
    truth = {"gemm_compute": 0.62, "step_overhead_s": 0.0013}
    runs = runs_for(bundled_cases()[0])[:3]

    def fake_predict(run: Run, eff: Efficiency | None = None) -> float:
        assert eff is not None
        gemm = eff.gemm_compute / truth["gemm_compute"]
        overhead = (eff.step_overhead_s + 1e-3) / (truth["step_overhead_s"] + 1e-3)
        # The first run sees only the GEMM constant, the second only the overhead.
        factor = {0: gemm, 1: overhead}.get(runs.index(run), gemm * overhead)
        return run.measured * factor

    monkeypatch.setattr(calibration, "predict", fake_predict)
    start = replace(bundled_efficiency("hopper"), gemm_compute=0.9, step_overhead_s=0.004)
    fitted, results = fit_efficiency(runs, start, sweeps=8, steps=25)
    assert loss(results) < 1e-5
    assert fitted.gemm_compute == pytest.approx(truth["gemm_compute"], rel=0.01)
    assert fitted.step_overhead_s == pytest.approx(truth["step_overhead_s"], rel=0.02)
    for name, (low, high) in BOUNDS.items():
        assert low <= getattr(fitted, name) <= high
    assert math.isfinite(loss(results))
