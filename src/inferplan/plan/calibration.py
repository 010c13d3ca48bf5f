"""Fitting the step-time model's efficiency constants to measurements, all cases at once.

The objective is the mean over every measured number of a robust loss of its log error,
``huber(log(predicted / measured))`` with a knee at ``HUBER_KNEE`` (25 %): log errors treat over-
and under-prediction alike, and the Huber knee keeps a case that sits near saturation (where
latency explodes for a small change in capacity) from dragging every constant on its own.

The search is a bounded coordinate descent: each constant in turn is optimised by golden-section
search inside its physical bounds (fractions in (0, 1], overheads non-negative) with the others
held, for a few sweeps. Nothing is tuned per case: one set of constants serves every case of a
GPU family. Each evaluation simulates every case end to end, so the fit costs minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from inferplan.perf.efficiency import Efficiency
from inferplan.plan.validation import Result, Run, predict

HUBER_KNEE = math.log(1.25)
GOLDEN = (math.sqrt(5) - 1) / 2

# Constants the fit moves, with their bounds: fractions of a peak stay in (0, 1].
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute": (0.2, 1.0),
    "memory_bandwidth": (0.4, 1.0),
    "attention_compute": (0.1, 1.0),
    "attention_memory": (0.2, 1.0),
    "step_overhead_s": (0.0, 0.01),
    "per_seq_overhead_s": (0.0, 5e-5),
}


def huber(x: float, knee: float = HUBER_KNEE) -> float:
    return 0.5 * x * x if abs(x) <= knee else knee * (abs(x) - 0.5 * knee)


def loss(results: list[Result]) -> float:
    """Mean robust loss of the log errors."""
    terms = [huber(math.log(max(r.predicted, 1e-12) / r.run.measured)) for r in results]
    return sum(terms) / len(terms)


@dataclass(frozen=True)
class FitStep:
    constant: str
    value: float
    loss: float


def _golden(objective: Callable[[float], float], low: float, high: float, steps: int) -> float:
    """Golden-section search for a minimum of a unimodal ``objective`` on [low, high]."""
    a, b = low, high
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = objective(c), objective(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = objective(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = objective(d)
    return c if fc <= fd else d


def fit_efficiency(
    runs: list[Run],
    start: Efficiency,
    *,
    sweeps: int = 2,
    steps: int = 6,
    on_step: Callable[[FitStep], None] | None = None,
) -> tuple[Efficiency, list[Result]]:
    """Constants minimising ``loss`` over ``runs``, starting from ``start``."""

    def evaluate(eff: Efficiency) -> float:
        return loss([Result(run, predict(run, eff)) for run in runs])

    best = start
    best_loss = evaluate(best)
    for _ in range(sweeps):
        for name, (low, high) in BOUNDS.items():

            def objective(value: float, name: str = name, base: Efficiency = best) -> float:
                return evaluate(replace(base, **{name: value}))

            value = _golden(objective, low, high, steps)
            candidate_loss = objective(value)
            if candidate_loss < best_loss:
                best, best_loss = replace(best, **{name: value}), candidate_loss
            if on_step is not None:
                on_step(FitStep(name, getattr(best, name), best_loss))
    return best, [Result(run, predict(run, best)) for run in runs]
