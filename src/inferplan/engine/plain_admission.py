"""vLLM v1's waiting pass in block counts (``Scheduler.admit_waiting``; issue 10, above capacity).

Where the scheduler is vLLM v1's own on a uniform pool without a prefix cache, KV tiers or
admission policies (``Scheduler._admits_plainly``), its admission test (``_head_fit``) finds no
prefix hit, so the queue head's first chunk is ``min(tokens, budget)`` and it fits iff that
chunk's ``ceil(chunk / B)`` blocks are free; admitting it (``admit_popped``) takes them from the
free pool and appends the row. Above capacity each finish re-admits several preempted requests
at once (their whole recomputed KV as chunks; 7.6 a pass on average in ``above``, up to some
eighty): a FIFO queue's pass runs in one frame, the head test (``plain_head_chunk``) and the
queue's ``peek`` and ``pop`` inline, with the same tests in the same order on the same counts
as the request-at-a-time pass (``admit_stepwise``: the heap queues' form, and the reference),
and its rows appended once it ends (``RunningSet.extend``: nothing reads them before).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from inferplan.engine.policies import WaitingQueue

if TYPE_CHECKING:
    from inferplan.engine.schedulers import HeadFit, Scheduler


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
    allows and its chunk's blocks are free; append each chunk to ``sched``. A FIFO queue's
    pass in one frame; the other queues go through the queue's calls (``admit_stepwise``).
    ``fit`` (``head_can_join``'s plain answer) is ``plain_head_chunk`` of the head's own key
    where it holds, so the inline test finds that chunk without it."""
    waiting = s.waiting
    if type(waiting) is not WaitingQueue or not waiting.is_fifo:
        admit_stepwise(s, budget, sched, now, fit)
        return
    run, pool, queued, fifo = s.running, s.pool, waiting.tokens, waiting._fifo
    block, room = pool.block_size, s.cfg.max_num_seqs - run._size
    first_scheduled_s = s.records.first_scheduled_s
    first, prompt, target = first_scheduled_s.item, s.prompt_tokens.item, s.target_tokens.item
    admitted: list[tuple[int, int, int, int, int]] = []  # ``RunningSet.extend``'s rows
    while fifo and room > 0 and budget > 0:
        rid = fifo[0]
        num_tokens = queued[rid]
        chunk = num_tokens if num_tokens < budget else budget  # ``plain_head_chunk``, inline
        blocks = -(-chunk // block)
        if blocks > pool.free_blocks:
            break  # the head waits, and blocks those behind it
        fifo.popleft()
        del queued[rid]
        pool.free_blocks -= blocks  # nothing to evict
        if math.isnan(first(rid)):  # ``item``: a Python float
            first_scheduled_s[rid] = now
        admitted.append((rid, num_tokens, int(num_tokens - prompt(rid)), target(rid), blocks))
        sched.append(chunk)
        budget -= chunk
        room -= 1
    if admitted:  # the rows appended in order once the pass ends (nothing read them before)
        run.extend(admitted, now)


def admit_stepwise(
    s: Scheduler, budget: int, sched: list[int], now: float, fit: HeadFit | None
) -> None:
    """``admit_plainly`` one request at a time through the queue's and the running set's
    calls: any queue policy, and the reference of the one-frame pass (``tests/engine/
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
