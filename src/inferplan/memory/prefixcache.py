"""Automatic prefix caching of full prompt blocks, as vLLM v1 does it.

Model (vLLM v1 ``v1/core/kv_cache_manager.py``, ``block_pool.py``, ``kv_cache_utils.py``):

- A full block of a prompt has a hash that chains its parent's, so equal hashes mean equal
  prefixes. Here the hashes come from the workload (Mooncake's ``hash_ids``, one per
  ``entry_tokens``-token block, remapped so that equal ids are equal prefixes). An entry is
  ``entry_tokens // block_size`` pool blocks; only full entries are cached.
- On admission the request's longest run of cached entries from its first is reused
  (``lookup``); the hit is capped so that at least one token is computed (vLLM recomputes the
  last token of a fully cached prompt to get its logits). Reused entries are reference-counted.
- Entries become cached when the step that computes them is scheduled (vLLM caches full blocks
  in ``allocate_slots``); an entry already cached by another request is not cached twice (the
  request keeps its own copy privately).
- Freed entries keep their hashes and join an LRU free list (tail blocks of a request first, as
  vLLM frees in reverse order), and count as free pool blocks; one is evicted (its hash dropped)
  only when the pool needs the block: ``BlockPool.free`` never falls below the cached-free
  blocks. A preempted request's entries therefore often hit when it is admitted again.

Accounting: a running row's ``held_blocks`` counts every block its sequence maps, shared ones
included; ``shared_blocks`` is how many of those are mapped a second (third...) time, so the
pool's used blocks are ``sum(held) - shared_blocks`` and
``uncached free + cached free + used == num_blocks``.

Simplifications: only pools of full-attention layers cache (vLLM's hybrid manager also caches
sliding-window groups); hashes cover the prompt only, not generated tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class PrefixCache:
    """Cached prompt entries (hash -> reference count) and the LRU list of unreferenced ones."""

    def __init__(self, hashes: tuple[tuple[int, ...], ...], entry_blocks: int) -> None:
        self.hashes = hashes  # per request: its prompt's entry hashes
        self.entry_blocks = entry_blocks  # pool blocks per entry
        self.refs: dict[int, int] = {}  # cached hash -> running requests mapping it
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced cached hashes, oldest first
        self.lru_blocks = 0
        self.shared_blocks = 0
        # Per running request: the hashes it references, in prompt order.
        self.held: dict[int, list[int]] = {}
        self.covered: dict[int, int] = {}  # per request: prompt entries already considered
        # Called with each evicted hash (KV tiers keep a copy: ``engine/offload.py``).
        self.on_evict: Callable[[int], None] | None = None

    def lookup(self, rid: int, max_entries: int) -> tuple[int, int]:
        """(entries of ``rid``'s prompt cached from the first, at most ``max_entries``; of
        those, the blocks other running requests map, which admission does not allocate)."""
        hits = shared = 0
        refs = self.refs
        for h in self.hashes[rid][:max_entries]:
            count = refs.get(h)
            if count is None:
                break
            hits += 1
            shared += count > 0
        return hits, shared * self.entry_blocks

    def acquire(self, rid: int, entries: int) -> int:
        """Map ``rid``'s first ``entries`` cached entries; the cached-free blocks this takes
        out of the free pool (the caller subtracts them from ``BlockPool.free``)."""
        taken = 0
        held = self.held.setdefault(rid, [])
        for h in self.hashes[rid][:entries]:
            count = self.refs[h]
            if count == 0:
                del self.lru[h]
                self.lru_blocks -= self.entry_blocks
                taken += self.entry_blocks
            else:
                self.shared_blocks += self.entry_blocks
            self.refs[h] = count + 1
            held.append(h)
        self.covered[rid] = entries
        return taken

    def register(self, rid: int, entries: int) -> None:
        """``rid`` computes its first ``entries`` prompt entries: cache those not yet cached."""
        start = self.covered.get(rid, 0)
        if entries <= start:
            return
        held = self.held.setdefault(rid, [])
        for h in self.hashes[rid][start:entries]:
            if h not in self.refs:
                self.refs[h] = 1
                held.append(h)
        self.covered[rid] = entries

    def release(self, rid: int) -> int:
        """``rid`` frees its blocks: its entries lose a reference, unreferenced ones join the
        LRU list (tail first). Returns the blocks other requests still map (not freed)."""
        self.covered.pop(rid, None)
        held = self.held.pop(rid, None)
        if not held:
            return 0
        kept = 0
        for h in reversed(held):
            count = self.refs[h] - 1
            self.refs[h] = count
            if count:
                kept += self.entry_blocks
            else:
                self.lru[h] = None
                self.lru_blocks += self.entry_blocks
        self.shared_blocks -= kept
        return kept

    def evict_to(self, free_blocks: int) -> None:
        """Drop the least recently freed entries until the cached-free blocks fit in
        ``free_blocks`` (the pool has handed the rest out)."""
        while self.lru_blocks > free_blocks:
            h, _ = self.lru.popitem(last=False)
            del self.refs[h]
            self.lru_blocks -= self.entry_blocks
            if self.on_evict is not None:
                self.on_evict(h)

    def check(self) -> None:
        assert all(c >= 0 for c in self.refs.values()), "negative reference count"
        assert all(self.refs[h] == 0 for h in self.lru), "a referenced entry is on the LRU list"
        assert self.lru_blocks == len(self.lru) * self.entry_blocks
        assert sum(self.refs.values()) == sum(len(v) for v in self.held.values())
        assert self.shared_blocks == self.entry_blocks * sum(
            c - 1 for c in self.refs.values() if c > 1
        )
