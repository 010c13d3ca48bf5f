"""SGLang's radix cache (``--engine sglang``), over the workload's prompt-block hashes.

Model (SGLang 0.5.4 ``srt/mem_cache/radix_cache.py`` ``RadixCache``; ``srt/managers/
schedule_batch.py``, ``scheduler_output_processor_mixin.py``):

- SGLang keeps a token-level tree of cached KV: ``match_prefix`` walks it on admission,
  ``inc_lock_ref``/``dec_lock_ref`` lock a running request's path (the node and every
  ancestor), and ``evict`` frees unlocked **leaves**, least recently accessed first
  (``radix_eviction_policy`` ``lru``); a leaf's parent becomes evictable when its last child
  goes. Every node on a matched or inserted path gets the current access time.
- Our workloads carry no tokens, only ids of ``entry_tokens``-token prompt blocks, each chained
  to its parent (equal id = equal prefix; ``workload/prefixes.py``, Mooncake's ``hash_ids``).
  So the tree here is a tree whose edges are hash entries: a node is an entry id, its parent
  the id before it in any prompt that holds it (chained ids make that parent unique). A hit is
  therefore a whole number of entries (16 tokens for synthetic and session hashes, 512 for
  Mooncake), where SGLang's page of 1 token matches to the token: two prompts sharing 100
  tokens share 96 here. Partial-entry matches cannot be expressed with hashes.
- The reference counts of ``PrefixCache`` are SGLang's lock refs: a running request references
  every entry of its path from the root, so an entry with a reference is locked and so are its
  ancestors. Unreferenced entries stay cached and count as free pool blocks (SGLang counts
  ``evictable_size`` as free for admission) until evicted.
- What differs from vLLM's cache (``prefixcache.py``): eviction takes only leaves (an entry
  with no cached child), by last access, not the order entries were freed; an access stamp is a
  counter the cache owns (not time), bumped on a hit (``acquire``), an insert (``insert``)
  and a finished request's insert of its sequence (``release(touch=True)``); a retracted
  request's lock is dropped without an insert (``release_kv_cache(..., is_insert=False)``), so
  its prefix keeps its old stamp.

A request that computed an entry another request inserted meanwhile (two prompts with a new
common prefix in one prefill round) adopts the tree's entry and frees its copy on insert, as
SGLang's ``cache_unfinished_req`` does. Windowed and linear-attention pools and KV tiers have no
radix cache here.
"""

from __future__ import annotations

import heapq

from inferplan.memory.prefixcache import PrefixCache


class RadixCache(PrefixCache):
    """A ``PrefixCache`` whose entries form SGLang's tree: leaf-only LRU eviction."""

    def __init__(self, hashes: tuple[tuple[int, ...], ...], entry_blocks: int) -> None:
        super().__init__(hashes, entry_blocks)
        self.parent: dict[int, int | None] = {}  # cached entry -> the entry before it
        self.children: dict[int, int] = {}  # cached entry -> its cached children
        self.stamp: dict[int, int] = {}  # cached entry -> its last access (a counter)
        self.clock = 0
        # Unreferenced leaves as (stamp, entry), oldest first; stale items are skipped on pop.
        self.leaves: list[tuple[int, int]] = []

    def _touch(self, entries: list[int] | tuple[int, ...]) -> None:
        """Entries on an accessed path get the next stamps, root first (SGLang gives a path
        one time; leaves go first anyway, so the order within a path does not matter)."""
        for h in entries:
            self.clock += 1
            self.stamp[h] = self.clock
            if self.refs[h] == 0 and not self.children[h]:
                heapq.heappush(self.leaves, (self.clock, h))

    def acquire(self, rid: int, entries: int) -> int:
        taken = super().acquire(rid, entries)
        self._touch(self.hashes[rid][:entries])
        return taken

    def register(self, rid: int, entries: int) -> None:
        raise NotImplementedError("RadixCache.insert: it returns the duplicate blocks freed")

    def insert(self, rid: int, entries: int) -> int:
        """``rid`` has computed its first ``entries`` prompt entries: insert them (new ones
        under their parent). An entry another request inserted meanwhile is adopted and the
        request's own copy freed, as SGLang's ``cache_unfinished_req`` does; returns the
        blocks that frees beyond the cached-free ones (the caller adds them to the pool)."""
        start = self.covered.get(rid, 0)
        entries = min(entries, len(self.hashes[rid]))
        if entries <= start:
            return 0
        chain, refs, freed = self.hashes[rid], self.refs, 0
        held = self.held.setdefault(rid, [])
        for i in range(start, entries):
            h = chain[i]
            count = refs.get(h)
            if count is None:  # a new node
                up = chain[i - 1] if i else None
                self.parent[h], self.children[h] = up, 0
                if up is not None:
                    self.children[up] += 1
            elif count == 0:  # cached-free: now locked; the copy freed is a free block again
                del self.lru[h]
                self.lru_blocks -= self.entry_blocks
            else:  # locked by others: shared, and the copy is freed
                self.shared_blocks += self.entry_blocks
                freed += self.entry_blocks
            refs[h] = (count or 0) + 1
            held.append(h)
        self.covered[rid] = entries
        self._touch(chain[start:entries])
        return freed

    def release(self, rid: int, *, touch: bool = False) -> int:
        """Drop ``rid``'s locks; ``touch``: it finished and inserts its sequence (its path is
        accessed now). Unreferenced leaves become evictable."""
        held = list(self.held.get(rid, ()))
        path = self.hashes[rid][: self.covered.get(rid, 0)]
        kept = super().release(rid)
        if touch:
            self._touch(path)
        for h in held:
            if self.refs[h] == 0 and not self.children[h]:
                heapq.heappush(self.leaves, (self.stamp[h], h))
        return kept

    def hit_keys(self, rid: int, entries: int) -> set[int]:
        """None: evicting an unreferenced entry of a hit shrinks the hit and the blocks locking
        it would take by the same amount, so SGLang's admission test does not change (the
        stretch need not stop there; ``stretch.py``)."""
        return set()

    def evict_to(self, free_blocks: int) -> None:
        """Evict the least recently accessed unreferenced leaves until the cached-free blocks
        fit in ``free_blocks`` (SGLang ``RadixCache.evict``)."""
        while self.lru_blocks > free_blocks:
            stamp, h = heapq.heappop(self.leaves)
            if h not in self.lru or self.children[h] or self.stamp[h] != stamp:
                continue  # referenced again, grew a child, or touched since it was pushed
            del self.lru[h], self.refs[h], self.stamp[h], self.children[h]
            self.lru_blocks -= self.entry_blocks
            up = self.parent.pop(h)
            if up is not None:
                self.children[up] -= 1
                if not self.children[up] and self.refs[up] == 0:
                    heapq.heappush(self.leaves, (self.stamp[up], up))

    def check(self) -> None:
        super().check()
        assert set(self.parent) == set(self.refs) == set(self.children) == set(self.stamp)
        counts: dict[int, int] = dict.fromkeys(self.refs, 0)
        for up in self.parent.values():
            if up is not None:
                assert up in self.refs, "a cached entry's parent was evicted"
                counts[up] += 1
        assert counts == self.children, "child counts drifted"
