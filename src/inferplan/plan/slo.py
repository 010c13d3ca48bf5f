"""Service-level objectives per traffic class, and whether a simulated run meets them.

A target is ``<metric>_p<NN>_<unit>`` (``ttft_p99_ms: 3000``, ``e2el_p99_s: 900``) or a
``goodput`` block (at least ``min_fraction`` of the class's requests within every given limit,
vLLM ``--goodput``). Metrics follow vLLM's definitions (``metrics/latency.py``): TTFT, TPOT and
E2EL per completed request, percentiles by numpy's linear interpolation.

Per class, not per run: TTFT, TPOT and E2EL percentiles are taken over that class's requests.
ITL is the exception: the engine keeps one inter-token histogram per run (every token of every
class), so an ITL target is checked against the run's ITL percentile; classes sharing a replica
share its steps, so their gaps differ only in which steps each class's tokens fall in.

A request that did not complete (rejected for length) counts as an infinite latency, so a
class with any such request misses every latency target. Each check carries its ``ratio``
(predicted / target; for goodput, target / achieved), > 1 meaning missed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferplan.engine.simulator import SimulationResult
from inferplan.metrics.latency import good_mask, request_latencies
from inferplan.plan.request import SLO_KEY, Goodput, PlanRequest

MARGIN_STEP = 0.01  # ratios closer than 1 % of a target rank as equal (margin_key)


@dataclass(frozen=True)
class Target:
    metric: str  # ttft | tpot | itl | e2el | goodput
    percentile: float | None  # None for goodput
    limit_s: float | None  # None for goodput
    goodput: Goodput | None = None

    @property
    def key(self) -> str:
        if self.goodput is not None:
            return "goodput"
        assert self.percentile is not None
        pct = int(self.percentile) if self.percentile == int(self.percentile) else self.percentile
        return f"{self.metric}_p{pct}_ms"


@dataclass(frozen=True)
class Check:
    target: Target
    predicted: float  # seconds, or the fraction of good requests for goodput
    ratio: float

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0


def class_targets(slo: dict[str, Any]) -> list[Target]:
    """The request file's SLO mapping as targets (keys already validated)."""
    out = []
    for key, value in slo.items():
        if key == "goodput":
            out.append(Target("goodput", None, None, Goodput.model_validate(value)))
            continue
        match = SLO_KEY.match(key)
        assert match is not None
        metric, pct, unit = match.groups()
        limit_s = float(value) / 1000.0 if unit == "ms" else float(value)
        out.append(Target(metric, float(pct), limit_s))
    return out


def evaluate(result: SimulationResult, request: PlanRequest) -> list[list[Check]]:
    """Per class (request file order), one check per target."""
    records = result.records
    lat = request_latencies(records)
    out = []
    for k, cls in enumerate(request.traffic):
        mask = records.class_ids == k
        all_done = bool(np.all(lat.is_completed[mask]))
        checks = []
        for target in class_targets(cls.slo):
            if target.goodput is not None:
                checks.append(_goodput_check(target, target.goodput, lat, mask))
                continue
            assert target.percentile is not None and target.limit_s is not None
            if target.metric == "itl":
                value = float(result.itl.quantile(target.percentile / 100.0))
            else:
                column = getattr(lat, f"{target.metric}_s")[mask]
                column = column[~np.isnan(column)]
                value = float(np.percentile(column, target.percentile)) if len(column) else 0.0
            if not all_done:
                value = math.inf
            checks.append(Check(target, value, value / target.limit_s))
        out.append(checks)
    return out


def _goodput_check(target: Target, spec: Goodput, lat: Any, mask: np.ndarray) -> Check:
    limits = {m: getattr(spec, f"{m}_ms") for m in ("ttft", "tpot", "e2el")}
    slo_ms = {m: v for m, v in limits.items() if v is not None}
    good = good_mask(lat, slo_ms)[mask]
    fraction = float(good.mean()) if len(good) else 0.0
    ratio = spec.min_fraction / fraction if fraction > 0 else math.inf
    return Check(target, fraction, ratio)


def worst(checks: list[list[Check]]) -> float:
    """The largest ratio over every class and target (<= 1: all met)."""
    return max((c.ratio for cls in checks for c in cls), default=0.0)


def ratios_from_json(slo_json: dict[str, Any]) -> list[float]:
    """Every target's ratio read back from :func:`checks_json`'s mapping (inf where a latency
    is infinite or goodput is zero), so a stored evaluation can be ranked without re-running."""
    out = []
    for cls in slo_json.values():
        for item in cls["targets"].values():
            if "target_fraction" in item:
                achieved = item["predicted_fraction"]
                out.append(item["target_fraction"] / achieved if achieved > 0 else math.inf)
            else:
                predicted = item["predicted_ms"]
                out.append(math.inf if predicted is None else predicted / item["target_ms"])
    return out


def margin_key(ratios: list[float], step: float = MARGIN_STEP) -> tuple[float, float]:
    """How close a plan runs to its SLOs, smaller is better: the tightest ratio on a grid of
    ``step``, then the mean ratio. The tightest SLO is what breaks first as traffic grows; where
    two plans agree on it to within a step (plans that differ only in batching share a long
    request's E2EL to a few millionths), the one further from its limits on average is better
    (Qwen3-32B's example: 512 sequences keep the chat p99 TTFT at 528 ms where 128 give 1,718 ms,
    for 2 % more reasoning TPOT). A grid, not a tolerance, keeps the order transitive."""
    if not ratios:
        return (0.0, 0.0)
    tightest = max(ratios)
    on_grid = math.floor(tightest / step) * step if math.isfinite(tightest) else tightest
    return (on_grid, sum(ratios) / len(ratios))


def first_broken(checks: list[list[Check]], names: list[str]) -> str | None:
    """``class:target`` of the most exceeded target, or None when all are met."""
    ratio, name = max(
        ((c.ratio, f"{names[k]}:{c.target.key}") for k, cls in enumerate(checks) for c in cls),
        default=(0.0, ""),
    )
    return name if ratio > 1.0 else None


def checks_json(checks: list[list[Check]], names: list[str]) -> dict[str, Any]:
    """``{class: {"met": bool, "targets": {key: {"target", "predicted", "met"}}}}`` (ms)."""
    out: dict[str, Any] = {}
    for name, cls in zip(names, checks, strict=True):
        targets: dict[str, Any] = {}
        for c in cls:
            t = c.target
            item: dict[str, Any]
            if t.goodput is not None:
                item = {
                    "target_fraction": t.goodput.min_fraction,
                    "predicted_fraction": c.predicted,
                }
            else:
                assert t.limit_s is not None
                predicted = c.predicted * 1000.0 if math.isfinite(c.predicted) else None
                item = {"target_ms": t.limit_s * 1000.0, "predicted_ms": predicted}
            targets[t.key] = {**item, "met": c.ok}
        out[name] = {"met": all(c.ok for c in cls), "targets": targets}
    return out
