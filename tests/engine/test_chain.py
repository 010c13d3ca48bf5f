"""Chains of stretches and tail preemptions in one pass (``engine/chain.py``): fast mode == exact
mode, and the chain == the stepwise fast path it replaces, bit for bit.

The cases are built to preempt from the tail again and again (a pool a few blocks above one
longest request, outputs long beside the prompts); each test also checks that chains ran, so a
condition that stops matching cannot pass silently. Where the chain must not run (vLLM's
priority victims, prefix caching, windowed pools, swap, other schedulers, admission policies)
the tests check that it did not, and fast == exact still holds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import chain as chain_module
from inferplan.engine import simulator as simulator_module
from inferplan.engine.admission import AdmissionConfig
from inferplan.engine.chain import preemption_chain
from inferplan.engine.chainblocks import TailBlocks
from inferplan.engine.replica import Replica
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .test_fast_equals_exact import (
    BASE,
    WINDOWED,
    Case,
    _check_case,
    _config,
    _plan_and_model,
    _workload,
)


def preemptions(replica: Replica) -> int:
    """The replica's records' preemptions so far, the chains' held-back victims applied
    (``ImplicitRows.flush_victims``: exact at any moment)."""
    replica.running.rows.flush_victims()
    return int(replica.records.num_preemptions.sum())


def count_chains(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch ``preemption_chain`` to count its calls: 1 where it ran a chain with a preemption,
    else 0 (one entry a call)."""
    taken: list[int] = []

    def counting(replica, next_arrival_s, *, preempting, intake=None):  # type: ignore[no-untyped-def]
        before = preemptions(replica)
        ran = preemption_chain(replica, next_arrival_s, preempting=preempting, intake=intake)
        taken.append(int(ran and preemptions(replica) > before))
        return ran

    monkeypatch.setattr(simulator_module, "preemption_chain", counting)
    return taken


@pytest.fixture
def chains_taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of ``preemption_chain`` that ran a chain with a preemption."""
    return count_chains(monkeypatch)


TAIL = replace(
    BASE,
    num_requests=40,
    max_input=120,
    max_output=900,
    request_rate=50.0,
    block_size=16,
    spare_blocks=20,
    max_num_batched_tokens=512,
)


def _fast(case: Case, *, chain: bool, monkeypatch: pytest.MonkeyPatch) -> SimulationResult:
    """A fast run with the chain on, or off (the stepwise fast path)."""
    if not chain:
        monkeypatch.setattr(simulator_module, "preemption_chain", lambda r, t, **_: False)
    plan, model = _plan_and_model()
    wl = _workload(case)
    res = Simulation(wl, _config(case, wl, plan, exact=False), model).run(
        check=lambda replica: replica.check_invariants()
    )
    monkeypatch.undo()
    return res


def _assert_identical(a: SimulationResult, b: SimulationResult) -> None:
    """Every record, the ITL histogram's state and the KV trace, bit for bit."""
    assert a.num_steps == b.num_steps
    assert a.duration_s == b.duration_s
    for name in (
        "status",
        "num_preemptions",
        "recomputed_tokens",
        "output_tokens",
        "arrival_s",
        "first_scheduled_s",
        "first_token_s",
        "finish_s",
        "max_itl_s",
    ):
        assert np.array_equal(getattr(a.records, name), getattr(b.records, name), equal_nan=True)
    assert np.array_equal(a.itl.counts, b.itl.counts)
    first, second = ([h.sum_s, h.total_weight, h.min_s, h.max_s, h.std()] for h in (a.itl, b.itl))
    assert np.array_equal(first, second, equal_nan=True)
    assert [t.summary() for t in a.traces] == [t.summary() for t in b.traces]


@pure_only
def test_tail_preemptions_chain_and_fast_equals_exact(chains_taken: list[int]) -> None:
    fast = _check_case(TAIL)
    assert fast.records.num_preemptions.sum() > 50
    assert sum(chains_taken) > 10


@pure_only
def test_chain_is_the_stepwise_path_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    chained = _fast(TAIL, chain=True, monkeypatch=monkeypatch)
    stepwise = _fast(TAIL, chain=False, monkeypatch=monkeypatch)
    assert chained.records.num_preemptions.sum() > 50
    _assert_identical(chained, stepwise)


