"""A chain's links in one frame (``engine/chainlinks.py``) against the methods of ``_Chain``
they replace where the chain has no own blocks (``chain.LINKS_IN_ONE_FRAME`` False runs the
methods): the same state after every chain, and the same runs bit for bit.

``test_each_chain_leaves_the_reference_state`` copies the replica at every chain's start (the
random states a simulation reaches: rows, offsets, queue, clock, arrival bound), runs the
reference on the copy and the one-frame loop on the replica, and compares everything the
chain writes (the rows' columns and scalars, the pool, the clock, the queue, the records, the
ITL histogram and the KV trace). The whole-run tests cover the intake (arrivals taken in during
a chain), which needs the live event loop.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from inferplan.engine import chain as chain_module
from inferplan.engine import chainlinks
from inferplan.engine import simulator as simulator_module
from inferplan.engine.chain import preemption_chain
from inferplan.engine.replica import Replica
from native_mode import pure_only

from .test_chain import TAIL, _assert_identical, preemptions, tail_cases
from .test_chain_arrivals import SPREAD, intake_under_every_policy
from .test_fast_equals_exact import Case, _config, _plan_and_model, _workload


def _state(r: Replica) -> list[object]:
    """What a chain may write, as plain values (the ITL log flushed first)."""
    run, rows = r.running, r.running.rows
    rec = r.records
    scalars = {
        k: (v.tolist() if isinstance(v, np.ndarray) else v)
        for k, v in vars(rows).items()
        if isinstance(v, int | float | list | dict | np.ndarray) and k not in ("due", "gone")
    }
    # The heap of left counts as the keys it holds (its lazy deletions may run at other times:
    # the one-frame chain asks it for the fewest left at its start, the reference does not).
    live = Counter(rows.due)
    live.subtract(rows.gone)
    scalars["due"] = sorted(live.elements())
    return [
        r.now,
        r.num_steps,
        r.pool.free,
        run._size,
        run._ints[:, : run._size].tolist(),
        scalars,
        r.waiting.in_order() if r.waiting.policy == "fcfs" else sorted(r.waiting._heap),
        dict(r.waiting.tokens),
        [np.asarray(getattr(rec, name)).tolist() for name in sorted(vars(rec))],
        np.asarray(r.itl.counts).tolist(),
        [r.itl.sum_s, r.itl.total_weight, r.itl.min_s, r.itl.max_s],
        r.trace.summary(),
    ]


def _twin(r: Replica) -> Replica:
    """A deep copy of ``r`` (the model shared: read-only here). ``RunningSet``'s views of its
    buffers (``_flat``, a memoryview, cannot be copied) are made again for the copy's own
    buffers by its ``__setstate__``."""
    return copy.deepcopy(r, {id(r.model): r.model})


def _same(a: list[object], b: list[object]) -> bool:
    # nan-safe: compare the reprs (a nan record equals a nan record)
    return repr(a) == repr(b)


def _run_compared(case: Case, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """A fast run (with ``check``: no intake) where each chain is run both ways from the same
    state; returns (chains compared, chains with two or more preemption steps)."""
    compared, long_chains = 0, 0

    def both(replica, next_arrival_s, *, preempting, intake=None):  # type: ignore[no-untyped-def]
        nonlocal compared, long_chains
        if replica.pool.cache is not None:
            return preemption_chain(replica, next_arrival_s, preempting=preempting)
        before = preemptions(replica)  # the held-back victims applied: then the copy
        twin = _twin(replica)
        monkeypatch.setattr(chain_module, "LINKS_IN_ONE_FRAME", False)
        ran_ref = preemption_chain(twin, next_arrival_s, preempting=preempting)
        monkeypatch.setattr(chain_module, "LINKS_IN_ONE_FRAME", True)
        ran = preemption_chain(replica, next_arrival_s, preempting=preempting)
        assert ran == ran_ref
        if ran:
            compared += 1
            assert _same(_state(replica), _state(twin))  # the held-back victims too
            twin.running.rows.flush_victims()
            long_chains += preemptions(replica) - before >= 2
            assert _same(_state(replica), _state(twin))  # and once applied
        return ran

    monkeypatch.setattr(simulator_module, "preemption_chain", both)
    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = simulator_module.Simulation(wl, _config(case, wl, plan, exact=False), model)
    sim.run(check=lambda replica: None)
    monkeypatch.undo()
    return compared, long_chains


@pure_only
def test_each_chain_leaves_the_reference_state(monkeypatch: pytest.MonkeyPatch) -> None:
    compared, long_chains = _run_compared(TAIL, monkeypatch)
    assert compared > 20 and long_chains > 10


def _whole(case: Case, *, one_frame: bool, any_policy: bool = False) -> tuple[object, int]:
    """A fast run without ``check`` (the chains take arrivals in where they may) with the links
    in one frame or by ``_Chain``'s methods, and how many chains the one-frame loop ran.
    ``any_policy``: the intake under every queue policy (``test_chain_arrivals``' bypass)."""
    ran = 0
    links = chainlinks.run_links

    def counting(chain, next_arrival_s, preempting):  # type: ignore[no-untyped-def]
        nonlocal ran
        ran += 1
        links(chain, next_arrival_s, preempting)

    plan, model = _plan_and_model()
    wl = _workload(case)
    sim = simulator_module.Simulation(wl, _config(case, wl, plan, exact=False), model)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(chain_module, "LINKS_IN_ONE_FRAME", one_frame)
        monkeypatch.setattr(chain_module, "run_links", counting)
        if any_policy:
            intake_under_every_policy(monkeypatch, sim)
        res = sim.run()
    return res, ran


@pure_only
def test_one_frame_runs_equal_the_reference_with_arrivals_taken_in() -> None:
    """FCFS arrivals over an overloaded run (taken in by the chains), and SPF with the intake
    forced on (arrivals change the head: asked again after them): the same runs. The
    ``max_num_seqs`` cases reach a stretch's end with the batch full after an intake (the head
    cannot join: the chain goes on without asking its blocks)."""
    cases = (
        (SPREAD, False),
        (replace(SPREAD, scheduling_policy="spf"), True),
        (replace(SPREAD, max_num_seqs=4), False),
        (replace(SPREAD, max_num_seqs=8, spare_blocks=60), False),
    )
    for case, any_policy in cases:
        fast, ran = _whole(case, one_frame=True, any_policy=any_policy)
        reference, ran_reference = _whole(case, one_frame=False, any_policy=any_policy)
        assert ran > 5 and ran_reference == 0
        assert int(fast.records.num_preemptions.sum()) > 10  # type: ignore[attr-defined]
        _assert_identical(fast, reference)  # type: ignore[arg-type]


@pure_only
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tail_cases())
def test_one_frame_runs_equal_the_reference(case: Case) -> None:
    fast, _ = _whole(case, one_frame=True)
    reference, ran_reference = _whole(case, one_frame=False)
    assert ran_reference == 0
    _assert_identical(fast, reference)  # type: ignore[arg-type]


