"""vLLM v1's admission test and waiting pass with own blocks, in one frame each (issue 10).

Where the scheduler is vLLM v1's own on a uniform pool whose prefix cache is ``OwnBlocks``
(``memory/ownblocks.py``: every block its owner's, the cache simulate runs on a workload
without prompt hashes), with no KV tiers or admission policy (``Scheduler.admits_own``), the
admission test (``Scheduler._head_fit``) and the admission (``admit_popped``) reduce to a few
counts: the head's prefix hit is its own run (``OwnBlocks.lookup``), capped at the entries of
its first ``tokens - 1`` tokens; admitting it takes the run back (``acquire``) and the blocks of
its first chunk beyond the run from the free pool, evicting the cached-free entries that no
longer fit, and registers the entries its chunk completes. Below capacity these run once per
arrival (Vidur's trace); this module does the same in the same order, to the same state,
without the eleven calls the general form takes per admission. The general form stays the
reference: ``tests/engine/test_own_admission.py`` runs both.

Two writes of the general form are left out because they cannot change anything here:
``map_cached``'s ``pool.free -= acquired`` cannot evict (``acquire`` lowers the cached-free
blocks by what it returns, and they never exceed the free count), and ``admit_popped``'s
``evict_to`` after ``register`` finds nothing (``OwnBlocks.register`` changes no cached-free
count, and the write before it evicted to the same count).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferplan.engine.schedulers import HeadFit, Scheduler
    from inferplan.memory.blockpool import BlockPool
    from inferplan.memory.ownblocks import OwnBlocks
    from inferplan.metrics.records import RequestRecords


def own_head_fit(s: Scheduler, budget: int, available: int) -> HeadFit | None:
    """``Scheduler._head_fit`` with own blocks: the queue head's answer, or None where it
    waits. Its hit is its own run, capped at the entries of its hashed tokens (prompt and
    output: own blocks cover both) short of its last token."""
    cache: OwnBlocks = s.pool.cache  # type: ignore[assignment]  # ``Scheduler._admits_own``
    rid, tokens = s.waiting.peek()
    block = s.pool.block_size
    hit = 0
    if cache.may_hold(rid):  # else no run, no hit (``lookup``'s first test, before its cap)
        entry_tokens = cache.entry_kv_blocks * block
        hashed = s.prompt_tokens.item(rid)
        if cache.covers_output:
            hashed += s.target_tokens.item(rid)
        max_entries = min(hashed, tokens - 1) // entry_tokens
        if max_entries > 0:
            hit = cache.lookup(rid, max_entries)[0] * entry_tokens
    chunk = min(tokens - hit, budget)
    if -(-(hit + chunk) // block) > available:  # ``blocks_for_one`` of a uniform pool
        return None
    return rid, tokens, budget, available, cache.lru_blocks, chunk, hit


def admit_own(s: Scheduler, budget: int, sched: list[int], now: float, fit: HeadFit | None) -> None:
    """``Scheduler.admit_waiting``'s loop with own blocks: admit the queue head while the
    budget lasts, ``max_num_seqs`` allows and ``own_head_fit`` says it fits; append each chunk
    to ``sched``. ``fit``: the head's answer from ``head_can_join``, taken where its key (head,
    budget, free blocks, cached-free blocks) still holds, as there."""
    run, waiting, pool = s.running, s.waiting, s.pool
    cache: OwnBlocks = pool.cache  # type: ignore[assignment]  # ``Scheduler._admits_own``
    block, max_num_seqs = pool.block_size, s.cfg.max_num_seqs
    entry_tokens = cache.entry_kv_blocks * block
    rec = s.records
    first_scheduled_s, cached_tokens, queried = (
        rec.first_scheduled_s, rec.cached_tokens, rec.prefix_queried_tokens,
    )  # fmt: skip
    prompt_tokens, target_tokens = s.prompt_tokens, s.target_tokens
    while waiting.tokens and run._size < max_num_seqs and budget > 0:
        available = pool.free_blocks
        if (
            fit is None
            or fit[:2] != waiting.peek()
            or fit[2] != budget
            or fit[3] != available
            or fit[4] != cache.lru_blocks
        ):
            fit = own_head_fit(s, budget, available)
            if fit is None:
                break
        rid, tokens, _, _, _, chunk, hit = fit
        fit = None
        waiting.pop()
        held = -(-(hit + chunk) // block)
        entries = hit // entry_tokens
        # ``map_cached``: the run mapped (its blocks leave the cached-free ones), the hit counted
        acquired = cache.acquire(rid, entries)
        cached = entries * entry_tokens
        cached_tokens[rid] += cached  # type: ignore[index]
        queried[rid] += tokens  # type: ignore[index]
        cache.cached_tokens += cached
        cache.queried_tokens += tokens
        # The chunk's other blocks from the free pool (``BlockPool.free``'s setter, inline)
        pool.free_blocks = free = (
            pool.free_blocks - acquired - (held - entries * cache.entry_blocks)
        )
        if cache.lru_blocks > free:
            cache.evict_to(free)
        prompt = prompt_tokens.item(rid)
        done = min(hit + chunk, prompt) // entry_tokens  # ``OwnBlocks.register``, inline
        done = min(done, cache.num_entries[rid])
        if done > cache.held.get(rid, 0):
            cache.held[rid] = done
        if math.isnan(first_scheduled_s.item(rid)):  # ``item``: a Python float
            first_scheduled_s[rid] = now
        run.append(rid, hit, tokens, int(tokens - prompt), target_tokens.item(rid), held, now)
        sched.append(chunk)
        budget -= chunk


def admit_first(
    pool: BlockPool,
    rec: RequestRecords,
    rid: int,
    tokens: int,
    held: int,
    new_blocks: int,
) -> bool:
    """The own-block writes of a joined admission step (``implicit_step._admit_head``) whose
    lone queued request ``rid`` has no run cached (a new request: no hit) and admits its whole
    prompt, ``tokens`` tokens in ``held`` blocks, which fit beside the decode's ``new_blocks``:
    the general form's ``BlockPool.free`` write for the decode's blocks, then ``admit_own``'s
    turn for the head (``acquire`` maps nothing, so its computed entries are what
    ``register`` gives its prompt; the queried counts; its blocks taken). Both writes evict
    the cached-free blocks that no longer fit; here one eviction after both: evicting to
    ``a`` then to ``b <= a`` drops ``ceil((L - a) / e) + ceil((L' - b) / e)`` entries, ``L' =
    L - e * ceil((L - a) / e)``, which is ``ceil((L - b) / e)``, the same entries from the same
    front (``OwnBlocks.evict_to``), and nothing reads the runs between. False, having done
    nothing, where it has a run (its hit: ``admit_own``'s cases)."""
    cache: OwnBlocks = pool.cache  # type: ignore[assignment]  # ``Scheduler._admits_own``
    if rid in cache._runs:  # ``may_hold``, inline: a run (a preempted request's), maybe a hit
        return False
    entries = tokens // (cache.entry_kv_blocks * pool.block_size)  # its prompt's entries
    own = cache.num_entries[rid]
    cache.held[rid] = entries if entries < own else own  # ``acquire``'s 0, then ``register``
    rec.prefix_queried_tokens[rid] += tokens  # type: ignore[index]
    cache.queried_tokens += tokens  # its cached tokens: none
    pool.free_blocks = free = pool.free_blocks - new_blocks - held
    if cache.lru_blocks > free:
        cache.evict_to(free)
    return True
