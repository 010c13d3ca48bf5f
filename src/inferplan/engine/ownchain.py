"""The LRU list of own blocks (``memory/ownblocks.py``) along a chain (``engine/chain.py``).

A chain of stretches and tail preemptions leaves the prefix cache untouched until it commits;
with own blocks the cache's state along the chain is a few counts, kept here as the stepwise
path (``engine/ownsteps.py``, ``engine/ownstretch.py``) would leave it:

- The list is the cache's runs at the chain's start followed by the victims' runs in the order
  they were popped; evictions take whole entries from its front, so its state is one count of
  evicted entries (``evicted``), and the cached-free blocks (``lru_blocks``).
- A preemption step's running pass takes the whole free pool before each victim is popped
  (every cached-free block is evicted), the victim's computed entries join the list's end, and
  after the last victim the step's crossings come out of the free pool (evicting to it). A
  stretch only lowers the free pool, so evicting to its end gives what each step gives.
- The queue head after a preemption step is the last victim, whose run is the list's last.

``commit`` appends the victims' runs to the cache and evicts the counted entries from the
front, which leaves the list the stepwise path leaves (front eviction of a queue takes the
same entries whatever the interleaving with appends).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferplan.engine.ownstretch import _entries_before
from inferplan.memory.ownblocks import OwnBlocks

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica


class OwnLru:
    """The own-block cache's LRU list along a chain (module doc)."""

    def __init__(self, r: Replica) -> None:
        cache = r.pool.cache
        assert isinstance(cache, OwnBlocks)
        self.cache, self.entry_blocks = cache, cache.entry_blocks
        self.entry_tokens = cache.entry_blocks * r.pool.block_size
        self.lru_blocks = cache.lru_blocks
        self.appended = cache.lru_blocks // cache.entry_blocks  # entries on the list so far
        self.evicted = 0  # entries evicted from its front
        self.victims: list[tuple[int, int]] = []  # id, computed tokens
        self.runs: dict[int, tuple[int, int]] = {}  # victim -> entries before its run, its entries

    def evict_to(self, free_blocks: int) -> None:
        if self.lru_blocks > free_blocks:
            drop = -(-(self.lru_blocks - free_blocks) // self.entry_blocks)
            self.evicted += drop
            self.lru_blocks -= drop * self.entry_blocks

    def preempt(self, rid: int, computed: int) -> None:
        """A victim popped by a preemption step (``Scheduler.preempt``'s release)."""
        self.evict_to(0)  # the running pass took the whole free pool first
        cache = self.cache
        entries = min(computed // self.entry_tokens, cache.num_entries[rid])
        entries = max(entries, cache.held.get(rid, 0))
        self.victims.append((rid, computed))
        self.runs[rid] = (self.appended, entries)
        self.appended += entries
        self.lru_blocks += entries * self.entry_blocks

    def head_run(self, rid: int) -> tuple[int, int | None]:
        """Request ``rid``'s run: its entries still cached, and the entries before it on the
        list (None: not known without walking the cache's list, where the chain's evictions
        stop short of the run)."""
        if rid in self.runs:  # a victim of this chain (the last one, under FCFS)
            at, entries = self.runs[rid]
            lost = min(max(self.evicted - at, 0), entries)
            return entries - lost, max(at - self.evicted, 0)
        run = self.cache.runs.get(rid, 0)
        if not run or not self.evicted:
            return run, None
        before = _entries_before(self.cache, rid, self.evicted)
        if before is None:
            return run, None  # the evictions so far stop short of it
        return run - min(self.evicted - before, run), 0

    def entries_before(self, rid: int, known: int | None, limit: int) -> int | None:
        """``ownstretch.steps_before_head_joins``' entries before the head's run (None:
        evicting ``limit`` more entries stops short of it)."""
        if known is not None:
            return None if known >= limit else known
        before = _entries_before(self.cache, rid, limit + self.evicted)
        return None if before is None else before - self.evicted

    def commit(self) -> None:
        """Write the chain into the cache: the victims' runs, then the evictions."""
        cache = self.cache
        for rid, computed in self.victims:
            cache.register(rid, computed // self.entry_tokens)
            cache.release(rid)
        cache.evict_to(self.lru_blocks)
        assert cache.lru_blocks == self.lru_blocks
