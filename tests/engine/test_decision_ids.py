"""A step's decision names the requests it preempted and admitted (``StepDecision.
preempted_ids`` / ``admitted_ids``, as vLLM v1's ``SchedulerOutput`` does), driven by hand
without the event loop. Request ids differ from row positions throughout, so a decision that
named rows, or listed the victims in another order than they were popped, fails."""

from __future__ import annotations

from .test_scheduler_decisions import _scheduler, _waiting_ids


def test_victims_are_named_in_the_order_they_were_popped() -> None:
    """Four rows of one block each in a full pool of 4, all at a block boundary, admitted in
    the order [2, 0, 3, 1]: row 0 needs a block, so the last admitted (request 1) goes; row 1
    needs one, so the next last (request 3) goes; requests 2 and 0 decode."""
    sched = _scheduler(
        "continuous",
        4,
        [16] * 4,
        [8] * 4,
        [(2, 16, 1), (0, 16, 1), (3, 16, 1), (1, 16, 1)],
        waiting=[],
    )
    decision = sched.schedule(0.0)
    assert decision.preempted
    assert decision.preempted_ids == [1, 3]
    assert decision.admitted_ids == []
    assert sched.running.ids.tolist() == [2, 0]
    assert _waiting_ids(sched) == [3, 1]  # each victim went to the queue's head


def test_a_row_that_is_its_own_victim_is_named() -> None:
    """Priorities 5, 1, 5: request 2, the first row, has the largest (priority, arrival) and
    is preempted for its own block (``test_scheduler_decisions``' priority case)."""
    sched = _scheduler(
        "continuous",
        6,
        [32, 32, 32],
        [8, 8, 8],
        [(2, 32, 2), (0, 32, 2), (1, 32, 2)],
        waiting=[],
        priorities=[5, 1, 5],
    )
    assert sched.schedule(0.0).preempted_ids == [2]


def test_admitted_requests_are_named_in_running_order_after_the_running_ones() -> None:
    """Request 3 runs (mid-block, no new block); 8 blocks leave 6 free: requests 1 (2 blocks)
    and 0 (3 blocks) are admitted in queue order, request 2 (3 blocks) does not fit."""
    sched = _scheduler("continuous", 8, [48, 32, 48, 17], [4] * 4, [(3, 17, 2)], waiting=[1, 0, 2])
    decision = sched.schedule(0.0)
    assert not decision.preempted and decision.preempted_ids == []
    assert decision.admitted_ids == [1, 0]
    assert sched.running.ids.tolist() == [3, 1, 0]
    assert decision.sched.tolist() == [1, 32, 48]
    assert _waiting_ids(sched) == [2]


def test_a_step_that_preempts_admits_nobody() -> None:
    sched = _scheduler(
        "continuous", 4, [32, 32, 16], [8, 8, 8], [(1, 32, 2), (0, 32, 2)], waiting=[2]
    )
    decision = sched.schedule(0.0)
    assert (decision.preempted_ids, decision.admitted_ids) == ([0], [])