@pure_only
@pytest.mark.parametrize(
    "change",
    [{}, {"block_size": 1, "max_num_seqs": 8}, {"block_size": 32, "max_num_batched_tokens": 64}],
    ids=["tail", "block-1", "block-32"],
)
def test_chains_from_random_states_by_block_size(
    change: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``test_each_chain_leaves_the_reference_state`` at other block sizes and budgets (the
    offsets' scan and the budget's tests)."""
    case = replace(TAIL, num_requests=25, **change)  # type: ignore[arg-type]
    compared, long_chains = _run_compared(case, monkeypatch)
    assert compared > 5 and long_chains > 2


@pure_only
def test_chains_whose_steps_pop_several_victims(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-token prompts over two spare blocks: the decoders cross their blocks together, so a
    preemption step pops several victims at once (the one-frame loop's victim scan, which a
    one-victim run never tests past its first pop)."""
    popped: list[int] = []
    reference = chain_module._Chain._preempt_victims

    def counted(chain):  # type: ignore[no-untyped-def]
        before = len(chain.victim_ids)
        reference(chain)
        popped.append(len(chain.victim_ids) - before)

    monkeypatch.setattr(chain_module._Chain, "_preempt_victims", counted)
    compared, long_chains = _run_compared(replace(TAIL, max_input=1, spare_blocks=2), monkeypatch)
    assert compared > 5 and long_chains > 2
    assert max(popped) >= 2 and sum(n >= 2 for n in popped) > 5
