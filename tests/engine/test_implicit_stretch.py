"""The implicit rows' stretch in one frame (``DecodeStretches._implicit_stretch``) against the
general one (``_plan`` then ``_run``, with the rows' own verbs), which stays the reference.

``_lean`` off makes ``stretch`` take the general form for every stretch; on, the usual stretch
below capacity takes the written-out form. Both must give every record, the ITL histogram and
the KV trace bit for bit, over random scenarios (hypothesis: rates, block sizes, pools that
bind, schedulers, policies, prefix caching) and near capacity, where the form is taken for
most stretches (counted).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings

from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.engine.stretch import DecodeStretches
from native_mode import pure_only

from .test_fast_equals_exact import BASE, Case, _config, _plan_and_model, _workload, cases
from .test_fused_advances import _assert_identical

NEAR = Case(**{**BASE.__dict__, "spare_blocks": None, "request_rate": 2.0, "num_requests": 80})
# A pool that binds: stretches end where a round of crossings runs out of blocks.
TIGHT = Case(**{**BASE.__dict__, "spare_blocks": 6, "request_rate": 20.0, "block_size": 1})
# Prefix caching with own blocks: the written-out free-pool setter evicts.
CACHED = Case(**{**NEAR.__dict__, "prefix_entry_blocks": 2, "spare_blocks": 30})


def _run(case: Case, *, lean: bool) -> SimulationResult:
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = Simulation(wl, _config(case, wl, plan, exact=False), model)
    if not lean:
        for replica in sim.replicas:
            replica.stretches._lean = False  # every stretch through ``_plan`` and ``_run``
    return sim.run()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_one_frame_stretch_gives_the_general_run_bit_for_bit(case: Case) -> None:
    _assert_identical(_run(case, lean=True), _run(case, lean=False))


def test_near_capacity_a_pool_that_binds_and_prefix_caching_bit_for_bit() -> None:
    for case in (NEAR, TIGHT, CACHED):
        _assert_identical(_run(case, lean=True), _run(case, lean=False))


@pure_only
def test_the_one_frame_stretch_is_the_usual_one_near_capacity(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Most stretches near capacity take the one-frame form, and some of them end at a
    finish, some at an arrival (the search) and, with a tight pool, at the pool's bound."""
    taken: list[tuple[int, bool]] = []
    lean, general = DecodeStretches._implicit_stretch, DecodeStretches._plan

    def counted(self: DecodeStretches, next_arrival_s: float) -> tuple[int, bool]:
        k, pool_bound = lean(self, next_arrival_s)
        taken.append((k, pool_bound))
        return k, pool_bound

    planned: list[int] = []

    def plan(self: DecodeStretches, next_arrival_s: float):  # type: ignore[no-untyped-def]
        planned.append(1)
        return general(self, next_arrival_s)

    monkeypatch.setattr(DecodeStretches, "_implicit_stretch", counted)
    monkeypatch.setattr(DecodeStretches, "_plan", plan)
    near = _run(NEAR, lean=True)
    assert len(taken) > 40 and len(taken) > 4 * len(planned)
    assert math.isfinite(near.duration_s)
    taken.clear()
    _run(TIGHT, lean=True)
    assert any(pool_bound for _, pool_bound in taken)
