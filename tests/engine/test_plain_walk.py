"""The FIFO waiting pass in one frame (``plain_admission.admit_plainly``, branch ``admit17``).

The pass tests each head inline (``plain_head_chunk``, the queue's ``peek`` and ``pop``); the
request-at-a-time pass (``admit_stepwise``: through those calls) is the reference. Both must
leave the same state: chunks, stored rows and token times, buffer growth, free blocks, the
queue, first-scheduled times and the rows reported to ``RunningSet.appended``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.engine import plain_admission
from inferplan.engine.replica import Replica, SchedulerConfig

from .replica_helpers import replica_at_zero
from .test_head_fit import _FlatModel

State = tuple[list[list[int]], list[int], list[float], int, int, list[int], dict[int, int]]


def _replica(
    prompts: list[int], resumed: list[int], num_running: int, lag: int, cfg: SchedulerConfig
) -> Replica:
    """Requests ``0..num_running-1`` running (fake rows), the rest queued in order; ``resumed``
    (per queued request, 0: new) generated tokens of a preempted request back in the queue,
    scheduled before at 1.5 s; the running rows ``lag`` decode steps behind their columns."""
    replica = replica_at_zero(prompts, [4] * len(prompts), cfg, _FlatModel())
    run = replica.running
    run.rows.lag, run.rows.itl_length = lag, 3
    for rid in range(num_running):
        run.append(rid, prompts[rid], prompts[rid] + 1, 1, 4, 1, 0.25)
    for i, rid in enumerate(range(num_running, len(prompts))):
        replica.add_request(rid)
        if i < len(resumed) and (generated := resumed[i]):
            replica.waiting.tokens[rid] += generated
            replica.records.first_scheduled_s[rid] = 1.5
    return replica


def _pass(replica: Replica, budget: int, *, walk: bool) -> tuple[list[int], State, list]:
    chunks: list[int] = []
    run, scheduler = replica.running, replica.scheduler
    appended: list[tuple[int, ...]] = []
    run.appended = appended
    admit = plain_admission.admit_plainly if walk else plain_admission.admit_stepwise
    admit(scheduler, budget, chunks, 7.0, None)
    run.appended = None
    size = len(run)
    state = (
        run._ints[:, :size].tolist(),
        [run._ints.shape[1]],
        run._times[:size].tolist(),
        replica.pool.free_blocks,
        size,
        list(replica.waiting._fifo),
        dict(replica.waiting.tokens),
    )
    first = [x if not math.isnan(x) else -1.0 for x in replica.records.first_scheduled_s]
    return chunks, state, [appended, first]


@settings(max_examples=150, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 300), min_size=1, max_size=120),
    resumed=st.lists(st.integers(0, 500), max_size=120),
    running=st.integers(0, 70),
    lag=st.integers(0, 9),
    budget=st.integers(-2, 9000),
    block_size=st.sampled_from([1, 4, 16]),
    num_blocks=st.integers(1, 2000),
    max_num_seqs=st.integers(1, 200),
)
def test_the_walk_equals_the_stepwise_pass(
    prompts: list[int],
    resumed: list[int],
    running: int,
    lag: int,
    budget: int,
    block_size: int,
    num_blocks: int,
    max_num_seqs: int,
) -> None:
    cfg = SchedulerConfig(
        max_num_batched_tokens=9000, max_num_seqs=max_num_seqs, block_size=block_size,
        num_blocks=num_blocks,
    )  # fmt: skip
    running = min(running, len(prompts))
    walk = _replica(prompts, resumed, running, lag, cfg)
    step = _replica(prompts, resumed, running, lag, cfg)
    assert walk.scheduler._admits_plainly()
    assert _pass(walk, budget, walk=True) == _pass(step, budget, walk=False)


def test_a_long_run_by_hand() -> None:
    """Twenty heads of 16 tokens, the 17th and 18th resumed (21 tokens): the budget ends in the
    eighteenth (cut to 3 tokens) and the free blocks in it, so 18 are admitted across the
    64-row buffer's doubling, each stored minus the lag."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=9000, max_num_seqs=256, block_size=16, num_blocks=19
    )
    prompts = [16] * 70
    replica = _replica(prompts, [0] * 16 + [5, 5], 50, 2, cfg)
    chunks, (ints, capacity, times, free, size, fifo, _), (appended, first) = _pass(
        replica, 16 * 17 + 8, walk=True
    )
    assert chunks == [16] * 16 + [21, 3]  # 24 tokens left after 16 heads: 21, then 3 of 21
    assert free == 19 - 16 - 2 - 1 == 0  # the last head's block just fits (fake rows took none)
    assert size == 68 and capacity == [128] and fifo == [68, 69]
    assert ints[0][50:] == list(range(50, 68))
    assert ints[1][50:] == [-2] * 18  # no prefix hit, stored minus the lag
    assert ints[2][50:] == [14] * 16 + [19, 19]
    assert ints[3][50:] == [-2] * 16 + [3, 3]  # generated: tokens - prompt, minus the lag
    assert ints[5][50:] == [1] * 16 + [2, 1]
    assert ints[6][50:] == [3] * 18  # the ITL log's length
    assert times[50:] == [7.0] * 18
    assert first[50:66] == [7.0] * 16 and first[66:68] == [1.5, 1.5] and first[68] == -1.0
    assert appended == [tuple(column[row] for column in ints) for row in range(50, 68)]


@pytest.mark.parametrize("policy", ["spf", "priority"])
def test_heap_queues_take_the_stepwise_pass(policy: str) -> None:
    from inferplan.engine.policies import WaitingQueue

    cfg = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, block_size=16, num_blocks=50)
    keys = np.array([3.0, 1.0, 2.0])
    replica = replica_at_zero(
        [16, 32, 48], [4, 4, 4], cfg, _FlatModel(), WaitingQueue(policy, keys)
    )
    for rid in range(3):
        replica.add_request(rid)
    chunks: list[int] = []
    plain_admission.admit_plainly(replica.scheduler, 80, chunks, 0.0, None)
    assert chunks == [32, 48] and replica.running.ids.tolist() == [1, 2]  # by key, not arrival


def test_max_num_seqs_cuts_the_pass() -> None:
    cfg = SchedulerConfig(max_num_batched_tokens=9000, max_num_seqs=5, block_size=4, num_blocks=99)
    for running, admitted in [(2, 3), (4, 1), (5, 0)]:
        replica = _replica([8] * 9, [], running, 0, cfg)
        chunks, (*_, size, fifo, _), _ = _pass(replica, 9000, walk=True)
        assert chunks == [8] * admitted and size == 5 and fifo == list(range(5, 9))
