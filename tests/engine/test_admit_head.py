"""The lone queue head admitted in the step's own frame (``implicit_step._admit_head``, branch
``vid19``, issue 10) against the general form (``Scheduler.admit_waiting`` then ``_admit_one``):
whole runs on the plain path (no prefix cache) must leave every record, the ITL histogram, the
KV trace and the step count the same, bit for bit, and the fast form must be taken."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import implicit_step
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.workload import Workload
from native_mode import pure_only

from .replica_helpers import replica_at_zero
from .test_head_fit import _FlatModel
from .test_own_blocks_equal import _config, _fingerprint, _plan_and_model, _workload


def _plain(
    wl: Workload, block_size: int, spare: int, max_num_seqs: int, budget: int = 96
) -> SimulationConfig:
    """``test_own_blocks_equal``'s configuration without a prefix cache (the plain path)."""
    cfg: SimulationConfig = _config(wl, block_size, spare, 1, "fcfs", False)
    sched = replace(
        cfg.scheduler,
        enable_prefix_caching=False,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
    )
    return replace(cfg, scheduler=sched)


def _prompts(prompts: list[int], outputs: list[int], gap_s: float) -> Workload:
    """Requests ``gap_s`` apart with these prompt and output lengths."""
    n = len(prompts)
    return Workload(
        arrival_s=np.arange(n, dtype=np.float64) * gap_s,
        input_tokens=np.array(prompts, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
        priorities=np.zeros(n, dtype=np.int64),
    )


def _run(
    wl: Workload, cfg: SimulationConfig, *, fast: bool, checked: bool = False
) -> tuple[SimulationResult, int]:
    """The run with ``_admit_head`` (and how often it admitted), or with it declining always.
    ``checked``: the invariants after every advance (they read the columns, which writes the
    pending decode steps into them: the fast form then never sees a lag, so it is off by
    default)."""
    admit_head = implicit_step._admit_head
    taken = [0]

    def counting(r: Replica, n: int, new_blocks: int) -> bool:
        done = admit_head(r, n, new_blocks)
        taken[0] += done
        return done

    def check(r: Replica) -> None:
        r.check_invariants()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit_step, "_admit_head", counting if fast else lambda *args: False)
        res = Simulation(wl, cfg, _plan_and_model()[1]).run(check=check if checked else None)
    return res, taken[0]


def _assert_equal(
    wl: Workload, cfg: SimulationConfig, *, checked: bool = False
) -> tuple[SimulationResult, int]:
    fast, taken = _run(wl, cfg, fast=True, checked=checked)
    general, never = _run(wl, cfg, fast=False, checked=checked)
    assert never == 0
    assert _fingerprint(fast) == _fingerprint(general)
    return fast, taken


def run_cases(max_output: int) -> dict[str, st.SearchStrategy[Any]]:
    """The whole runs a fast admission path is compared on (here and in
    ``test_admit_own_head``): 10-40 requests, prompts of 8-200 tokens against a 96-token budget,
    bursts and arrivals apart, 1-16-token blocks, a pool 0-60 blocks over the largest request,
    ``max_num_seqs`` of 1, 2 (no room) and 24."""
    return {
        "n": st.integers(10, 40),
        "max_input": st.integers(8, 200),
        "max_output": st.integers(1, max_output),
        "rate": st.sampled_from([math.inf, 40.0, 8.0, 2.0]),
        "seed": st.integers(0, 10_000),
        "block_size": st.sampled_from([1, 4, 16]),
        "spare": st.integers(0, 60),
        "max_num_seqs": st.sampled_from([1, 2, 24]),
    }


@pure_only
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**run_cases(120))
def test_runs_equal_the_general_form(
    n: int,
    max_input: int,
    max_output: int,
    rate: float,
    seed: int,
    block_size: int,
    spare: int,
    max_num_seqs: int,
) -> None:
    """Prompts beyond the 96-token budget, a pool small enough to preempt (resumed heads),
    ``max_num_seqs`` of 1 and 2 (no room), bursts that queue several: each declines or admits
    as the general pass does."""
    wl = _workload(n, max_input, max_output, rate, seed)
    _assert_equal(wl, _plain(wl, block_size, spare, max_num_seqs))


