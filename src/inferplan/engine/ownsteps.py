"""The decode step that preempts, in vector form, where the prefix cache holds own blocks only.

``DecodeStretches.preempting_decode_step`` pops last-admitted victims in vector form, but with a
prefix cache it runs the scheduler's running pass one row at a time
(``Scheduler._schedule_running_with_preemption``), because the order of allocations and frees
decides which cached blocks are evicted. With own blocks (``memory/ownblocks.py``) in a pool
whose every crossing costs one block, that order has a closed form: the rows before the first
that cannot get its block take every free block (so every cached-free block is evicted), and
each later victim is popped when the free pool is empty again (the row being served needs one
block and none is left), so every run freed before it is evicted too; after the last victim the
survivors' blocks come out of what the victims freed. The step has the scheduler's victims
(``num_victims``, the running pass's count) and evictions; the survivors' decode runs as a
one-step stretch timed by the decode line (``stretch.py``), which equals the step plan's time
to rounding (``docs/simulator.md``: fast mode's times agree with exact mode's to 1e-9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.stretch import num_victims
from inferplan.memory.ownblocks import OwnBlocks

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica


def own_block_preemption_step(r: Replica) -> bool:
    """Run the preempting decode step (module doc); False, having done nothing, where the
    cache is not own blocks or the pool not one block per crossing."""
    pool, run = r.pool, r.running
    if type(pool.cache) is not OwnBlocks or not pool.is_uniform:
        return False
    # The running pass's new blocks per row; one at most, so the rows before the first that
    # cannot get its block take the free pool exactly.
    crossing = np.maximum(pool.blocks_for(run.num_computed + 1) - run.held_blocks, 0)
    victims = num_victims(crossing, run.held_blocks, pool.free)
    if victims == 0 or int(crossing.max()) > 1:
        return False
    allocated = 0  # blocks the surviving rows took before the last victim was popped
    for _ in range(victims):
        allocated += pool.free
        pool.free = 0  # the rows served so far took the rest: every cached-free block goes
        r.scheduler.preempt(len(run) - 1)
    # The blocks the survivors took before the last victim go back (what they evicted stays
    # evicted): the rest decode one token each as a one-step stretch, timed by its line, which
    # takes their crossings and evicts to the pool it leaves, as ``preempting_decode_step``.
    pool.free += allocated
    survivors = len(run)
    if survivors:
        context = int(run.num_computed.sum()) + survivors
        a, b, _ = r.model.decode_line(survivors, context)
        r.stretches.advance_decode(1, a, b, context)
    return True
