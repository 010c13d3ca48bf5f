"""The fit: loss, block coordinate descent, and where it starts.

Loss: mean Huber loss of log errors (``plan/calibration.py``) over the closed-form rows and,
with ``--served``, the served rows' linearisation. Method: block coordinate descent, each
release class's host costs on its rows, then each GPU family's fractions on its rows, each
constant by golden-section search inside its bounds; a move is kept only if it helps. Every
fit starts from the same priors (the default family file's values), never from constants
already fitted to the whole table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from inferplan.perf.efficiency import bundled_efficiency
from inferplan.plan.calibration import golden_section, huber
from inferplan.plan.fitting.config import (
    PYTORCH_1_1,
    Constants,
    FitConfig,
    family_of,
    predict,
    release_class,
    set_family,
    set_release,
    values_of,
)
from inferplan.plan.fitting.served_fit import Served, block_weights, engine_totals
from inferplan.plan.published import PublishedRow
from inferplan.plan.served import release_cpu_costs


def joint_loss(
    rows: list[PublishedRow],
    c: Constants,
    served: Served | None,
    config: FitConfig,
    weights: tuple[float, np.ndarray] | None = None,
) -> float:
    """Weighted mean Huber loss of log errors over ``rows`` (predicted in closed form) and
    ``served``'s rows (linearised), weighted as ``block_weights`` deals them (``weights``:
    computed once by the caller)."""
    closed_w, served_w = weights if weights is not None else block_weights(rows, served)
    results = predict(rows, c) if rows else []
    terms = sum(huber(math.log(r.predicted / r.row.value)) for r in results if r.predicted)
    terms += sum(r.predicted is None for r in results) * 1.0
    terms *= closed_w
    count = closed_w * len(results)
    if served is not None and served.rows:
        terms += float(served_w @ served.model.huber_terms(values_of(c, config)))
        count += float(served_w.sum())
    return terms / count if count > 0 else terms


def descend(
    rows: list[PublishedRow],
    constants: Constants,
    bounds: dict[str, tuple[float, float]],
    with_value: Callable[[Constants, str, float], Constants],
    steps: int,
    config: FitConfig,
    served: Served | None = None,
) -> Constants:
    """One coordinate sweep over ``bounds`` on ``rows`` (and ``served``'s linearised rows);
    a move is kept only if it helps."""

    weights = block_weights(rows, served)

    def total(c: Constants) -> float:
        return joint_loss(rows, c, served, config, weights)

    best = total(constants)
    for name, (low, high) in bounds.items():

        def objective(value: float, name: str = name, base: Constants = constants) -> float:
            return total(with_value(base, name, value))

        value = golden_section(objective, low, high, steps)
        trial = with_value(constants, name, value)
        trial_loss = total(trial)
        if trial_loss < best:
            constants, best = trial, trial_loss
    return constants


def fit(
    rows: list[PublishedRow],
    start: Constants,
    config: FitConfig,
    rounds: int,
    steps: int,
    only: set[str] | None = None,
    served: Served | None = None,
    owners: set[str] | None = None,
) -> Constants:
    """Block coordinate descent: each release class's host costs on its rows, then each
    family's fractions on its rows, ``rounds`` times. ``only``: just those families' fractions
    and releases' host costs, every other constant as ``start`` has it. ``served``: the served
    runs' rows join each block's loss (their release's or GPU family's), linearised.
    ``owners``: just these families' and releases' constants."""
    constants = start
    release_of = start.release_of  # the classes do not move with the constants
    if served is not None and served.balance == "overall":
        served = replace(served, totals=engine_totals(rows, served))
    for _ in range(rounds):
        releases = sorted(constants.costs)
        for release in releases if only is None else sorted(only & set(releases)):
            if owners is not None and release not in owners:
                continue
            classes = config.block_classes(release)
            mine = [r for r in rows if release_of(r) in classes]
            part = served.block(_in_class(release_of, classes)) if served else None
            if mine or part:
                bounds = config.release_bounds(release)
                constants = descend(
                    mine, constants, bounds, set_release(release), steps, config, part
                )
        for family in sorted(constants.family):
            if (only is not None and family not in only) or (owners and family not in owners):
                continue
            mine = [r for r in rows if family_of(r) == family]
            part = served.block(_of_family(family)) if served else None
            if mine or part:
                bounds = config.family_bounds
                constants = descend(
                    mine, constants, bounds, set_family(family), steps, config, part
                )
    return constants


def _in_class(
    release_of: Callable[[PublishedRow], str | None], classes: tuple[str, ...]
) -> Callable[[PublishedRow], bool]:
    return lambda row: release_of(row) in classes


def _of_family(family: str) -> Callable[[PublishedRow], bool]:
    return lambda row: family_of(row) == family


def start_constants(rows: list[PublishedRow], config: FitConfig) -> Constants:
    """The priors: every family's fitted fractions at the default file's values (a prior
    outside its bounds, --per-hop's per-step latency, at the nearest bound), every release
    class's host costs at the default per-step and per-sequence costs, the rest 0 (and each
    class's fixed costs; a ``release_only`` cost at 1)."""
    families = {family_of(r) for r in rows}
    releases = {release_class(r, config.release_split) for r in rows} - {None}
    prior = bundled_efficiency("default")
    fitted_keys = {
        k: min(max(getattr(prior, k), lo), hi) for k, (lo, hi) in config.family_bounds.items()
    }
    family = {f: replace(bundled_efficiency(f), **fitted_keys) for f in sorted(families)}
    base = {
        "step_overhead_s": prior.step_overhead_s,
        "per_seq_overhead_s": prior.per_seq_overhead_s,
        "layer_overhead_s": 0.0,
        "host_overlap": 0.0,
        "routing_skew": 0.0,
    }
    if config.rank_sync:
        base["rank_step_overhead_s"] = 0.0
    costs = {}
    for release in sorted(releases, key=str):
        own = config.split_keys if release == PYTORCH_1_1 and config.inherited() else base
        mine = {k: v for k, v in base.items() if k in own}
        mine.update(config.release_fixed.get(str(release), {}))
        mine.update({k: 1.0 for k, owners in config.release_only.items() if release in owners})
        costs[str(release)] = mine
    return Constants(family, costs, config.release_split, config.inherited())


def committed_constants(rows: list[PublishedRow], refit: set[str], config: FitConfig) -> Constants:
    """The committed family files and release costs, the ``refit`` families back at the priors
    (``--families``: refit some families without moving the others or the host costs), each
    release's fixed costs (``release_fixed``) as they are; a release class the committed file
    lacks (the split's second class) at the priors."""
    prior = start_constants(rows, config)
    family = {f: prior.family[f] if f in refit else bundled_efficiency(f) for f in prior.family}
    committed = release_cpu_costs()
    fixed = config.release_fixed
    costs = {r: {**v, **committed.get(r, {}), **fixed.get(r, {})} for r, v in prior.costs.items()}
    return Constants(family, costs, config.release_split, config.inherited())


def _sig4(value: float) -> float:
    return float(f"{value:.4g}")


def as_written(c: Constants) -> Constants:
    """The constants rounded as the files hold them, so the residuals written are reproduced."""
    family = {
        f: replace(e, **{k: _sig4(v) for k, v in e.to_dict().items()}) for f, e in c.family.items()
    }
    costs = {r: {k: _sig4(v) for k, v in v.items()} for r, v in c.costs.items()}
    return replace(c, family=family, costs=costs)
