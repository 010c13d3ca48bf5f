"""SGLang's radix cache (``memory/radixcache.py``) driven by hand: hits, locks, leaf-only LRU
eviction by last access, duplicate adoption on insert, and its invariants after every verb."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.memory.radixcache import RadixCache

# Request 0: entries 1, 2, 3; request 1 shares 1, 2 and branches to 4; request 2 is 5 alone.
CHAINS = ((1, 2, 3), (1, 2, 4), (5,))


def _cache(chains: tuple[tuple[int, ...], ...] = CHAINS, entry_blocks: int = 16) -> RadixCache:
    return RadixCache(chains, entry_blocks)


def test_a_shared_prefix_hits_and_locked_entries_are_shared() -> None:
    cache = _cache()
    assert cache.insert(0, 3) == 0
    cache.check()
    hits, shared = cache.lookup(1, 3)
    assert (hits, shared) == (2, 2 * 16)  # 1 and 2: request 0 still maps them
    assert cache.acquire(1, 2) == 0  # nothing taken from the cached-free blocks
    assert cache.shared_blocks == 32
    cache.check()


def test_eviction_takes_the_least_recently_used_leaf_never_an_inner_or_locked_entry() -> None:
    cache = _cache()
    cache.insert(0, 3)
    cache.acquire(1, 2)
    cache.insert(1, 3)  # 4 under 2
    cache.release(0, touch=True)  # 3 is an unreferenced leaf; 1, 2 still locked by request 1
    cache.evict_to(0)
    cache.check()
    assert set(cache.refs) == {1, 2, 4}  # only 3 could go
    cache.release(1, touch=True)
    cache.evict_to(16)  # one entry stays: the leaf 4 goes first, then its parent 2, not 1
    cache.check()
    assert set(cache.refs) == {1}


def test_lru_order_is_last_access_not_the_order_entries_were_freed() -> None:
    cache = _cache()
    cache.insert(0, 3)  # path 1-2-3
    cache.insert(2, 1)  # 5
    cache.release(2, touch=True)
    cache.release(0, touch=True)  # 3 accessed after 5
    cache.acquire(1, 2)  # a hit on 1-2: 3 is not on it and keeps its stamp
    cache.release(1)
    cache.evict_to(cache.lru_blocks - 16)
    assert 5 not in cache.refs and 3 in cache.refs  # 5 was accessed least recently
    cache.evict_to(cache.lru_blocks - 16)
    assert 3 not in cache.refs and 2 in cache.refs  # then the leaf 3; 2 had a later hit
    cache.check()


def test_a_retracted_request_keeps_its_old_stamp() -> None:
    cache = _cache()
    cache.insert(2, 1)  # 5 first
    cache.insert(0, 3)  # then 1-2-3
    cache.release(2, touch=True)  # 5: accessed at its finish, after 1-2-3
    cache.release(0)  # a retraction: no access, so 3 is older than 5
    cache.evict_to(cache.lru_blocks - 16)
    assert 3 not in cache.refs and 5 in cache.refs


def test_insert_adopts_an_entry_another_request_inserted_and_frees_its_copy() -> None:
    cache = _cache()
    cache.insert(0, 2)  # request 0 locks 1, 2
    assert cache.insert(1, 3) == 2 * 16  # request 1 computed 1, 2 too: its copies are freed
    assert (cache.refs[1], cache.refs[2], cache.refs[4]) == (2, 2, 1)
    assert cache.shared_blocks == 2 * 16
    cache.release(0)
    cache.release(1, touch=True)
    assert cache.lru_blocks == 3 * 16
    # Cached-free entries computed again are taken off the free list; no copy is left over.
    assert cache.insert(0, 3) == 0
    assert cache.lru_blocks == 16 and cache.refs[3] == 1
    cache.check()


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["insert", "acquire", "release", "finish", "evict"]),
                  st.integers(0, 5), st.integers(0, 4)),
        max_size=60,
    )
)  # fmt: skip
def test_invariants_hold_and_locked_entries_survive_any_sequence(
    ops: list[tuple[str, int, int]],
) -> None:
    chains = ((1, 2, 3, 4), (1, 2, 5), (1, 6), (7, 8), (1, 2, 3, 9), (7,))
    cache = RadixCache(chains, 4)
    running: set[int] = set()
    for verb, rid, n in ops:
        if verb == "insert" and rid in running:
            cache.insert(rid, min(len(chains[rid]), cache.covered.get(rid, 0) + n))
        elif verb == "acquire" and rid not in running:
            hits, _ = cache.lookup(rid, min(n, len(chains[rid])))
            cache.acquire(rid, hits)
            running.add(rid)
        elif verb in ("release", "finish") and rid in running:
            cache.release(rid, touch=verb == "finish")
            running.discard(rid)
        elif verb == "evict":
            cache.evict_to(cache.lru_blocks // (n + 1))
        cache.check()
        for r in running:  # locked entries and their ancestors are never evicted
            assert all(h in cache.refs for h in cache.held.get(r, []))
            covered = cache.covered.get(r, 0)
            assert all(h in cache.refs for h in chains[r][:covered])


def test_register_is_not_the_radix_verb() -> None:
    with pytest.raises(NotImplementedError):
        _cache().register(0, 1)
