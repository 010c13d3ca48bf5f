"""Fitting the step-time model's efficiency constants to measurements, all cases at once.

The objective is the mean over every measured number of a robust loss of its log error,
``huber(log(predicted / measured))`` with a knee at ``HUBER_KNEE`` (25 %): log errors treat over-
and under-prediction alike, and the Huber knee keeps a case that sits near saturation (where
latency explodes for a small change in capacity) from dragging every constant on its own.

The search stays inside physical bounds (fractions in (0, 1], overheads non-negative). Two
methods: a coordinate descent (each constant in turn by golden-section search, the others held,
for a few sweeps; cheap per sweep, the all-cases fit), and a Nelder-Mead simplex in coordinates
scaled to the bounds (Nelder & Mead 1965; it follows the narrow valleys that coupled constants
make, e.g. weight streaming vs per-step overhead, used by ``inferplan calibrate``). Nothing is
tuned per case: one set of constants serves every case of a GPU family. Each evaluation
simulates every case end to end, so the all-cases fit costs minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from inferplan.perf.efficiency import Efficiency
from inferplan.plan.validation import Result, Run, predict

HUBER_KNEE = math.log(1.25)
GOLDEN = (math.sqrt(5) - 1) / 2

# FlashAttention-3 reaches up to 75 % of the H100's BF16 peak in the forward pass (Shah et al.,
# "FlashAttention-3", 2024, abstract: 740 TFLOPs/s); no prefill attention does better.
ATTENTION_COMPUTE_MAX = 0.75

# Constants the fit moves, with their bounds: fractions of a peak stay in (0, 1].
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute": (0.2, 1.0),
    "memory_bandwidth": (0.4, 1.0),
    "attention_compute": (0.1, ATTENTION_COMPUTE_MAX),
    "attention_memory": (0.2, 1.0),
    "step_overhead_s": (0.0, 0.01),
    "per_seq_overhead_s": (0.0, 5e-5),
}


# What a user's benchmark results can pin down: throughput at load (GEMM efficiency), single-
# stream speed (weight streaming) and per-step overhead.
USER_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute": (0.2, 1.0),
    "memory_bandwidth": (0.4, 1.0),
    "step_overhead_s": (0.0, 0.01),
}
FRACTIONS = ("gemm_compute", "memory_bandwidth", "attention_compute", "attention_memory")


def at_physical_limit(eff: Efficiency, bounds: dict[str, tuple[float, float]]) -> list[str]:
    """Fitted fractions pressed against 1 (the fit wanted more than the hardware's peak)."""
    return [name for name in bounds if name in FRACTIONS and getattr(eff, name) >= 0.999]


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


def golden_section(
    objective: Callable[[float], float], low: float, high: float, steps: int
) -> float:
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


def nelder_mead(
    objective: Callable[[list[float]], float], start: list[float], iterations: int
) -> list[float]:
    """Minimise ``objective`` over the unit cube (points are clipped into it)."""

    def clip(point: list[float]) -> list[float]:
        return [min(1.0, max(0.0, x)) for x in point]

    dims = len(start)
    simplex = [clip(start)]
    for i in range(dims):
        vertex = list(start)
        vertex[i] += 0.15 if vertex[i] < 0.85 else -0.15
        simplex.append(clip(vertex))
    values = [objective(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(dims + 1), key=lambda i: values[i])
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = [sum(p[d] for p in simplex[:-1]) / dims for d in range(dims)]

        def toward(
            t: float, centroid: list[float] = centroid, worst: list[float] = simplex[-1]
        ) -> list[float]:
            return clip([c + t * (w - c) for c, w in zip(centroid, worst, strict=True)])

        reflected = toward(-1.0)
        value = objective(reflected)
        if value < values[0]:
            expanded = toward(-2.0)
            expanded_value = objective(expanded)
            simplex[-1], values[-1] = (
                (expanded, expanded_value) if expanded_value < value else (reflected, value)
            )
        elif value < values[-2]:
            simplex[-1], values[-1] = reflected, value
        else:
            contracted = toward(0.5)
            contracted_value = objective(contracted)
            if contracted_value < values[-1]:
                simplex[-1], values[-1] = contracted, contracted_value
            else:  # shrink toward the best vertex
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for b, x in zip(best, p, strict=True)] for p in simplex[1:]
                ]
                values = [values[0]] + [objective(p) for p in simplex[1:]]
    return simplex[min(range(dims + 1), key=lambda i: values[i])]


