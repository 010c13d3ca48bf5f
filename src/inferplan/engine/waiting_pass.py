"""vLLM v1's waiting pass in its general form (``Scheduler.schedule_waiting``, issue 10 split).

After the running pass (``engine/schedulers.py``) and only if it preempted nothing, vLLM v1's
``Scheduler.schedule`` brings back swapped-out requests first (vLLM V0's swap: their KV returns
whole over the host link, plus the blocks of their next chunk), then admits the queue head
while the budget lasts, ``max_num_seqs`` allows and its first chunk's blocks fit
(``Scheduler._head_fit``, THE admission test); a head that does not fit blocks those behind it.
Admitting a request (``admit_popped``) maps its prefix hit's cached entries first, so that
allocating its chunk's blocks cannot evict them (``engine/prefix_admission.py``), or waits off
the batch where its KV comes back from a tier (``engine/offload.py``).

The general form is the reference; ``Scheduler.admit_waiting`` takes the reduced forms where they
apply: block counts (``plain_admission.py``) and own blocks (``own_admission.py``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.prefix_admission import map_cached, reload
from inferplan.engine.schedulers import StepDecision  # defined before ``schedulers`` imports us

if TYPE_CHECKING:
    from inferplan.engine.schedulers import HeadFit, Scheduler


def waiting_pass(s: Scheduler, decision: StepDecision, now: float, *, admit: bool) -> StepDecision:
    """``Scheduler.schedule_waiting``: swapped-out requests first, then (if ``admit``) the
    queue (``Scheduler.admit_waiting``), behind the running pass's ``decision``."""
    cfg, run, pool = s.cfg, s.running, s.pool
    budget = cfg.max_num_batched_tokens - int(decision.sched.sum())
    sched: list[int] = []  # tokens of the rows this pass adds behind the running ones
    first_added = len(run)
    swap_s = decision.swap_s
    while s.swapped and len(run) < cfg.max_num_seqs and budget > 0:
        if not s.swapped_head_fits(budget, pool.free_blocks):
            break
        rid, computed, tokens, held = s.swapped.popleft()
        n = min(tokens - computed, budget)
        blocks = max(pool.blocks_for_one(computed + n), held)
        pool.free = pool.free_blocks - blocks
        generated = int(tokens - s.prompt_tokens[rid])
        run.append(rid, computed, tokens, generated, int(s.target_tokens[rid]), blocks, now)
        sched.append(n)
        budget -= n
        swap_s += held * cfg.kv_block_bytes / cfg.host_link_bytes_s
        s.records.swapped_bytes[rid] += int(held * cfg.kv_block_bytes)
    if admit:
        s.admit_waiting(budget, sched, now)
    ids = {
        "preempted_ids": decision.preempted_ids,
        "admitted_ids": run.ids[first_added:].tolist(),
    }
    if sched:
        added = np.array(sched, dtype=np.int64)
        return StepDecision(np.concatenate((decision.sched, added)), swap_s=swap_s, **ids)
    return StepDecision(decision.sched, swap_s=swap_s, **ids)


def admit_general(
    s: Scheduler, budget: int, sched: list[int], now: float, fit: HeadFit | None
) -> None:
    """``Scheduler.admit_waiting``'s general form: admit the queue head while the budget
    lasts, ``max_num_seqs`` allows and ``_head_fit`` says it fits; append each chunk to
    ``sched``. ``fit`` (``head_can_join``'s answer where no step ran since) is taken for the
    head if the head, budget, blocks and cache are still its own."""
    run, waiting, cache = s.running, s.waiting, s.pool.cache
    max_num_seqs = s.cfg.max_num_seqs
    # ``len(waiting)`` and ``len(run)`` without their ``__len__`` calls
    while waiting.tokens and run._size < max_num_seqs and budget > 0:
        available = s.available_blocks()
        if (
            fit is None
            or fit[:2] != waiting.peek()
            or fit[2] != budget
            or fit[3] != available
            or fit[4] != (0 if cache is None else cache.lru_blocks)
        ):
            fit = s._head_fit(budget, available)
            if fit is None:
                break
        rid, tokens, _, _, _, chunk, hit = fit
        fit = None
        waiting.pop()
        if not admit_popped(s, rid, tokens, chunk, now, hit):
            continue  # its KV comes back from a tier first
        sched.append(chunk)
        budget -= chunk


def admit_popped(
    s: Scheduler, rid: int, tokens: int, chunk: int, now: float, hit: int | None = None
) -> bool:
    """Give the request just taken off the queue its blocks (prefix hit + first ``chunk``)
    and append it to the running set; False where it waits off the batch for KV coming
    back from a tier (``engine/offload.py``). ``hit``: its prefix hit where the admission
    test has just found it (only the queue's pop since)."""
    pool = s.pool
    if hit is None:
        hit, _ = s.prefix_hit(rid, tokens)
    held = pool.blocks_for_one(hit + chunk)
    if s.offload is not None and rid in s.offload.stored:
        reload(s, rid, tokens, hit, held)  # it joins the batch when its KV is back
        return False
    if pool.cache is None:
        pool.free_blocks -= held  # nothing to evict
    else:  # map the cached entries first, so that allocating cannot evict them
        entry_tokens = pool.cache.entry_kv_blocks * pool.block_size
        in_hbm = map_cached(s, rid, tokens, hit // entry_tokens, held, now)
        if in_hbm is None:
            return False  # the rest of its prefix comes back from a tier: it waits
        pool.free = pool.free_blocks - (held - in_hbm * pool.cache.entry_blocks)
        end = min(hit + chunk, s.prompt_tokens.item(rid))
        pool.cache.register(rid, end // entry_tokens)
        pool.cache.evict_to(pool.free_blocks)
    first_scheduled_s = s.records.first_scheduled_s
    if math.isnan(first_scheduled_s.item(rid)):  # ``item``: a Python float, no numpy scalar
        first_scheduled_s[rid] = now
    generated = int(tokens - s.prompt_tokens.item(rid))
    s.running.append(rid, hit, tokens, generated, s.target_tokens.item(rid), held, now)
    return True
