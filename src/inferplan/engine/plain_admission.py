"""vLLM v1's waiting pass in block counts (``Scheduler.admit_waiting``; issue 10, above capacity).

Where the scheduler is vLLM v1's own on a uniform pool without a prefix cache, KV tiers or
admission policies (``Scheduler._admits_plainly``), its admission test (``_head_fit``) finds no
prefix hit, so the queue head's first chunk is ``min(tokens, budget)`` and it fits iff that
chunk's ``ceil(chunk / B)`` blocks are free; admitting it (``admit_popped``) takes them from the
free pool and appends the row. Above capacity each finish re-admits several preempted requests
at once (their whole recomputed KV as chunks): this loop does the same, in the same order, to
the same state, without the per-request calls.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

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
    allows and its chunk's blocks are free; append each chunk to ``sched``. ``fit``: the
    head's answer from ``head_can_join``, taken where its key still holds, as there."""
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