@pure_only
def test_implicit_chains_read_the_blocks_the_columns_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain over implicit rows builds its block arithmetic from the rows' offset histogram
    and sums (``TailBlocks.from_offsets``): the same state as from the columns, with decode
    steps pending (the lag) at many chains' starts."""
    init, seen = chain_module._Chain.__init__, {"implicit": 0, "lag": 0}

    def checking(self, r):  # type: ignore[no-untyped-def]
        lag = r.running.rows.lag
        init(self, r)
        if not self.implicit:
            return
        seen["implicit"] += 1
        seen["lag"] += lag % self.block != 0
        computed = self._computed()  # built on first use from the stored columns and the lag
        columns = TailBlocks(computed, self.block, self.usable)
        assert self.computed_sum == int(computed.sum())
        assert (self.blocks.at_least, self.blocks.k, self.blocks.p) == (
            columns.at_least,
            columns.k,
            columns.p,
        )

    monkeypatch.setattr(chain_module._Chain, "__init__", checking)
    _fast(TAIL, chain=True, monkeypatch=monkeypatch)
    assert seen["implicit"] > 10 and seen["lag"] > 5


@st.composite
def tail_cases(draw: st.DrawFn, batched_tokens: tuple[int, ...] = (16, 64, 256, 2048)) -> Case:
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
        max_num_batched_tokens=draw(st.sampled_from(batched_tokens)),
        scheduling_policy=draw(st.sampled_from(["fcfs", "fcfs", "spf", "priority"])),
        data_parallel_size=draw(st.sampled_from([1, 1, 2])),
        router=draw(st.sampled_from(["round_robin", "least_outstanding"])),
        max_concurrency=draw(st.sampled_from([None, None, 4])),
        reject_some=draw(st.booleans()),
    )


@pure_only
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tail_cases())
def test_fast_equals_exact_and_stepwise_when_tails_are_preempted(case: Case) -> None:
    fast = _check_case(case)
    with pytest.MonkeyPatch.context() as monkeypatch:
        stepwise = _fast(case, chain=False, monkeypatch=monkeypatch)
    _assert_identical(fast, stepwise)


@pytest.mark.parametrize(
    "change",
    [
        {"scheduling_policy": "priority"},  # vLLM's victim: the largest (priority, arrival)
        {"preemption_mode": "swap"},
        {"scheduler": "prefill_first"},
        {"kv_groups": WINDOWED},
        {"prefix_entry_blocks": 2},
        {"admission": AdmissionConfig(policy="reserve-none")},
    ],
    ids=["priority", "swap", "prefill-first", "windowed", "prefix-caching", "admission"],
)
def test_chain_stays_off_where_its_victims_or_blocks_differ(
    change: dict[str, object], chains_taken: list[int]
) -> None:
    """Victims other than the last admitted, blocks that are not one per crossing, or a pass
    with hooks of its own: the stepwise path runs, and still equals exact mode."""
    case = replace(TAIL, **change)  # type: ignore[arg-type]
    fast = _check_case(case)
    assert fast.records.num_preemptions.sum() > 0
    assert sum(chains_taken) == 0


def _check_tail_blocks(computed: np.ndarray, block: int, usable: int, steps: int) -> None:
    """``TailBlocks``' ``G(p, j)`` and first failing step, the rows popped from the tail one by
    one, against counting every row's blocks step by step."""
    blocks = TailBlocks(computed, block, usable)
    # The same state from the offset histogram and the sum (the chain's implicit rows' form).
    counts = np.bincount(computed % block, minlength=block).tolist()
    alt = TailBlocks.from_offsets(counts, int(computed.sum()), block, usable)
    assert (alt.at_least, alt.k, alt.p) == (blocks.at_least, blocks.k, blocks.p)
    for p in range(len(computed), -1, -1):
        assert blocks.p == p
        held = [int(-(-(computed[:p] + j + 1) // block).sum()) for j in range(-1, steps)]
        assert [blocks.held(j) for j in range(-1, steps)] == held
        failing = [j for j in range(steps) if held[j + 1] > usable]
        if p == 0:
            assert blocks.first_failure() == math.inf
        elif failing:
            assert blocks.first_failure() == failing[0]
        else:
            assert steps <= blocks.first_failure() < math.inf
        if p:
            blocks.pop(int(computed[p - 1]))


def test_first_failing_steps_match_a_step_by_step_count() -> None:
    """``G(p, j)`` and each ``p``'s first failing step against counting blocks step by step,
    on rows whose offsets in their last block differ (block size 4)."""
    rng = np.random.default_rng(0)
    computed = rng.integers(1, 40, size=40)
    _check_tail_blocks(computed, 4, 200, 60)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 32),
    st.lists(st.integers(0, 300), min_size=1, max_size=24),
    st.integers(-20, 120),
)
def test_tail_blocks_match_a_step_by_step_count(block: int, computed: list[int], room: int) -> None:
    """The same from random rows, block sizes 1-32 and pools from below what the rows hold
    (every step fails) to well above it (the first failure beyond the steps counted)."""
    rows = np.array(computed, dtype=np.int64)
    usable = int(-(-rows // block).sum()) + room
    _check_tail_blocks(rows, block, usable, 3 * block + 40)
