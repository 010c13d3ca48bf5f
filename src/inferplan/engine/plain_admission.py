"""vLLM v1's waiting pass in block counts (``Scheduler.admit_waiting``; issue 10, above capacity).

Where the scheduler is vLLM v1's own on a uniform pool without a prefix cache, KV tiers or
admission policies (``Scheduler._admits_plainly``), its admission test (``_head_fit``) finds no
prefix hit, so the queue head's first chunk is ``min(tokens, budget)`` and it fits iff that
chunk's ``ceil(chunk / B)`` blocks are free; admitting it (``admit_popped``) takes them from the
free pool and appends the row. Above capacity each finish re-admits several preempted requests
at once (their whole recomputed KV as chunks; 7.6 a pass on average in ``above``, up to some
eighty): a FIFO queue is walked in place with the test inline, and the run of admitted heads
then leaves the queue and joins the running set together (a long run as columns), the same
requests with the same chunks, blocks and rows as the request-at-a-time pass
(``admit_stepwise``: the heap queues' form, and the reference).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from inferplan.engine.policies import FIFO_POLICIES, WaitingQueue

if TYPE_CHECKING:
    from inferplan.engine.schedulers import HeadFit, Scheduler

# From this many admitted heads on, their rows go to the running set as columns
# (``RunningSet.extend``: one numpy conversion) rather than one ``append`` each.
_COLUMN_ROWS = 12


def plain_head_chunk(tokens: int, budget: int, block_size: int, available: int) -> int | None:
    """The queue head's first chunk with no prefix hit, ``min(tokens, budget)`` tokens, where its
    ``ceil(chunk / block_size)`` blocks fit in ``available`` free blocks; None where it waits.
    The one statement of vLLM v1's plain head test (``_head_fit`` with no prefix cache, KV tiers
    or admission policy), for ``admit_plainly``, ``Scheduler.head_can_join`` and the chain's."""
    chunk = min(tokens, budget)
    return chunk if -(-chunk // block_size) <= available else None


def admit_plainly(
    s: Scheduler, budget: int, sched: list[int], now: float, fit: HeadFit | None
) -> None:
    """``admit_waiting``'s loop: admit the queue head while the budget lasts, ``max_num_seqs``
    allows and its chunk's blocks are free; append each chunk to ``sched``. A FIFO queue is
    walked in place and its admitted heads admitted together (``_admit_run``); the other
    queues go head by head (``admit_stepwise``). ``fit`` (``head_can_join``'s plain answer)
    is ``plain_head_chunk`` of the head's own key where it holds: the walk finds that chunk."""
    waiting = s.waiting
    if type(waiting) is not WaitingQueue or waiting.policy not in FIFO_POLICIES:
        admit_stepwise(s, budget, sched, now, fit)
        return
    queued, block = waiting.tokens, s.pool.block_size
    free, room = s.pool.free_blocks, s.cfg.max_num_seqs - s.running._size
    ids: list[int] = []
    tokens: list[int] = []
    held: list[int] = []
    for rid in waiting._fifo:  # head first; nothing leaves the queue until the walk ends
        if room <= 0 or budget <= 0:
            break
        num_tokens = queued[rid]
        chunk = num_tokens if num_tokens < budget else budget  # ``plain_head_chunk``, inline
        blocks = -(-chunk // block)
        if blocks > free:
            break  # the head waits, and blocks those behind it
        free -= blocks
        budget -= chunk
        room -= 1
        ids.append(rid)
        tokens.append(num_tokens)
        held.append(blocks)
        sched.append(chunk)
    if ids:
        _admit_run(s, ids, tokens, held, free, now)


def _admit_run(
    s: Scheduler, ids: list[int], tokens: list[int], held: list[int], free: int, now: float
) -> None:
    """Take the queue's first ``len(ids)`` heads off it and admit them (``admit_popped`` of
    each in order, without a prefix hit), ``free`` blocks left: their first-scheduled times and
    rows; a long run as columns (``RunningSet.extend``)."""
    waiting, run = s.waiting, s.running
    queued, popleft = waiting.tokens, waiting._fifo.popleft
    s.pool.free_blocks = free  # nothing to evict
    first_scheduled_s = s.records.first_scheduled_s
    if len(ids) < _COLUMN_ROWS:
        first, prompt, target = first_scheduled_s.item, s.prompt_tokens.item, s.target_tokens.item
        append = run.append
        for rid, num_tokens, blocks in zip(ids, tokens, held, strict=True):
            del queued[popleft()]
            if math.isnan(first(rid)):  # ``item``: a Python float
                first_scheduled_s[rid] = now
            append(rid, 0, num_tokens, int(num_tokens - prompt(rid)), target(rid), blocks, now)
        return
    for _ in ids:
        del queued[popleft()]
    first = first_scheduled_s.item
    unscheduled = [rid for rid in ids if math.isnan(first(rid))]
    if unscheduled:
        first_scheduled_s[unscheduled] = now
    prompts = map(s.prompt_tokens.item, ids)
    generated = [int(t - p) for t, p in zip(tokens, prompts, strict=True)]
    targets = list(map(s.target_tokens.item, ids))
    run.extend((ids, [0] * len(ids), tokens, generated, targets, held), now)


def admit_stepwise(
    s: Scheduler, budget: int, sched: list[int], now: float, fit: HeadFit | None
) -> None:
    """``admit_plainly`` one request at a time through the queue's and the running set's
    calls: any queue policy, and the reference of the run search (``tests/engine/
    test_plain_walk.py``)."""
    run, waiting, pool = s.running, s.waiting, s.pool
    block, max_num_seqs = pool.block_size, s.cfg.max_num_seqs
    first_scheduled_s = s.records.first_scheduled_s
    prompt_tokens, target_tokens = s.prompt_tokens, s.target_tokens
    while waiting.tokens and run._size < max_num_seqs and budget > 0:
        rid, tokens = waiting.peek()
        if fit is not None and fit[:5] == (rid, tokens, budget, pool.free_blocks, 0):
            chunk, hit = fit[5], fit[6]
        else:
            head_chunk = plain_head_chunk(tokens, budget, block, pool.free_blocks)
            if head_chunk is None:
                break  # the head waits, and blocks those behind it
            chunk, hit = head_chunk, 0
        fit = None
        held = -(-(hit + chunk) // block)
        waiting.pop()
        pool.free_blocks -= held  # nothing to evict
        if math.isnan(first_scheduled_s.item(rid)):  # ``item``: a Python float
            first_scheduled_s[rid] = now
        generated = int(tokens - prompt_tokens.item(rid))
        run.append(rid, hit, tokens, generated, target_tokens.item(rid), held, now)
        sched.append(chunk)
        budget -= chunk