def fit_simplex(
    runs: list[Run],
    start: Efficiency,
    bounds: dict[str, tuple[float, float]],
    *,
    iterations: int = 80,
) -> tuple[Efficiency, list[Result]]:
    """Constants minimising ``loss`` over ``runs`` by a simplex search inside ``bounds``."""
    names = list(bounds)

    def constants(point: list[float]) -> Efficiency:
        values = {
            name: bounds[name][0] + x * (bounds[name][1] - bounds[name][0])
            for name, x in zip(names, point, strict=True)
        }
        return replace(start, **values)

    def objective(point: list[float]) -> float:
        eff = constants(point)
        return loss([Result(run, predict(run, eff)) for run in runs])

    origin = [(getattr(start, name) - low) / (high - low) for name, (low, high) in bounds.items()]
    best = constants(nelder_mead(objective, origin, iterations))
    return best, [Result(run, predict(run, best)) for run in runs]


def fit_efficiency(
    runs: list[Run],
    start: Efficiency,
    *,
    sweeps: int = 2,
    steps: int = 6,
    bounds: dict[str, tuple[float, float]] | None = None,
    on_step: Callable[[FitStep], None] | None = None,
) -> tuple[Efficiency, list[Result]]:
    """Constants minimising ``loss`` over ``runs`` by coordinate descent from ``start``."""

    def evaluate(eff: Efficiency) -> float:
        return loss([Result(run, predict(run, eff)) for run in runs])

    best = start
    best_loss = evaluate(best)
    for _ in range(sweeps):
        for name, (low, high) in (bounds or BOUNDS).items():

            def objective(value: float, name: str = name, base: Efficiency = best) -> float:
                return evaluate(replace(base, **{name: value}))

            value = golden_section(objective, low, high, steps)
            candidate_loss = objective(value)
            if candidate_loss < best_loss:
                best, best_loss = replace(best, **{name: value}), candidate_loss
            if on_step is not None:
                on_step(FitStep(name, getattr(best, name), best_loss))
    return best, [Result(run, predict(run, best)) for run in runs]


def calibration_yaml(eff: Efficiency, header: list[str]) -> str:
    """A ``--calibration`` file: ``header`` as comments, then every constant."""
    lines = [f"# {line}" for line in header] + ["efficiency:"]
    lines += [f"  {name}: {value:.6g}" for name, value in eff.to_dict().items()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class LinearLogModel:
    """Predictions whose logs are linear in the constants around an origin (one Gauss-Newton
    linearisation): ``log p_i = base_i + sum_k slopes_k[i] (t_k(value) - t_k(origin))``, with
    ``t_k = log`` for the constants in ``logs`` (fractions of a peak: a rate scales with them)
    and the identity otherwise (overheads, which may be 0). ``scripts/fit_published.py
    --served`` fits the GPU families on the served runs' rows through it: a simulation per row
    and constant once, then each trial point costs a matrix product."""

    base: np.ndarray  # log predicted at the origin, per row
    target: np.ndarray  # log measured, per row
    origin: dict[str, float]
    slopes: dict[str, np.ndarray]
    logs: frozenset[str] = frozenset()

    def transformed(self, name: str, value: float) -> float:
        return math.log(value) if name in self.logs else value

    def predict(self, values: dict[str, float]) -> np.ndarray:
        """Log predictions at ``values`` (a constant it does not name stays at the origin)."""
        out = self.base.copy()
        for name, slope in self.slopes.items():
            if name in values:
                shift = self.transformed(name, values[name])
                out += slope * (shift - self.transformed(name, self.origin[name]))
        return out

    def huber_terms(self, values: dict[str, float]) -> np.ndarray:
        """Each row's Huber loss of its log error at ``values``."""
        error = np.abs(self.predict(values) - self.target)
        knee = HUBER_KNEE
        return np.where(error <= knee, 0.5 * error**2, knee * (error - 0.5 * knee))

    def huber_sum(self, values: dict[str, float]) -> float:
        """Summed Huber loss of the log errors at ``values``."""
        return float(np.sum(self.huber_terms(values)))

    def subset(self, keep: np.ndarray) -> LinearLogModel:
        """The model of the rows where ``keep`` (a boolean mask) is true."""
        slopes = {k: v[keep] for k, v in self.slopes.items()}
        return replace(self, base=self.base[keep], target=self.target[keep], slopes=slopes)


def finite_slope(base: float, shifted: float | None, step: float) -> float:
    """d log p / d t from a prediction at the origin and one ``step`` away in ``t``; 0 where
    the shifted point has no prediction (its run failed there)."""
    if shifted is None or shifted <= 0 or base <= 0:
        return 0.0
    return (math.log(shifted) - math.log(base)) / step
