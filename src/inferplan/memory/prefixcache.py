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

Sliding-window layers (vLLM's hybrid manager, ``v1/core/kv_cache_coordinator.py``
``HybridKVCacheCoordinator``, ``single_type_kv_cache_manager.py``
``SlidingWindowManager.find_longest_cache_hit``): a windowed layer's KV cannot be recomputed for
part of a prefix alone (its input depends on every earlier token through the layers below), so a
hit needs the full-attention blocks of the whole prefix *and* the windowed blocks of its last
window, ``ceil((window - 1) / entry_tokens)`` entries (fewer when the prefix is shorter); the
hit is the longest prefix of cached full parts that ends such a run, searched from the right as
vLLM does. Here an entry has a *full part* (``entry_blocks``: the full-attention groups' pool
blocks, reference-counted as above) and a *windowed part* (``window_entry_blocks``). Windowed
parts carry no reference counts: a part is cached from the step that computes it (vLLM frees
windowed blocks as they leave the window, hashes kept) until evicted, sits on the same LRU list
as the full parts, and a hit moves the parts it used to the list's end. A request always
allocates its own windowed blocks (the pool's ``blocks_for``), so a windowed part still inside a
running request's window is counted both as held and as cached-free: eviction comes a little
earlier than in vLLM, and a request hitting another running request's window allocates at most
one window of blocks that vLLM would share. The window is taken from ``KvGroup.max_blocks``
(``(max_blocks - 1) * block_size`` tokens, at most one block more than the real window).

Generated tokens (``covers_output``: session traces, whose hashes go on past the prompt): vLLM
v1 hashes a generated block once it is full and caches it, so a conversation's next turn hits
the previous turn's prompt + output, and a resume after preemption hits its own generated
blocks (its hit is capped at ``num_tokens - 1``). Here a request's computed entries past those
already registered are registered when it frees its blocks (finish or preemption), so the only
difference is that a turn looked up while its predecessor still decodes sees the predecessor's
prompt entries, not the output entries filled so far. Other workloads' hashes cover the prompt
only. Pools of windowed layers only (no full-attention group) do not cache.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferplan.memory.blockpool import KvGroup


def regroup_hashes(
    hashes: tuple[tuple[int, ...], ...], entry_tokens: int, block_size: int
) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Prompt hashes of ``entry_tokens``-token blocks as hashes of entries that are whole KV
    blocks: ``lcm(entry_tokens, block_size)`` tokens, each the id of its last block (a chained
    id stands for its whole prefix), only full entries kept. Returns (hashes, entry tokens)."""
    unit = math.lcm(entry_tokens, block_size)
    step = unit // entry_tokens
    if step == 1:
        return hashes, unit
    return tuple(h[step - 1 :: step] for h in hashes), unit


def windowed_prefix_cache(
    hashes: tuple[tuple[int, ...], ...],
    entry_tokens: int,
    block_size: int,
    groups: tuple[KvGroup, ...],
) -> PrefixCache | None:
    """The prefix cache of a pool mixing full-attention and sliding-window groups (None
    without a full-attention group): full parts cost the full groups' pool blocks, windowed
    parts the windowed groups'; a hit needs the widest window's last entries."""
    kv_blocks = entry_tokens // block_size
    full = sum(g.cost for g in groups if g.max_blocks is None)
    windowed = [g for g in groups if g.max_blocks is not None]
    if not full:
        return None
    window_tokens = max((g.max_blocks or 1) - 1 for g in windowed) * block_size
    return PrefixCache(
        hashes,
        kv_blocks * full,
        window_entry_blocks=kv_blocks * sum(g.cost for g in windowed),
        window_entries=-(-(window_tokens - 1) // entry_tokens),
        entry_kv_blocks=kv_blocks,
    )


class PrefixCache:
    """Cached prompt entries (hash -> reference count) and the LRU list of unreferenced ones."""

    # The scheduler registers the prompt entries each step's chunks complete (``ownblocks.py``:
    # entries nobody shares need none until their request frees them).
    caches_chunks = True

    def __init__(
        self,
        hashes: tuple[tuple[int, ...], ...],
        entry_blocks: int,
        window_entry_blocks: int = 0,
        window_entries: int | None = None,
        entry_kv_blocks: int | None = None,
    ) -> None:
        self.hashes = hashes  # per request: its prompt's entry hashes
        self.entry_blocks = entry_blocks  # pool blocks per entry (full-attention part)
        # KV blocks (``block_size`` tokens) per entry; pool blocks only with full attention alone.
        self.entry_kv_blocks = entry_blocks if entry_kv_blocks is None else entry_kv_blocks
        # Sliding-window layers (None: none): pool blocks of an entry's windowed part, and the
        # entries of windowed parts a hit needs before its end.
        self.window_entry_blocks = window_entry_blocks
        self.window_entries = window_entries
        self.refs: dict[int, int] = {}  # cached hash -> running requests mapping it
        # Totals over admissions (resumes included): tokens hit, and prompt tokens looked up.
        self.cached_tokens = 0
        self.queried_tokens = 0
        # Unreferenced cached full parts (key: hash) and cached windowed parts (key: -1 - hash),
        # least recently used first.
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.lru_blocks = 0
        self.shared_blocks = 0
        # Per running request: the hashes it references, in prompt order.
        self.held: dict[int, list[int]] = {}
        self.covered: dict[int, int] = {}  # per request: prompt entries already considered
        # Called with each evicted hash (KV tiers keep a copy: ``engine/offload.py``).
        self.on_evict: Callable[[int], None] | None = None
        # The hashes go on past the prompt over the output's full blocks (session traces):
        # the engine registers those when the request frees its blocks (module doc).
        self.covers_output = False

    def __reduce__(self) -> tuple[object, ...]:
        # ``engine/apart.py``'s workers send caches back; compiled with mypyc (``native.py``),
        # an instance unpickles only through its constructor, then takes its state.
        return (type(self), ((), self.entry_blocks), self.__getstate__())

    def lookup(self, rid: int, max_entries: int) -> tuple[int, int]:
        """(entries of ``rid``'s prompt cached from the first, at most ``max_entries``; of
        those, the blocks other running requests map, which admission does not allocate)."""
        hits = 0
        refs = self.refs
        mapped: list[bool] = []
        for h in self.hashes[rid][:max_entries]:
            count = refs.get(h)
            if count is None:
                break
            hits += 1
            mapped.append(count > 0)
        if self.window_entries is not None and hits:
            hits = self._window_hit(self.hashes[rid], hits)
        return hits, sum(mapped[:hits]) * self.entry_blocks

    def _window_hit(self, hashes: tuple[int, ...], hits: int) -> int:
        """The longest hit <= ``hits`` entries whose last ``window_entries`` windowed parts are
        cached (all of them, for a hit shorter than that), searched from the right."""
        need = self.window_entries
        assert need is not None
        if need == 0:
            return hits
        lru, run = self.lru, 0
        for i in range(hits - 1, -1, -1):
            if -1 - hashes[i] in lru:
                run += 1
                if run == need:
                    return i + need
            else:
                run = 0
        return run

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
        if self.window_entries is not None:  # the windowed parts the hit used: recently used
            for h in self.hashes[rid][max(0, entries - self.window_entries) : entries]:
                self.lru.move_to_end(-1 - h)
        return taken

    def register(self, rid: int, entries: int) -> None:
        """``rid`` computes its first ``entries`` prompt entries: cache those not yet cached."""
        start = self.covered.get(rid, 0)
        if entries <= start:
            return
        held = self.held.setdefault(rid, [])
        windowed = self.window_entries is not None
        for h in self.hashes[rid][start:entries]:
            if h not in self.refs:
                self.refs[h] = 1
                held.append(h)
            if windowed:  # the request computed this windowed part: cached (or used) now
                key = -1 - h
                if key in self.lru:
                    self.lru.move_to_end(key)
                else:
                    self.lru[key] = None
                    self.lru_blocks += self.window_entry_blocks
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

    def hit_keys(self, rid: int, entries: int) -> set[int]:
        """The LRU keys a hit of ``rid``'s first ``entries`` entries uses: its unreferenced
        full parts and its last window's windowed parts. Evicting any of them shrinks it."""
        hashes = self.hashes[rid][:entries]
        keys = {h for h in hashes if self.refs.get(h) == 0}
        if self.window_entries:
            keys.update(-1 - h for h in hashes[max(0, entries - self.window_entries) :])
        return keys

    def blocks_before(self, keys: set[int], limit: int) -> int:
        """Cached-free blocks on the LRU list older than the oldest of ``keys`` (eviction
        takes them first), counted up to ``limit`` (the caller needs no more)."""
        total = 0
        for key in self.lru:
            if total >= limit or key in keys:
                break
            total += self.window_entry_blocks if key < 0 else self.entry_blocks
        return total

    def evict_to(self, free_blocks: int) -> None:
        """Drop the least recently freed entries until the cached-free blocks fit in
        ``free_blocks`` (the pool has handed the rest out)."""
        while self.lru_blocks > free_blocks:
            h, _ = self.lru.popitem(last=False)
            if h < 0:  # a windowed part
                self.lru_blocks -= self.window_entry_blocks
                continue
            del self.refs[h]
            self.lru_blocks -= self.entry_blocks
            if self.on_evict is not None:
                self.on_evict(h)

    def check(self) -> None:
        assert all(c >= 0 for c in self.refs.values()), "negative reference count"
        full = [h for h in self.lru if h >= 0]
        assert all(self.refs[h] == 0 for h in full), "a referenced entry is on the LRU list"
        windowed = len(self.lru) - len(full)
        assert self.lru_blocks == len(full) * self.entry_blocks + windowed * (
            self.window_entry_blocks
        )
        assert sum(self.refs.values()) == sum(len(v) for v in self.held.values())
        assert self.shared_blocks == self.entry_blocks * sum(
            c - 1 for c in self.refs.values() if c > 1
        )


def replica_hits_json(caches: list[PrefixCache | None]) -> list[dict[str, int | float | None]]:
    """Per replica (in index order): tokens its prefix cache supplied and its hit rate (cached
    over looked-up tokens, vLLM's definition)."""
    out: list[dict[str, int | float | None]] = []
    for cache in caches:
        cached = 0 if cache is None else cache.cached_tokens
        queried = 0 if cache is None else cache.queried_tokens
        out.append({"cached_tokens": cached, "hit_rate": cached / queried if queried else None})
    return out
