"""The served runs' rows in the fit (``--served``): simulated at a point, linearised around it.

The served rows (vLLM, SGLang, ``trtllm-serve``, TensorRT-LLM 0.14 on Triton) are simulated once
at the committed constants and once a step off in each constant that reaches them, and are
linear in the constants' logs (fractions) or values (overheads) in between (one Gauss-Newton
linearisation, ``plan/calibration.py`` ``LinearLogModel``). The engines' own constants (front
ends, host costs, kernel factors: ``scripts/fit_frontend.py``) stay as committed.

``--balance``: how the engines' rows weigh in a block's loss (a family's fractions, a release's
host costs). "row": every row alike (the engine with the most rows leads the fit); "family":
each engine's rows in the block share the same total weight (trtllm-bench's closed form, vLLM,
SGLang, trtllm-serve and Triton count alike on a family whatever their row counts); "overall":
each engine's rows in the whole fit share the same total weight; "sqrt": each engine's rows in
the block weigh the square root of their count in all (between "row" and "family").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from unittest.mock import patch

import numpy as np

import inferplan.plan.published_runs as published_runs
import inferplan.plan.served as served_module
from inferplan.perf.efficiency import FAMILY_OF_ARCHITECTURE, Efficiency, bundled_efficiency
from inferplan.plan.calibration import LinearLogModel, finite_slope
from inferplan.plan.fitting.config import (
    PYTORCH,
    Constants,
    FitConfig,
    reaches,
    split_class,
    values_of,
    with_variable,
    worker_pool,
)
from inferplan.plan.folds import metric_key
from inferplan.plan.published import PublishedRow
from inferplan.plan.published_runs import RowResult, engine_release, validate_rows
from inferplan.plan.served import release_cpu_costs, trtllm_release
from inferplan.specs.hardware import GpuSpec

BALANCES = ("row", "family", "overall", "sqrt")
CLOSED_FORM = "trtllm-bench"


@dataclass
class Served:
    """The served rows of one fit, linearised (``model``, row ``i`` is ``rows[i]``), counted
    ``weight`` each against a closed-form row, the engines balanced as ``balance`` says
    (``totals``: each engine's rows in the whole fit, for ``overall``). ``flags``: the fit's
    flags it was linearised under (``fitting/flags.py``), so that a saved one is read back only
    by a fit with the same (None: not recorded, a file saved before they were)."""

    rows: list[PublishedRow]
    model: LinearLogModel
    weight: float = 1.0
    balance: str = "row"
    totals: dict[str, int] | None = None
    flags: tuple[str, ...] | None = None

    def block(self, keep: Callable[[PublishedRow], bool]) -> Served | None:
        mask = np.array([keep(r) for r in self.rows], dtype=bool)
        if not mask.any() or self.weight <= 0:
            return None
        return self._masked(mask)

    def subset(self, keep: Callable[[PublishedRow], bool]) -> Served:
        return self._masked(np.array([keep(r) for r in self.rows], dtype=bool))

    def _masked(self, mask: np.ndarray) -> Served:
        rows = [r for r, m in zip(self.rows, mask, strict=True) if m]
        return replace(self, rows=rows, model=self.model.subset(mask))


def served_engine(row: PublishedRow) -> str:
    """A served row's engine as the report names it (TensorRT-LLM by its front end)."""
    if row.engine == "tensorrt-llm":
        return "triton (trtllm 0.14)" if engine_release(row) == "trtllm-cpp" else "trtllm-serve"
    return row.engine


def engine_totals(rows: list[PublishedRow], served: Served | None) -> dict[str, int]:
    """Each engine's row count: ``rows`` (closed form) and ``served``'s."""
    totals = Counter(served_engine(r) for r in served.rows) if served else Counter()
    if rows:
        totals[CLOSED_FORM] = len(rows)
    return dict(totals)


def block_weights(rows: list[PublishedRow], served: Served | None) -> tuple[float, np.ndarray]:
    """One block's weights: a closed-form row's (``rows`` are all ``trtllm-bench``'s) and each
    of ``served``'s rows' (times ``served.weight``), as ``served.balance`` deals them."""
    if served is None or not served.rows:
        return 1.0, np.zeros(0)
    engines = [served_engine(r) for r in served.rows]
    if served.balance == "row":
        counts: dict[str, int] = {}
    elif served.balance in ("family", "sqrt"):
        counts = engine_totals(rows, served)
    else:
        counts = served.totals or engine_totals(rows, served)
    power = 0.5 if served.balance == "sqrt" else 1.0

    def weight(engine: str) -> float:
        return counts[engine] ** -power if counts else 1.0

    each = np.array([weight(e) for e in engines]) * served.weight
    return (weight(CLOSED_FORM) if rows else 1.0), each


@contextmanager
def bundled_as(c: Constants) -> Iterator[None]:
    """``validate``'s served path with ``c`` as the bundled family files and release costs (and
    ``c``'s release classes as the served rows' TensorRT-LLM classes)."""

    def family_efficiency(gpu: GpuSpec) -> Efficiency:
        name = FAMILY_OF_ARCHITECTURE.get(gpu.architecture, "default")
        return c.family[name] if name in c.family else bundled_efficiency(name)

    costs = {**release_cpu_costs(), **{r: c.class_costs(r) for r in c.costs}}
    with (
        patch.object(published_runs, "efficiency_for", family_efficiency),
        patch.object(served_module, "release_cpu_costs", lambda: costs),
    ):
        if not c.release_split:
            yield
            return
        with patch.object(served_module, "trtllm_release", _split_release):
            yield


def _split_release(version: str) -> str:
    """``served.trtllm_release`` with the PyTorch backend split as ``release_class`` does."""
    release = trtllm_release(version)
    return split_class(version) if release == PYTORCH else release


def predict_served(rows: list[PublishedRow], c: Constants) -> list[RowResult]:
    with bundled_as(c):
        return validate_rows(rows)


def _column(
    rows: list[PublishedRow], c: Constants, config: FitConfig, name: str, step: float
) -> list[float | None]:
    value = values_of(c, config)[name]
    key = name.split(":")[1]
    shifted = value * math.exp(step) if key in config.log_keys() else value + step
    return [r.predicted for r in predict_served(rows, with_variable(c, name, shifted))]


def linearize(
    rows: list[PublishedRow], origin: Constants, config: FitConfig, jobs: int = 1
) -> Served:
    """``rows`` simulated at ``origin`` and one step off it in each constant that reaches
    them (``reaches``: the runs of its GPU family or engine release, and of a class that
    inherits the cost): the rows predicted at ``origin``, with their slopes."""
    base = [r for r in predict_served(rows, origin) if r.predicted]
    kept = [r.row for r in base]
    values = values_of(origin, config)
    steps = config.slope_steps()
    names = [n for n in values if n.split(":")[1] in steps]
    names = [n for n in names if any(reaches(origin, r, n) for r in kept)]
    tasks = []
    for name in names:
        mine = [r for r in kept if reaches(origin, r, name)]
        tasks.append((mine, origin, config, name, config.step(name, values[name])))
    if jobs <= 1:
        columns = [_column(*t) for t in tasks]
    else:
        with worker_pool(jobs) as pool:
            columns = list(pool.map(_column, *zip(*tasks, strict=True)))
    index = {metric_key(r): i for i, r in enumerate(kept)}
    slopes = {}
    for (mine, _, _, name, step), column in zip(tasks, columns, strict=True):
        slope = np.zeros(len(kept))
        for row, shifted in zip(mine, column, strict=True):
            i = index[metric_key(row)]
            slope[i] = finite_slope(float(base[i].predicted or 0.0), shifted, step)
        slopes[name] = slope
    logs = frozenset(n for n in names if n.split(":")[1] in config.log_keys())
    model = LinearLogModel(
        base=np.log([float(r.predicted or 0.0) for r in base]),
        target=np.log([r.row.value for r in base]),
        origin={n: values[n] for n in names},
        slopes=slopes,
        logs=logs,
    )
    return Served(kept, model)