@pure_only
@pytest.mark.parametrize("checked", [False, True])
def test_below_capacity_admits_in_the_step(checked: bool) -> None:
    """Arrivals apart on a roomy pool, prompts within the budget: most steps that admit take
    the fast form, and the run is the general one's (with the invariants after every advance
    too)."""
    wl = _workload(40, 90, 120, 4.0, 3)
    res, taken = _assert_equal(wl, _plain(wl, 16, 200, 24), checked=checked)
    assert taken > 25
    assert int(res.records.num_preemptions.sum()) == 0


@pure_only
def test_prompts_at_the_budget_edge() -> None:
    """Prompts of 90-97 tokens beside 0-3 decoding rows under a 96-token budget: the head whose
    prompt is ``budget - n + 1`` is cut into chunks (the general form), ``budget - n`` is one
    chunk (the fast form)."""
    rng = np.random.default_rng(5)
    wl = _prompts(rng.integers(90, 98, 60).tolist(), rng.integers(1, 30, 60).tolist(), 0.05)
    _, taken = _assert_equal(wl, _plain(wl, 16, 200, 24))
    assert taken > 10


@pure_only
@pytest.mark.parametrize("spare", [600, 1500])
def test_long_prompts_on_a_tight_pool(spare: int) -> None:
    """Prompts of 400-1,500 tokens under a 2,048-token budget (the prefill's attention pairs
    move the step time) on one-token blocks with little spare KV (600: preemptions): the
    decode's blocks leave the head too few, or not, as in the general pass."""
    rng = np.random.default_rng(11)
    prompts = rng.integers(400, 1500, 40).tolist()
    wl = _prompts(prompts, rng.integers(20, 200, 40).tolist(), 0.3)
    _, taken = _assert_equal(wl, _plain(wl, 1, spare, 24, budget=2048))
    assert taken > 5


@pure_only
def test_above_capacity_preempted_heads_equal() -> None:
    """A small pool under a burst: preempted requests come back (the general form's resumed
    rows) beside new heads admitted in the fast form."""
    wl = _workload(40, 90, 200, 4.0, 7)
    res, taken = _assert_equal(wl, _plain(wl, 4, 20, 24))
    assert int(res.records.num_preemptions.sum()) > 40 and taken > 15


@pytest.mark.parametrize(("spare", "admitted"), [(3, False), (4, True)])
def test_the_head_fits_after_the_decodes_blocks(spare: int, admitted: bool) -> None:
    """Two rows of 8 tokens in 4-token blocks decode into a new block each (2 blocks) beside a
    head of 8 tokens (2 blocks): with 3 free blocks the head waits, with 4 it joins."""
    cfg = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_blocks=9)
    r = replica_at_zero([8, 8, 8], [20, 20, 20], cfg, _FlatModel())
    r.scheduler.settle_admission_path()
    r.add_request(0)
    r.add_request(1)
    r.step()  # both prompts in one step: 8 tokens each computed, 4 blocks held
    assert r.running.num_computed.tolist() == [8, 8] and r.pool.free_blocks == 5
    r.pool.free_blocks = spare  # fewer free blocks, as if others held them
    r.add_request(2)
    taken = [0]
    admit_head = implicit_step._admit_head

    def counting(r: Replica, n: int, new_blocks: int) -> bool:
        done = admit_head(r, n, new_blocks)
        taken[0] += done
        return done

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(implicit_step, "_admit_head", counting)
        r.step()
    assert taken[0] == admitted
    assert len(r.waiting) == (0 if admitted else 1)
    assert r.running.ids.tolist() == ([0, 1, 2] if admitted else [0, 1])
    assert r.pool.free_blocks == spare - 2 - 2 * admitted
    assert r.running.num_computed.tolist() == ([9, 9, 8] if admitted else [9, 9])
    assert (
        (r.records.first_token_s[2] == r.now) if admitted else np.isnan(r.records.first_token_s[2])
    )
