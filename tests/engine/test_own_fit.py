"""With own blocks the queue head's admission answer survives the decode's eviction (branch
``near7``, issue 10): the head's hit is its own run alone, so an eviction that leaves that run
whole leaves the answer true and the waiting pass takes it with the new cached-free count
(``implicit_step._decode_evicting``); one that trims the run keeps the old count, and the pass
asks the admission test again."""

from __future__ import annotations

import numpy as np

from inferplan.engine.implicit_step import _decode_evicting
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool
from inferplan.memory.ownblocks import OwnBlocks


def _pool(runs: list[tuple[int, int]], free: int) -> tuple[BlockPool, OwnBlocks]:
    """A pool of 100 blocks whose cached-free list holds ``runs`` (id, entries of one block),
    least recently freed first, with ``free`` blocks free."""
    pool = BlockPool(100, 16, FULL_ATTENTION)
    cache = OwnBlocks(np.full(10, 20, dtype=np.int64), 1)
    pool.cache = cache
    for rid, entries in runs:
        cache.register(rid, entries)
        cache.release(rid)
    pool.free_blocks = free
    return pool, cache


def _fit(rid: int, lru_blocks: int) -> tuple[int, int, int, int, int, int, int]:
    # rid, tokens, budget, available blocks, cached-free blocks, chunk, hit
    return rid, 300, 500, 40, lru_blocks, 300, 0


def test_a_head_without_a_run_keeps_its_answer_with_the_new_count() -> None:
    pool, cache = _pool([(0, 6), (1, 6)], free=50)
    fit = _decode_evicting(pool, cache, 40, _fit(5, 12))  # 10 free: two entries evicted
    assert pool.free_blocks == 10 and cache.lru_blocks == 10
    assert fit == _fit(5, 10)


def test_a_head_whose_run_is_left_whole_keeps_its_answer() -> None:
    pool, cache = _pool([(0, 6), (1, 6)], free=50)
    fit = _decode_evicting(pool, cache, 41, _fit(1, 12))  # three entries of run 0
    assert cache.runs == {0: 3, 1: 6}
    assert fit == _fit(1, 9)


def test_a_head_whose_run_is_trimmed_is_asked_again() -> None:
    pool, cache = _pool([(1, 6), (0, 6)], free=50)  # the head's run is the oldest
    fit = _decode_evicting(pool, cache, 41, _fit(1, 12))
    assert cache.runs == {1: 3, 0: 6}
    assert fit == _fit(1, 12)  # the old count: ``admit_waiting`` asks the test again
