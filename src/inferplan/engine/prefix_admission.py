"""Admitting a request whose KV is partly stored: the prefix cache's entries still in HBM are
mapped, not computed; with KV tiers (``engine/offload.py``) the rest comes back from a tier
while the request waits off the batch. Both count the hit the same way (``_count_hit``): in the
request's records and in the cache's totals, the summary's hit rate."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferplan.engine.schedulers import Scheduler
    from inferplan.memory.prefixcache import PrefixCache


def map_cached(
    sched: Scheduler, rid: int, tokens: int, entries: int, held: int, now: float
) -> int | None:
    """Map the first ``entries`` prefix entries of an admitted request's prompt: those in HBM
    directly; with KV tiers, those after them come back from a tier, so the request gets its
    ``held`` blocks now and waits for the reads (None)."""
    pool, offload = sched.pool, sched.offload
    cache = pool.cache
    assert cache is not None
    entry_tokens = cache.entry_kv_blocks * pool.block_size
    in_hbm = entries if offload is None else cache.lookup(rid, entries)[0]
    pool.free -= cache.acquire(rid, in_hbm)
    _count_hit(sched, cache, rid, tokens, in_hbm * entry_tokens)
    if in_hbm == entries or offload is None:
        return in_hbm
    first_scheduled_s = sched.records.first_scheduled_s
    if math.isnan(first_scheduled_s[rid]):
        first_scheduled_s[rid] = now
    hit = entries * entry_tokens  # reads first: allocating may evict into the tiers
    offload.begin_prefix_load(rid, cache.hashes[rid][in_hbm:entries], (hit, tokens), held)
    pool.free -= held - in_hbm * cache.entry_blocks
    return None


def reload(sched: Scheduler, rid: int, tokens: int, hit: int, held: int) -> None:
    """Admit a request whose ``hit`` computed tokens are in a tier with ``held`` blocks; prompt
    entries the prefix cache still holds are mapped, not read."""
    pool, offload = sched.pool, sched.offload
    cache = pool.cache
    assert offload is not None
    in_hbm = 0
    if cache is not None and cache.window_entries is None:  # windowed pools: read it all
        entry_tokens = cache.entry_kv_blocks * pool.block_size
        prompt_entries = min(int(sched.prompt_tokens[rid]), tokens - 1, hit) // entry_tokens
        in_hbm = cache.lookup(rid, prompt_entries)[0] * entry_tokens
        pool.free -= cache.acquire(rid, in_hbm // entry_tokens)
        _count_hit(sched, cache, rid, tokens, in_hbm)
    offload.begin_load(rid, (hit, tokens), held, in_hbm)  # reads first: allocating evicts
    pool.free -= held - in_hbm // pool.block_size


def _count_hit(sched: Scheduler, cache: PrefixCache, rid: int, tokens: int, cached: int) -> None:
    """``cached`` of the request's ``tokens`` queried were found in the cache."""
    records = sched.records
    records.cached_tokens[rid] += cached  # type: ignore[index]
    records.prefix_queried_tokens[rid] += tokens  # type: ignore[index]
    cache.cached_tokens += cached
    cache.queried_tokens += tokens
