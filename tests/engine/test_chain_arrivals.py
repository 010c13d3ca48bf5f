"""Chains that take arrivals in (``engine/chain.py``, ``Simulation._chain_arrivals``): where the
event loop collects and routes by itself (one replica, fast mode, no client limit, no
per-advance check), a chain that reaches the next arrival behind a non-empty FCFS queue routes it
to the queue's tail and goes on. The run must be the one where the chain stops at every arrival
and the loop takes it, bit for bit, and equal exact mode; under SPF an arrival may go ahead of
the queue head, so there the chain must stop (and the case is checked to be one where going on
would change the run).

The runs here pass no ``check`` to ``Simulation.run``: with one, the loop sees every advance
and the chains never take arrivals in.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import chain as chain_module
from inferplan.engine.simulator import Simulation, SimulationResult
from inferplan.workload.prefixes import with_own_blocks
from native_mode import pure_only

from .test_chain import TAIL, _assert_identical
from .test_fast_equals_exact import Case, _assert_same, _config, _plan_and_model, _workload
from .test_own_stretch import _own_config

# Arrivals spread over the overloaded run: the queue is rarely empty when one comes.
SPREAD = replace(TAIL, num_requests=40, max_output=300, request_rate=10.0)


def intake_under_every_policy(monkeypatch: pytest.MonkeyPatch, sim: Simulation) -> None:
    """Let every chain take arrivals in whatever the queue's policy (the FCFS check bypassed)."""
    run = chain_module._Chain.run

    def any_policy(self, next_arrival_s, preempting):  # type: ignore[no-untyped-def]
        self.intake = sim._intake
        run(self, next_arrival_s, preempting)

    monkeypatch.setattr(chain_module._Chain, "run", any_policy)


def _run(
    case: Case,
    monkeypatch: pytest.MonkeyPatch,
    *,
    exact: bool = False,
    intake: str = "on",
    own: bool = False,
) -> tuple[SimulationResult, int]:
    """A run without ``check``, and how many times a chain took arrivals in. ``intake``: "on",
    "off" (every chain stops at the arrival bound, as before) or "any-policy" (the FCFS test
    left out: chains take arrivals in under every queue policy); both run ``_Chain``'s own
    methods (``engine/chainlinks.py``'s one-frame loop runs "on" where there are no own
    blocks)."""
    wl = _workload(case)
    if own:
        wl = with_own_blocks(wl)
        cfg = _own_config(case, wl, exact=exact)
    else:
        cfg = _config(case, wl, _plan_and_model()[0], exact=exact)
    sim = Simulation(wl, cfg, _plan_and_model()[1])
    taken = 0
    chain_arrivals = sim._chain_arrivals

    def counting(now: float) -> float | None:
        nonlocal taken
        bound = chain_arrivals(now)
        taken += bound is not None
        return bound

    monkeypatch.setattr(sim, "_chain_arrivals", counting)
    if intake != "on":  # the patches below are of ``_Chain``'s methods: the reference path
        monkeypatch.setattr(chain_module, "LINKS_IN_ONE_FRAME", False)
    if intake == "off":
        monkeypatch.setattr(chain_module._Chain, "_arrivals_in", lambda self: None)
    elif intake == "any-policy":
        intake_under_every_policy(monkeypatch, sim)
    res = sim.run()
    monkeypatch.undo()
    return res, taken


@pure_only
def test_chains_take_arrivals_in_and_the_run_stays_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast, taken = _run(SPREAD, monkeypatch)
    assert taken > 20 and int(fast.records.num_preemptions.sum()) > 40
    off, taken_off = _run(SPREAD, monkeypatch, intake="off")
    assert taken_off == 0
    _assert_identical(fast, off)
    _assert_same(fast, _run(SPREAD, monkeypatch, exact=True)[0])


@pure_only
def test_chains_take_arrivals_in_with_own_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM v1's own blocks: the chain's LRU list (``engine/ownchain.py``) goes on across
    the arrivals, and the head's hit is asked again after them."""
    case = replace(SPREAD, max_num_batched_tokens=96)
    fast, taken = _run(case, monkeypatch, own=True)
    assert taken > 20 and fast.records.cached_tokens is not None
    assert int(fast.records.cached_tokens.sum()) > 0
    _assert_identical(fast, _run(case, monkeypatch, own=True, intake="off")[0])
    _assert_same(fast, _run(case, monkeypatch, own=True, exact=True)[0])


@pure_only
def test_spf_arrivals_stop_the_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under SPF an arrival with fewer output tokens than the head goes ahead of it: the
    chain stops at every arrival, and the run is the stepwise one and exact mode's. Taken
    in regardless of the policy (``intake="any-policy"``), arrivals do change the head here,
    and the chain still equals the stepwise loop: after taking arrivals in it asks the
    (new) head's admission again, as the loop's ``can_stretch`` would."""
    case = replace(SPREAD, scheduling_policy="spf")
    fast, taken = _run(case, monkeypatch)
    assert taken == 0 and int(fast.records.num_preemptions.sum()) > 40
    _assert_identical(fast, _run(case, monkeypatch, intake="off")[0])
    _assert_same(fast, _run(case, monkeypatch, exact=True)[0])
    heads: list[bool] = []
    take = chain_module._Chain._arrivals_in

    def noting(self):  # type: ignore[no-untyped-def]
        head = self.r.waiting.peek()[0] if self.r.waiting.tokens else None
        bound = take(self)
        if bound is not None:
            heads.append(self.r.waiting.peek()[0] != head)
        return bound

    monkeypatch.setattr(chain_module._Chain, "_arrivals_in", noting)
    anyway, taken_anyway = _run(case, monkeypatch, intake="any-policy")
    assert taken_anyway > 20 and sum(heads) > 3
    _assert_identical(fast, anyway)


@pure_only
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.builds(
        lambda base, rate, policy, seed, block, spare, seqs, tokens, reject: replace(
            base,
            request_rate=rate,
            scheduling_policy=policy,
            seed=seed,
            block_size=block,
            spare_blocks=spare,
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
            reject_some=reject,
        ),
        st.just(replace(SPREAD, num_requests=20)),
        st.sampled_from([1.0, 5.0, 50.0, math.inf]),
        st.sampled_from(["fcfs", "fcfs", "spf", "priority"]),
        st.integers(0, 2**16),
        st.sampled_from([1, 4, 16]),
        st.integers(0, 40),
        st.sampled_from([3, 8, 1024]),
        st.sampled_from([16, 64, 512]),
        st.booleans(),
    )
)
def test_arrivals_in_chains_equal_the_stepwise_loop_and_exact_mode(case: Case) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, _ = _run(case, monkeypatch)
        _assert_identical(fast, _run(case, monkeypatch, intake="off")[0])
        _assert_same(fast, _run(case, monkeypatch, exact=True)[0])
