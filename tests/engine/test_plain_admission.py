"""vLLM v1's waiting pass in block counts (``engine/plain_admission.py``, branch ``above4``).

Without a prefix cache, KV tiers or admission policies the admission test finds no prefix hit,
so the pass admits ``min(tokens, budget)`` tokens of the head iff their blocks are free. Both
forms must leave the same state: directly (chunks, rows, free blocks) and through whole
preempting simulations (every record, the ITL histogram, the KV trace bit for bit).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import plain_admission
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.schedulers import Scheduler
from inferplan.engine.simulator import Simulation, SimulationResult
from native_mode import pure_only

from .replica_helpers import replica_at_zero
from .test_chain import _assert_identical
from .test_fast_equals_exact import Case, _config, _plan_and_model, _workload
from .test_head_fit import _FlatModel
from .test_resumed_admission import RESUMING


def _queued(prompts: list[int], cfg: SchedulerConfig) -> Replica:
    replica = replica_at_zero(prompts, [4] * len(prompts), cfg, _FlatModel())
    for rid in range(len(prompts)):
        replica.add_request(rid)
    return replica


def _pass(replica: Replica, budget: int, *, plain: bool) -> tuple[list[int], list[list[int]], int]:
    chunks: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        if not plain:
            patch.setattr(Scheduler, "_admits_plainly", lambda self: False)
        replica.scheduler.admit_waiting(budget, chunks, 0.0)
    run = replica.running
    rows = [run.stored_row(row) for row in range(len(run))]
    return chunks, rows, replica.pool.free


@pure_only
@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 300), min_size=1, max_size=8),
    budget=st.integers(1, 600),
    block_size=st.sampled_from([1, 4, 16]),
    num_blocks=st.integers(1, 80),
    max_num_seqs=st.integers(1, 8),
)
def test_plain_pass_equals_the_general_one(
    prompts: list[int], budget: int, block_size: int, num_blocks: int, max_num_seqs: int
) -> None:
    cfg = SchedulerConfig(
        max_num_batched_tokens=600, max_num_seqs=max_num_seqs, block_size=block_size,
        num_blocks=num_blocks,
    )  # fmt: skip
    plain, general = _queued(prompts, cfg), _queued(prompts, cfg)
    assert plain.scheduler._admits_plainly()
    assert _pass(plain, budget, plain=True) == _pass(general, budget, plain=False)


@pure_only
def test_plain_pass_admits_a_head_whose_blocks_just_fit() -> None:
    cfg = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, block_size=16, num_blocks=5)
    chunks, rows, free = _pass(_queued([48, 33, 1], cfg), 512, plain=True)
    assert chunks == [48]  # 3 blocks fit in 5; the next head's 3 do not, and it blocks the last
    assert free == 2 and len(rows) == 1
    chunks, _, free = _pass(_queued([48, 32, 1], cfg), 70, plain=True)
    assert chunks == [48, 22] and free == 0  # the budget cuts the second chunk to 2 blocks


def _fast(case: Case, *, plain: bool) -> tuple[SimulationResult, int]:
    taken = [0]
    admit = plain_admission.admit_plainly

    def counting(*args):  # type: ignore[no-untyped-def]
        taken[0] += 1
        admit(*args)

    with pytest.MonkeyPatch.context() as patch:
        if plain:
            patch.setattr("inferplan.engine.schedulers.admit_plainly", counting)
        else:
            patch.setattr(Scheduler, "_admits_plainly", lambda self: False)
        plan, model = _plan_and_model()
        wl = _workload(case)
        res = Simulation(wl, _config(case, wl, plan, exact=False), model).run()
    return res, taken[0]


@pure_only
def test_preempting_runs_equal_with_the_plain_pass() -> None:
    plain, taken = _fast(RESUMING, plain=True)
    general, _ = _fast(RESUMING, plain=False)
    assert plain.records.num_preemptions.sum() > 100
    assert taken > 20
    _assert_identical(plain, general)


@pure_only
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_requests=st.integers(20, 40),
    max_output=st.integers(100, 600),
    block_size=st.sampled_from([1, 16, 32]),
    spare_blocks=st.integers(0, 60),
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["fcfs", "spf"]),
)
def test_preempting_cases_equal_with_the_plain_pass(
    num_requests: int, max_output: int, block_size: int, spare_blocks: int, seed: int, policy: str
) -> None:
    case = replace(
        RESUMING, num_requests=num_requests, max_output=max_output, block_size=block_size,
        spare_blocks=spare_blocks, seed=seed, scheduling_policy=policy,
    )  # fmt: skip
    _assert_identical(_fast(case, plain=True)[0], _fast(case, plain=False)[0])


def _joins(replica: Replica, *, plain: bool) -> tuple[bool, object]:
    with pytest.MonkeyPatch.context() as patch:
        if not plain:
            patch.setattr(Scheduler, "_admits_plainly", lambda self: False)
        joins = replica.scheduler.head_can_join()
    return joins, replica.scheduler.joins


@pure_only
@settings(max_examples=60, deadline=None)
@given(
    prompt=st.integers(1, 700),
    computed=st.integers(1, 200),
    block_size=st.sampled_from([1, 4, 16]),
    num_blocks=st.integers(16, 60),
)
def test_plain_head_test_equals_head_fit(
    prompt: int, computed: int, block_size: int, num_blocks: int
) -> None:
    cfg = SchedulerConfig(
        max_num_batched_tokens=512, max_num_seqs=8, block_size=block_size, num_blocks=num_blocks
    )
    answers = []
    for plain in (True, False):
        replica = _queued([prompt], cfg)
        held = -(-computed // block_size)
        replica.running.append(7, computed, computed + 1, 1, computed + 9, held, 0.0)
        replica.pool.free_blocks -= min(held, replica.pool.free_blocks)
        answers.append(_joins(replica, plain=plain))
    assert answers[0] == answers[1]


@pure_only
def test_plain_head_test_at_the_boundary() -> None:
    cfg = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, block_size=16, num_blocks=64)
    for free, joins in ((3, True), (2, False)):  # the head's 40 tokens take 3 blocks
        for plain in (True, False):
            replica = _queued([40], cfg)
            replica.running.append(7, 20, 21, 1, 29, 2, 0.0)  # no crossing at the next step
            replica.pool.free_blocks = free
            assert _joins(replica, plain=plain) == (
                joins,
                (0, 40, 511, free, 0, 40, 0) if joins else None,
            )
