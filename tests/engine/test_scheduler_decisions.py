"""Each scheduler's decisions on small hand-built states, without the event loop (the vLLM v1
style of testing a scheduler as a plain-data function): who is preempted, who is admitted, in
which order. Every case is built so that reversing an order (first admitted instead of last,
earliest arrival instead of latest, smallest priority value instead of largest, no reservation
for running requests) picks a different request and fails.

Request ``i`` arrives before request ``i + 1``. Blocks are 16 tokens. A running row is given as
(id, computed tokens, held blocks); a decoding row has ``computed + 1`` tokens to reach, so at a
block boundary (computed a multiple of 16) it needs one new block.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from inferplan.engine.policies import WaitingQueue, policy_keys
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.running import RunningSet
from inferplan.engine.schedulers import SCHEDULERS, Scheduler
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool
from inferplan.metrics.records import RequestRecords

BLOCK = 16


def _scheduler(
    kind: str,
    num_blocks: int,
    prompts: list[int],
    outputs: list[int],
    running: list[tuple[int, int, int]],
    waiting: list[int],
    *,
    budget: int = 4096,
    priorities: list[int] | None = None,
) -> Scheduler:
    """A scheduler of ``kind`` over a pool of ``num_blocks`` with ``running`` rows in admission
    order (id, computed, held blocks) and ``waiting`` requests queued in that order."""
    n = len(prompts)
    cfg = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=64,
        block_size=BLOCK,
        num_blocks=num_blocks,
        scheduler=kind,
    )
    records = RequestRecords.empty(n)
    records.requested_output_tokens[:] = outputs  # type: ignore[index]
    prompt_tokens = np.array(prompts, dtype=np.int64)
    pool = BlockPool(num_blocks, BLOCK, FULL_ATTENTION)
    policy = "fcfs" if priorities is None else "priority"
    arrival_s = np.arange(n, dtype=np.float64)
    prio = None if priorities is None else np.array(priorities, dtype=np.int64)
    queue = WaitingQueue(policy, policy_keys(policy, arrival_s, prio, np.array(outputs)))
    run = RunningSet()
    for rid, computed, held in running:
        generated = computed + 1 - prompts[rid]
        run.append(rid, computed, computed + 1, generated, outputs[rid], held, 0.0)
        records.first_scheduled_s[rid] = 0.0
        pool.free -= held
    for rid in waiting:
        queue.push(rid, num_tokens=prompts[rid])
    return SCHEDULERS[kind](cfg, run, queue, deque(), pool, records, prompt_tokens)


def _waiting_ids(sched: Scheduler) -> list[int]:
    ids = []
    while len(sched.waiting):
        ids.append(sched.waiting.peek()[0])
        sched.waiting.pop()
    return ids


# ---- vLLM v1 (``Scheduler``) ---------------------------------------------------------------


def test_vllm_fcfs_preempts_the_last_admitted_not_the_latest_arrival() -> None:
    """A full pool of 4 blocks; both rows reach a block boundary. Admission order is
    [1, 0]: row 1 is served first, the pool is dry, so the last admitted (request 0, although
    it arrived first) is preempted and its 2 blocks let request 1 grow; the waiting pass does
    not run after a preemption."""
    sched = _scheduler(
        "continuous", 4, [32, 32, 16], [8, 8, 8], [(1, 32, 2), (0, 32, 2)], waiting=[2]
    )
    decision = sched.schedule(0.0)
    assert decision.preempted
    assert sched.running.ids.tolist() == [1]
    assert decision.sched.tolist() == [1]
    assert sched.records.num_preemptions.tolist() == [1, 0, 0]
    assert _waiting_ids(sched) == [0, 2]  # the victim goes back to the queue's head
    assert sched.pool.free == 1


def test_vllm_priority_preempts_the_largest_priority_then_the_latest_arrival() -> None:
    """Priorities (lower runs first) 5, 1, 5 for requests 0, 1, 2, admitted in the order
    [2, 0, 1], a full pool of 6 blocks, every row at a block boundary. The victim is the
    largest (priority, arrival): request 2 (priority 5, later than request 0), not the last
    admitted (request 1) nor the earlier of the tie (request 0). Request 2 is the first row,
    so it is its own victim, and as in vLLM v1 (``if not can_schedule: break``) the running
    pass stops there: the others get no tokens this step and its 2 blocks stay free."""
    sched = _scheduler(
        "continuous",
        6,
        [32, 32, 32],
        [8, 8, 8],
        [(2, 32, 2), (0, 32, 2), (1, 32, 2)],
        waiting=[],
        priorities=[5, 1, 5],
    )
    decision = sched.schedule(0.0)
    assert decision.preempted
    assert sched.running.ids.tolist() == [0, 1]
    assert sched.records.num_preemptions.tolist() == [0, 0, 1]
    assert decision.sched.tolist() == [0, 0]
    assert sched.pool.free == 2


def test_vllm_admits_in_queue_order_and_a_head_that_does_not_fit_blocks_the_rest() -> None:
    """8 free blocks: request 0 (3 blocks) then request 1 (4) are admitted, in that order;
    request 2 (3 blocks) does not fit the 1 left and request 3 (1 block) behind it waits too."""
    sched = _scheduler("continuous", 8, [48, 64, 48, 16], [4] * 4, [], waiting=[0, 1, 2, 3])
    decision = sched.schedule(0.0)
    assert sched.running.ids.tolist() == [0, 1]
    assert decision.sched.tolist() == [48, 64]
    assert _waiting_ids(sched) == [2, 3]


def test_vllm_chunks_a_prompt_to_the_token_budget() -> None:
    sched = _scheduler("continuous", 20, [100], [4], [], waiting=[0], budget=64)
    assert sched.schedule(0.0).sched.tolist() == [64]
    assert sched.running.ids.tolist() == [0]


# ---- TensorRT-LLM GUARANTEED_NO_EVICT (``TrtllmScheduler``) ----------------------------------


def test_trtllm_admits_only_what_fits_beside_every_running_requests_remaining_need() -> None:
    """10 blocks. Request 0 runs (prompt 16 + 64 output: 5 blocks at its end, 2 held, so 3
    more kept for it). Request 1 (16 + 48: 4 blocks) fits the 10 - 2 - 3 = 5; request 2
    (16 + 32: 3 blocks) would need 3 of the 1 left, so it waits, although on-demand admission
    (vLLM) takes it (one block now)."""
    prompts, outputs = [16, 16, 16], [64, 48, 32]
    trt = _scheduler("trtllm", 10, prompts, outputs, [(0, 32, 2)], waiting=[1, 2])
    trt.schedule(0.0)
    assert trt.running.ids.tolist() == [0, 1]
    assert _waiting_ids(trt) == [2]
    vllm = _scheduler("continuous", 10, prompts, outputs, [(0, 32, 2)], waiting=[1, 2])
    vllm.schedule(0.0)
    assert vllm.running.ids.tolist() == [0, 1, 2]


def test_trtllm_does_not_chunk_a_prompt() -> None:
    """A 100-token prompt with a 64-token budget waits (no chunked context); vLLM chunks it."""
    trt = _scheduler("trtllm", 20, [100], [4], [], waiting=[0], budget=64)
    assert trt.schedule(0.0).sched.tolist() == []
    assert len(trt.running) == 0 and _waiting_ids(trt) == [0]


def test_trtllm_chunked_context_splits_a_prompt_over_the_budget() -> None:
    """With chunked context (``enable_chunked_prefill``) the same 100-token prompt runs 64
    tokens now and 36 next step, and admission still reserves its whole prompt + output: with
    7 blocks (100 + 4 tokens need 7) it is admitted, with 6 it waits although its first chunk
    (4 blocks) would fit."""
    trt = _scheduler("trtllm_chunked", 7, [100], [4], [], waiting=[0], budget=64)
    assert trt.schedule(0.0).sched.tolist() == [64]
    assert trt.running.ids.tolist() == [0]
    short = _scheduler("trtllm_chunked", 6, [100], [4], [], waiting=[0], budget=64)
    assert short.schedule(0.0).sched.tolist() == []
    assert _waiting_ids(short) == [0]


def test_trtllm_chunked_context_gives_the_leftover_budget_first_come_first_served() -> None:
    """A decoding request takes 1 token of the 64; the first waiting prompt (100 tokens) takes
    the other 63 and the second (16) gets none this step: first come first served, not the
    shortest first."""
    trt = _scheduler(
        "trtllm_chunked", 30, [16, 100, 16], [8, 4, 4], [(0, 17, 2)], waiting=[1, 2], budget=64
    )
    assert trt.schedule(0.0).sched.tolist() == [1, 63]
    assert _waiting_ids(trt) == [2]


# ---- static batching (``StaticScheduler``) -------------------------------------------------


def test_static_batch_admits_only_when_nothing_runs() -> None:
    """Request 1 fits beside request 0 but waits for the batch to end; with nothing running
    both queued requests form the next batch, in queue order."""
    busy = _scheduler("static", 20, [16, 16, 16], [8, 8, 8], [(0, 17, 2)], waiting=[1, 2])
    assert busy.schedule(0.0).sched.tolist() == [1]
    assert busy.running.ids.tolist() == [0]
    idle = _scheduler("static", 20, [16, 16, 16], [8, 8, 8], [], waiting=[1, 2])
    assert idle.schedule(0.0).sched.tolist() == [16, 16]
    assert idle.running.ids.tolist() == [1, 2]


# ---- vLLM V0 prefill-first (``PrefillFirstScheduler``) --------------------------------------


def test_prefill_first_runs_new_prompts_alone_when_the_head_fits() -> None:
    """Request 1's whole prompt fits: the step runs only it; running request 0 waits (0
    tokens). With too few blocks for the prompt, request 0 decodes instead."""
    sched = _scheduler("prefill_first", 20, [16, 48], [8, 8], [(0, 17, 2)], waiting=[1])
    decision = sched.schedule(0.0)
    assert decision.prefill_only
    assert decision.sched.tolist() == [0, 48]
    assert sched.running.ids.tolist() == [0, 1]
    full = _scheduler("prefill_first", 4, [16, 48], [8, 8], [(0, 17, 2)], waiting=[1])
    decision = full.schedule(0.0)
    assert not decision.prefill_only
    assert decision.sched.tolist() == [1]
    assert _waiting_ids(full) == [1]
