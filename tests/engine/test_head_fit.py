"""The queue head's admission answer asked once per arrival, and the running set's flat buffer
(branch ``nearhot``, issue 10).

- ``Scheduler.head_can_join`` keeps its yes (``joins``); the vector step hands it to its
  waiting pass (``step_fit``), which takes it only while the head, the token budget, the free
  blocks and the prefix cache's cached-free blocks are its own, and asks again otherwise.
- ``RunningSet._flat`` views the int columns' buffer (``append`` writes and ``stored_row``
  reads through it), also after the buffers grow; ``drop_row`` shifts the token times only
  where they are not all pending.
"""

from __future__ import annotations

import numpy as np

from inferplan.engine.plain_admission import admit_stepwise
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.running import RunningSet
from inferplan.perf.batch import StepBatch
from inferplan.perf.protocol import StepTime

from .replica_helpers import replica_at_zero

CFG = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, block_size=16, num_blocks=64)


class _FlatModel:
    """Every step takes 1 ms (the tests here run no step)."""

    def step_time(self, batch: StepBatch) -> StepTime:
        return StepTime(1e-3, {"compute": 1e-3})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1e-3, 0.0, float("inf")


def _waiting_replica(prompts: list[int]) -> Replica:
    replica = replica_at_zero(prompts, [4] * len(prompts), CFG, _FlatModel())
    for rid in range(len(prompts)):
        replica.add_request(rid)
    return replica


def test_head_can_join_keeps_its_answer() -> None:
    replica = _waiting_replica([40])
    scheduler = replica.scheduler
    replica.running.append(7, 20, 21, 1, 9, 2, 0.0)  # one decoding row, so the head may join
    assert scheduler.head_can_join()
    free = replica.pool.free - replica.running.rows.crossings(1)
    # rid, tokens, budget (the budget less the decoding row), blocks, cached-free, chunk, hit
    assert scheduler.joins == (0, 40, 511, free, 0, 40, 0)


def test_waiting_pass_takes_a_matching_answer() -> None:
    replica = _waiting_replica([40])
    scheduler, free = replica.scheduler, replica.pool.free
    # A planted answer whose key matches: the stepwise pass takes its chunk (17, not the
    # test's 40).
    planted = (0, 40, 512, free, 0, 17, 0)
    chunks: list[int] = []
    admit_stepwise(scheduler, 512, chunks, 0.0, planted)
    assert chunks == [17]
    # A FIFO queue's one-frame pass runs the plain test inline (the answer it would hold is
    # that test on the same key), so a planted answer is dropped, not taken.
    replica = _waiting_replica([40])
    replica.scheduler.step_fit = planted
    chunks = []
    replica.scheduler.admit_waiting(512, chunks, 0.0)
    assert chunks == [40]
    assert replica.scheduler.step_fit is None  # dropped once asked


def test_waiting_pass_asks_again_when_the_key_moved() -> None:
    free = _waiting_replica([40]).pool.free
    stale = [
        (1, 40, 512, free, 0, 17, 0),  # another head
        (0, 41, 512, free, 0, 17, 0),  # other tokens
        (0, 40, 511, free, 0, 17, 0),  # another budget
        (0, 40, 512, free - 1, 0, 17, 0),  # other free blocks
        (0, 40, 512, free, 3, 17, 0),  # the prefix cache moved
    ]
    for fit in stale:
        replica = _waiting_replica([40])
        chunks: list[int] = []
        admit_stepwise(replica.scheduler, 512, chunks, 0.0, fit)
        assert chunks == [40], fit  # the admission test's own answer


def test_flat_buffer_follows_growth() -> None:
    run = RunningSet(capacity=2, block_size=16)
    for rid in range(5):  # grows twice
        run.append(rid, 10 + rid, 11 + rid, rid, 20 + rid, 1 + rid, float(rid))
    for row in range(5):
        assert run.stored_row(row) == run._ints[:, row].tolist()
    assert run.stored_row(3)[:6] == [3, 13, 14, 3, 23, 4]


def test_drop_row_shifts_times_unless_all_pending() -> None:
    run = RunningSet(capacity=8, block_size=16)
    for rid in range(4):
        run.append(rid, 10, 11, 1, 20, 1, float(rid))
    run.drop_row(1)  # times not pending: they shift with the rows
    assert run.last_token_s.tolist() == [0.0, 2.0, 3.0]
    run.rows.emitted(5.0)  # every row emitted at 5 s: the times are pending
    run.drop_row(0)
    assert run.last_token_s.tolist() == [5.0, 5.0]
    assert np.array_equal(run.ids, [2, 3])
