"""How far a pure-decode stretch may run while the prefix cache holds own blocks only.

With a prefix cache the stretch's new blocks may evict entries of the queue head's prefix hit,
and a smaller hit can let the head in (its chunk then ends earlier), so admission is not
monotone in the free pool (``DecodeStretches._steps_before_head_hit_shrinks`` ends a stretch
before any such eviction, and the crossing step runs alone). Above capacity with own blocks
(``memory/ownblocks.py``) that is every block crossing after a preemption: the last victim heads
the queue and its run is the LRU list's front. Own blocks have the head's hit in closed form
along the stretch, so the stretch runs on to the step that admits the head instead:

- The decoders' crossings take ``C(j)`` blocks by step ``j``: ``C(j) = n * (j // B) + #{rows
  whose first crossing step s_i <= j % B}``, ``s_i = (-computed_i) mod B + 1``.
- The free pool at step ``j`` is ``F0 - C(j)``, and it evicts ``ceil((L0 - F0 + C(j)) / e)``
  entries from the LRU list's front (``L0``: cached-free blocks, ``e``: blocks per entry); one
  eviction to a step's end gives what one per allocation gives.
- The head's hit is its run less what of it those evictions reach (capped as a lookup caps
  it), and its admission test at step ``j`` (``Scheduler.head_chunk``: the blocks of its hit
  plus first chunk against the step's free pool, after the running pass) is a function of
  ``C(j)`` alone. While the evictions stop short of the head's run, and once the run is gone,
  the hit is constant and the test only fails more as the pool shrinks; in between it is
  evaluated at every step, in one vector pass.

The schedule is the stepwise one (the same steps, no admission moved); the stretch's time is
the decode line's closed-form sum where the stepwise path summed stretches and single steps
timed by their step plans, so times agree to float tolerance, as fast mode agrees with exact
mode (``docs/simulator.md``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.schedulers import Scheduler
from inferplan.memory.ownblocks import OwnBlocks

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica

# Steps of the head's shrinking hit evaluated at once; a longer stretch ends after them, and
# the next stretch goes on.
MAX_EVALUATED_STEPS = 8192
# Fewer steps than this are evaluated one at a time in Python ints (a preemption chain's
# usual two to four in Vidur's trace), more in one vector pass: the same integers.
SCALAR_STEPS = 16


def own_block_stretch_steps(r: Replica, k: int) -> int | None:
    """Steps (at most ``k``) the stretch may run before the step whose waiting pass admits the
    queue head (module doc); None where the closed form does not apply."""
    pool, sched = r.pool, r.scheduler
    cache = pool.cache
    if type(cache) is not OwnBlocks or not pool.is_uniform or type(sched) is not Scheduler:
        return None
    if r.offload is not None or sched.admission is not None or r.swapped:
        return None
    if not len(r.waiting) or k <= 0:
        return k
    rid = r.waiting.peek()[0]
    run0 = cache.runs.get(rid, 0)
    return steps_before_head_joins(
        r,
        r.running.num_computed,
        k,
        (pool.free, cache.lru_blocks),
        (run0, lambda limit: _entries_before(cache, rid, limit)),
    )


def steps_before_head_joins(
    r: Replica,
    computed: np.ndarray,
    k: int,
    pool_state: tuple[int, int],
    head_run: tuple[int, Callable[[int], int | None]],
) -> int:
    """Steps (at most ``k``) before the step whose waiting pass admits the queue head, for
    decoding rows with ``computed`` tokens, ``pool_state`` (free blocks, cached-free blocks of
    them) and ``head_run`` (entries of the head's run, and a function giving the entries
    freed before it, or None when evicting the given number of entries stops short of it).
    Assumes the head cannot join at the stretch's start (``DecodeStretches.can_stretch``)."""
    cache = r.pool.cache
    assert isinstance(cache, OwnBlocks)
    run0, entries_before = head_run
    n, block, e = len(computed), r.pool.block_size, cache.entry_blocks
    leftover = r.cfg.max_num_batched_tokens - n
    if n >= r.cfg.max_num_seqs or leftover <= 0 or not run0 or n == 0:
        return k  # nothing is admitted, or the head's hit cannot shrink
    free0, lru0 = pool_state
    first_steps = (-computed) % block + 1
    # [u]: rows whose first crossing s_i <= u (Python ints: read a few times each)
    at_most: list[int] = np.bincount(first_steps, minlength=block + 1).cumsum().tolist()
    q, u = divmod(k, block)
    evicted_blocks = lru0 - free0 + n * q + at_most[u]  # by step k
    before = entries_before(-(-evicted_blocks // e))
    if before is None:
        return k  # the evictions of ``k`` steps stop short of the head's run
    # The first steps at which the head's run has lost an entry, and all of them.
    j_from = max(_first_step_with(e * before - lru0 + free0 + 1, n, block, at_most), 1)
    j_gone = _first_step_with(e * (before + run0 - 1) - lru0 + free0 + 1, n, block, at_most)
    j_to = min(j_gone, k, j_from + MAX_EVALUATED_STEPS)
    rid, tokens = r.waiting.peek()
    cap = r.scheduler.hbm_hit_entries(rid, tokens)[2]
    head = (run0, before, cap, tokens, leftover)
    if j_to - j_from < SCALAR_STEPS:  # a chain's usual few: numpy's calls would cost more
        steps = range(j_from, j_to + 1)
        first = _first_admitting(
            [1, *steps] if j_from > 1 else steps, pool_state, n, e, at_most, head
        )
    else:
        first = _first_admitting_vector(j_from, j_to, pool_state, n, e, at_most, head)
    if first is not None:
        return first - 1
    return j_to if j_to < min(j_gone, k) else k


def _first_admitting(
    steps: Sequence[int],
    pool_state: tuple[int, int],
    n: int,
    e: int,
    at_most: list[int],
    head: tuple[int, int, int, int, int],
) -> int | None:
    """The first of ``steps`` (ascending) whose waiting pass admits the queue head, or None:
    at step ``j`` the ``n`` rows' crossings ``C(j)`` leave ``free0 - C(j)`` blocks, which
    evict entries from the LRU list's front; the head's run (``head``: its entries, the
    entries freed before it, the lookup's cap, its tokens, the step's token budget) loses what
    of them passes ``before``, and its hit plus first chunk must fit the free blocks."""
    free0, lru0 = pool_state
    run0, before, cap, tokens, leftover = head
    block = len(at_most) - 1
    entry_tokens = e * block
    for j in steps:
        free = free0 - (n * (j // block) + at_most[j % block])
        evicted = max(lru0 - free + e - 1, 0) // e  # entries, from the list's front
        lost = evicted - before  # ``np.clip(lost, 0, run0)``
        lost = 0 if lost < 0 else run0 if lost > run0 else lost
        hit = min(run0 - lost, cap) * entry_tokens
        chunk_end = hit + min(tokens - hit, leftover)
        if -(-chunk_end // block) <= free:
            return j
    return None


def _first_admitting_vector(
    j_from: int,
    j_to: int,
    pool_state: tuple[int, int],
    n: int,
    e: int,
    at_most: list[int],
    head: tuple[int, int, int, int, int],
) -> int | None:
    """``_first_admitting`` of step 1 (where ``j_from > 1``) and steps ``j_from..j_to`` in
    one vector pass (the same integers)."""
    free0, lru0 = pool_state
    run0, before, cap, tokens, leftover = head
    block = len(at_most) - 1
    steps = np.arange(j_from, j_to + 1)
    if j_from > 1:
        steps = np.concatenate(([1], steps))
    free = free0 - (n * (steps // block) + np.array(at_most)[steps % block])
    evicted = np.maximum(lru0 - free + e - 1, 0) // e  # entries, from the list's front
    hit = np.minimum(run0 - np.clip(evicted - before, 0, run0), cap) * (e * block)
    chunk_end = hit + np.minimum(tokens - hit, leftover)
    admits = -(-chunk_end // block) <= free
    return int(steps[int(admits.argmax())]) if admits.any() else None


def _entries_before(cache: OwnBlocks, rid: int, limit: int) -> int | None:
    """Entries of the runs freed before ``rid``'s, or None when evicting ``limit`` entries
    from the front stops short of its run."""
    total = 0
    for key, entries in cache.runs.items():
        if key == rid:
            return total
        total += entries
        if total >= limit:
            return None
    return None


def _first_step_with(crossings: int, n: int, block: int, at_most: Sequence[int]) -> int:
    """The first decode step by which ``n`` rows have crossed ``crossings`` block boundaries
    in all (``at_most[u]``: rows whose first crossing is at step ``u`` or before,
    nondecreasing); 0 for none."""
    if crossings <= 0:
        return 0
    q, t = divmod(crossings - 1, n)
    return q * block + bisect_left(at_most, t + 1)  # ``np.searchsorted``'s left side
