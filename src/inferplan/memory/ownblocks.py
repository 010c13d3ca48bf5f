"""vLLM v1's prefix cache over blocks that no two requests share, in counts instead of hashes.

A workload without prompt hashes (distinct prompts) still meets vLLM v1's prefix cache: every
full block a request computes, prompt and output, is hashed and cached, and a preempted
request's freed blocks keep their hashes until evicted, so it re-hits them when it is admitted
again (``workload/prefixes.py`` ``with_own_blocks``). ``PrefixCache`` (``prefixcache.py``)
models that with one hash per block: a reference count per hash, a trie-like walk per lookup, one
LRU item per freed block; every request pays for its blocks at each chunk, release and eviction.

Here nothing is shared, so only the owner can ever hit a block, and only after it freed it. The
same cache is therefore kept as counts:

- a running request's computed entries (``held``: how many of its first entries it has
  computed; nothing to look up while it runs);
- the LRU list as *runs*, one per release (request id -> entries still cached), in the order
  they were freed. ``PrefixCache.release`` appends a request's entries tail first, and eviction
  takes the list's front, so what is left of a run is always its first entries: the run's
  count is the owner's hit. Evicting ``x`` blocks drops ``ceil(x / entry_blocks)`` entries from
  the front runs in one step per run.

A request's run leaves the list whole when it is admitted again (its hit is every entry still
cached: it froze at most ``(tokens - 1) // entry_tokens`` entries, the cap of a lookup). Lookups,
admissions and releases are O(1), evictions O(1) per run they reach. Outputs equal
``PrefixCache``'s on the same workload with one hash per block
(``tests/memory/test_own_blocks_cache.py``, ``tests/engine/test_own_blocks_equal.py``).
Full-attention pools only: a windowed pool's parts move within the list on a hit
(``prefixcache.py``), which runs do not express, so those keep ``PrefixCache``.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from inferplan.memory.prefixcache import PrefixCache

PENDING_ENTRIES = 1 << 12  # evicted entries counted before they are dropped from the runs


class OwnBlocks(PrefixCache):
    """``PrefixCache``'s verbs where request ``i``'s ``num_entries[i]`` entries are its own."""

    # ``Scheduler._cache_chunks`` registers prompt entries as chunks run; here a release
    # registers what the request computed (``release_blocks``), which is the same count.
    caches_chunks = False

    def __init__(self, num_entries: npt.NDArray[np.int64], entry_blocks: int) -> None:
        super().__init__((), entry_blocks)
        self.num_entries: list[int] = num_entries.tolist()  # entries each request can fill
        self.covers_output = True  # own blocks cover prompt and output
        self.held: dict[int, int] = {}  # type: ignore[assignment]  # running: entries computed
        # Freed runs, least recently freed first: request id -> its first entries still cached
        # (``runs``), less the ``pending`` entries evicted from the front and not yet dropped.
        self._runs: OrderedDict[int, int] = OrderedDict()
        self.pending = 0

    def __reduce__(self) -> tuple[object, ...]:
        # As ``PrefixCache.__reduce__``, with this constructor's arguments.
        empty = np.zeros(0, dtype=np.int64)
        return (type(self), (empty, self.entry_blocks), self.__getstate__())

    @property
    def runs(self) -> OrderedDict[int, int]:
        """The freed runs, least recently freed first: request id -> its first entries still
        cached (the pending evictions dropped first)."""
        if self.pending:
            self._drop_pending()
        return self._runs

    def may_hold(self, rid: int) -> bool:
        """Whether ``rid`` may have entries cached (False: none, without dropping the pending
        evictions; True may be a run they empty)."""
        return rid in self._runs

    def _runs_for(self, rid: int) -> OrderedDict[int, int]:
        """The runs, the pending evictions dropped first where ``rid`` has a run (they may
        empty it, and it may leave the list's middle); else as kept, since the pending ones
        come off the front."""
        runs = self._runs
        if rid in runs and self.pending:
            self._drop_pending()
        return runs

    def lookup(self, rid: int, max_entries: int) -> tuple[int, int]:
        runs = self._runs
        if rid not in runs:  # no run: no hit (``_runs_for`` without its call)
            return 0, 0
        if self.pending:
            self._drop_pending()
        return min(runs.get(rid, 0), max_entries), 0  # nobody maps its blocks

    def acquire(self, rid: int, entries: int) -> int:
        runs = self._runs
        if rid in runs and self.pending:  # ``_runs_for`` without its call
            self._drop_pending()
        cached = runs.pop(rid, 0)
        # A lookup's cap is never below a run (module doc): a hit takes the whole run.
        assert entries == cached, "an own-block hit leaves part of its run cached"
        self.lru_blocks -= cached * self.entry_blocks
        self.held[rid] = entries
        return cached * self.entry_blocks

    def register(self, rid: int, entries: int) -> None:
        entries = min(entries, self.num_entries[rid])
        if entries > self.held.get(rid, 0):
            self.held[rid] = entries

    def release(self, rid: int) -> int:
        entries = self.held.pop(rid, 0)
        if entries:
            self._keep_run(rid, entries)
        return 0  # nothing is shared: every block goes back to the pool

    def release_computed(self, rid: int, entries: int) -> None:
        """``register(rid, entries)`` then ``release(rid)`` in one call (a finish's, once per
        request): its run is the larger of the entries it held and ``entries`` (capped at its
        own), appended at the back."""
        held = self.held.pop(rid, 0)
        entries = min(entries, self.num_entries[rid])
        if held > entries:
            entries = held
        if entries:
            self._keep_run(rid, entries)

    def _keep_run(self, rid: int, entries: int) -> None:
        """A freed request's first ``entries`` entries kept cached, as the newest run."""
        runs = self._runs_for(rid)
        assert rid not in runs, "a request freed twice"
        runs[rid] = entries  # at the back: the pending evictions take the front
        self.lru_blocks += entries * self.entry_blocks

    def hit_keys(self, rid: int, entries: int) -> set[int]:
        return {rid} if entries else set()  # its run: a hit is the whole run

    def blocks_before(self, keys: set[int], limit: int) -> int:
        """Blocks of the runs freed before the run of ``keys``, as ``PrefixCache`` counts
        them: whole entries until ``limit`` is reached."""
        total = 0
        for rid, entries in self.runs.items():
            if total >= limit or rid in keys:
                return total
            blocks = entries * self.entry_blocks
            if total + blocks >= limit:  # the first whole entry at or past ``limit``
                return total + -(-(limit - total) // self.entry_blocks) * self.entry_blocks
            total += blocks
        return total

    def evict_to(self, free_blocks: int) -> None:
        """Evict whole entries from the front runs, tail entries first, until the cached-free
        blocks fit in ``free_blocks``: counted at once (``lru_blocks``), dropped from the runs
        when something reads them (``pending``). Dropping ``x`` then ``y`` entries from the
        front is dropping ``x + y``: a release appends behind every pending entry, and a run
        leaves the list's middle (``acquire``) only after the pending ones are dropped."""
        excess = self.lru_blocks - free_blocks
        if excess > 0:
            size = self.entry_blocks
            drop = -(-excess // size)
            self.lru_blocks -= drop * size
            self.pending += drop
            if self.pending >= PENDING_ENTRIES:  # bounds the runs kept
                self._drop_pending()

    def _drop_pending(self) -> None:
        """Drop the pending evicted entries from the front runs."""
        runs, drop = self._runs, self.pending
        self.pending = 0
        while drop:
            rid, entries = next(iter(runs.items()))
            if drop >= entries:
                del runs[rid]
                drop -= entries
            else:
                runs[rid] = entries - drop
                drop = 0

    def check(self) -> None:
        assert all(entries > 0 for entries in self.runs.values()), "an empty run"
        assert self.lru_blocks == sum(self.runs.values()) * self.entry_blocks
        assert not set(self.runs) & set(self.held), "a running request's run is cached-free"
