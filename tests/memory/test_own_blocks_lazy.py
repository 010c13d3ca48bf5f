"""``OwnBlocks`` evicts lazily (branch ``near7``, issue 10): an eviction counts the entries it
drops at once (``lru_blocks``) and drops them from the front runs only when something reads the
runs. Against the eager list (each eviction walking the runs at its call), the same runs and
counts after any sequence of releases, evictions, lookups and hits."""

from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np
import pytest

from inferplan.memory import ownblocks
from inferplan.memory.ownblocks import OwnBlocks


class _Eager:
    """The list as it was kept before: every eviction drops its entries from the front runs
    (least recently freed first) at its call."""

    def __init__(self, entry_blocks: int) -> None:
        self.entry_blocks = entry_blocks
        self.runs: OrderedDict[int, int] = OrderedDict()
        self.lru_blocks = 0

    def evict_to(self, free_blocks: int) -> None:
        while self.lru_blocks > free_blocks:
            rid, entries = next(iter(self.runs.items()))
            drop = min(entries, -(-(self.lru_blocks - free_blocks) // self.entry_blocks))
            if drop == entries:
                del self.runs[rid]
            else:
                self.runs[rid] = entries - drop
            self.lru_blocks -= drop * self.entry_blocks


def _run(seed: int, entry_blocks: int) -> None:
    rng = random.Random(seed)
    num = 60
    cache = OwnBlocks(np.full(num, 40, dtype=np.int64), entry_blocks)
    eager = _Eager(entry_blocks)
    held: set[int] = set()
    for _ in range(400):
        op = rng.random()
        if op < 0.3 and len(held) < num:  # a request computes entries (it runs)
            rid = rng.choice([r for r in range(num) if r not in held])
            hit = eager.runs.get(rid, 0)
            if rng.random() < 0.5:  # a hit taken with or without a lookup first
                assert cache.lookup(rid, 40) == (hit, 0)
            cache.acquire(rid, hit)
            eager.lru_blocks -= eager.runs.pop(rid, 0) * entry_blocks
            cache.register(rid, hit + rng.randint(0, 12))
            held.add(rid)
        elif op < 0.55 and held:  # it is freed: its entries go to the back of the list
            rid = rng.choice(sorted(held))
            entries = cache.held.get(rid, 0)
            cache.release(rid)
            held.discard(rid)
            if entries:
                eager.runs[rid] = entries
                eager.lru_blocks += entries * entry_blocks
        else:  # the free pool shrinks: evict what no longer fits
            free = max(cache.lru_blocks - rng.randint(0, 9 * entry_blocks), 0)
            cache.evict_to(free)
            eager.evict_to(free)
        assert cache.lru_blocks == eager.lru_blocks
        if rng.random() < 0.1:
            assert cache.runs == eager.runs  # reading the runs drops the pending entries
    assert cache.runs == eager.runs
    cache.check()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("entry_blocks", [1, 3])
def test_lazy_evictions_leave_the_eager_lists_runs(
    seed: int, entry_blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(seed, entry_blocks)
    monkeypatch.setattr(ownblocks, "PENDING_ENTRIES", 5)  # dropped often, between reads
    _run(seed, entry_blocks)


def test_eviction_takes_the_least_recently_freed_runs_tail_first() -> None:
    cache = OwnBlocks(np.full(3, 10, dtype=np.int64), 1)
    for rid, entries in ((0, 4), (1, 3), (2, 5)):
        cache.register(rid, entries)
        cache.release(rid)
    cache.evict_to(12 - 6)  # six entries: run 0 whole, two of run 1's tail
    assert cache.lru_blocks == 6 and cache.pending == 6  # counted, not dropped yet
    assert cache.lookup(1, 10) == (1, 0)  # the owner's hit: its first entry is left
    assert cache.runs == OrderedDict([(1, 1), (2, 5)])
    assert cache.lookup(0, 10) == (0, 0) and not cache.may_hold(0)


@pytest.mark.parametrize("seed", range(4))
def test_release_computed_is_register_then_release(seed: int) -> None:
    """A finish's ``release_computed`` (branch ``vidur18``) leaves the same runs, held entries
    and counts as ``register`` then ``release``, whether the computed entries exceed what the
    request held, fall short of it, or pass its own count (capped), with evictions pending."""
    rng = random.Random(seed)
    num = 40
    counts = np.array([rng.randint(0, 6) for _ in range(num)], dtype=np.int64)
    fused, split = OwnBlocks(counts, 2), OwnBlocks(counts, 2)
    for rid in range(num):
        held = rng.randint(0, int(counts[rid]))
        for cache in (fused, split):
            cache.register(rid, held)
    for rid in rng.sample(range(num), num):
        computed = rng.randint(0, 8)
        fused.release_computed(rid, computed)
        split.register(rid, computed)
        split.release(rid)
        free = rng.randint(0, 40)
        for cache in (fused, split):
            cache.evict_to(free)
    assert list(fused.runs.items()) == list(split.runs.items())
    assert fused.lru_blocks == split.lru_blocks and fused.held == split.held == {}
