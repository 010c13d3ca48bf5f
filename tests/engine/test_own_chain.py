"""Chains (``engine/chain.py``) with own blocks (``engine/ownchain.py``): fast mode == exact mode,
and the chain == the stepwise fast path it replaces (``engine/ownstretch.py``,
``engine/ownsteps.py``) bit for bit, on cases built to preempt from the tail again and again
while preempted requests re-hit their own blocks; chains must have run."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from inferplan.engine import simulator as simulator_module
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.workload.prefixes import with_own_blocks
from native_mode import pure_only

from .test_chain import TAIL, _assert_identical, count_chains, tail_cases
from .test_fast_equals_exact import Case, _assert_same, _plan_and_model, _workload
from .test_own_stretch import _own_config


def _own_run(case: Case, *, exact: bool = False, chain: bool = True) -> SimulationResult:
    wl = with_own_blocks(_workload(case))
    with pytest.MonkeyPatch.context() as monkeypatch:
        if not chain:
            monkeypatch.setattr(simulator_module, "preemption_chain", lambda r, t, **_: False)
        res = Simulation(wl, _own_config(case, wl, exact=exact), _plan_and_model()[1]).run(
            check=lambda replica: replica.check_invariants()
        )
    assert type(res.prefix_caches[0]).__name__ == "OwnBlocks"
    return res


def _chains_with_preemptions(case: Case, monkeypatch: pytest.MonkeyPatch) -> int:
    taken = count_chains(monkeypatch)
    _own_run(case)
    monkeypatch.undo()
    return sum(taken)


@pure_only
@pytest.mark.parametrize("block_size", [16, 4, 1])
def test_own_block_chains_run_and_equal_exact_and_stepwise(
    block_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = replace(TAIL, block_size=block_size, max_num_batched_tokens=96)
    fast = _own_run(case)
    assert int(fast.records.num_preemptions.sum()) > 50
    assert fast.records.cached_tokens is not None and int(fast.records.cached_tokens.sum()) > 0
    _assert_same(fast, _own_run(case, exact=True))
    _assert_identical(fast, _own_run(case, chain=False))
    assert _chains_with_preemptions(case, monkeypatch) > 10


@pure_only
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tail_cases(batched_tokens=(16, 64, 96, 256, 2048)))
def test_fast_equals_exact_and_stepwise_with_own_blocks(case: Case) -> None:
    fast = _own_run(case)
    _assert_same(fast, _own_run(case, exact=True))
    _assert_identical(fast, _own_run(case, chain=False))
