"""Chains (``engine/chain.py``) with own blocks (``engine/ownchain.py``): fast mode == exact mode,
and the chain == the stepwise fast path it replaces (``engine/ownstretch.py``,
``engine/ownsteps.py``) bit for bit, on cases built to preempt from the tail again and again
while preempted requests re-hit their own blocks; chains must have run."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import simulator as simulator_module
from inferplan.engine.chain import preemption_chain
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.workload.prefixes import with_own_blocks

from .test_chain import TAIL, _assert_identical
from .test_fast_equals_exact import Case, _assert_same, _plan_and_model, _workload
from .test_own_stretch import _own_config


def _own_run(case: Case, *, exact: bool = False, chain: bool = True) -> SimulationResult:
    wl = with_own_blocks(_workload(case))
    with pytest.MonkeyPatch.context() as monkeypatch:
        if not chain:
            monkeypatch.setattr(
                simulator_module, "preemption_chain", lambda r, t, *, preempting: False
            )
        res = Simulation(wl, _own_config(case, wl, exact=exact), _plan_and_model()[1]).run(
            check=lambda replica: replica.check_invariants()
        )
    assert type(res.prefix_caches[0]).__name__ == "OwnBlocks"
    return res


def _chains_with_preemptions(case: Case, monkeypatch: pytest.MonkeyPatch) -> int:
    taken: list[int] = []

    def counting(replica, next_arrival_s, *, preempting):  # type: ignore[no-untyped-def]
        before = int(replica.records.num_preemptions.sum())
        ran = preemption_chain(replica, next_arrival_s, preempting=preempting)
        taken.append(int(ran and replica.records.num_preemptions.sum() > before))
        return ran

    monkeypatch.setattr(simulator_module, "preemption_chain", counting)
    _own_run(case)
    monkeypatch.undo()
    return sum(taken)


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


@st.composite
def own_tail_cases(draw: st.DrawFn) -> Case:
    return replace(
        TAIL,
        num_requests=draw(st.integers(15, 50)),
        max_input=draw(st.integers(1, 300)),
        max_output=draw(st.integers(200, 1500)),
        request_rate=draw(st.sampled_from([5.0, 50.0, 500.0, math.inf])),
        burstiness=draw(st.sampled_from([0.3, 1.0, 4.0])),
        seed=draw(st.integers(0, 2**16)),
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        spare_blocks=draw(st.integers(0, 40)),
        max_num_seqs=draw(st.sampled_from([3, 8, 1024])),
        max_num_batched_tokens=draw(st.sampled_from([16, 64, 96, 256, 2048])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "fcfs", "spf", "priority"])),
        data_parallel_size=draw(st.sampled_from([1, 1, 2])),
        router=draw(st.sampled_from(["round_robin", "least_outstanding"])),
        max_concurrency=draw(st.sampled_from([None, None, 4])),
        reject_some=draw(st.booleans()),
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=own_tail_cases())
def test_fast_equals_exact_and_stepwise_with_own_blocks(case: Case) -> None:
    fast = _own_run(case)
    _assert_same(fast, _own_run(case, exact=True))
    _assert_identical(fast, _own_run(case, chain=False))
