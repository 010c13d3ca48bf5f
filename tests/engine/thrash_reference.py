"""One doomed-head cycle at a time: the reference ``engine/thrashrun.py``'s ``take_cycles`` is
checked against (it plans a pass's cycles in segments and must leave the same state, bit for
bit). Each call takes the next cycle if it is one and its last step (so every step) starts
before the simulation loop would take the arrival (``same_time_s``: the loop's tie rule), and
records what the exact path's steps record, one step at a time: the KV trace (blocks in use once
the step's blocks are allocated) and the clock; ITL samples at ``_Cycles.commit``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from inferplan.engine.thrash import _Cycles


def next_cycle(c: _Cycles, next_arrival_s: float, same_time_s: Callable[[float], float]) -> bool:
    """Take the cycles' next cycle, or leave them as they are and say False."""
    plan = c._plan()
    if plan is None:
        return False
    s, now, durations = c.num_steps, c.now, []
    for i in range(len(plan)):
        chunk = 0 if i == len(plan) - 1 else i + 1
        durations.append(c._step_s(chunk, c.context + c.n * (s + i)))
        if i < len(plan) - 1:
            now += durations[-1]
    if next_arrival_s <= now + same_time_s(now):
        return False
    r = c.r
    if c.num_cycles == 0 and math.isnan(r.records.first_scheduled_s[c.head]):
        r.records.first_scheduled_s[c.head] = c.now
    outside = r.cfg.num_blocks - c.usable  # blocks neither the decoders nor free hold
    for head_blocks, step_s in zip(plan, durations, strict=True):
        c.held += c._crossings(c.num_steps)
        r.trace.record(c.now, outside + c.held + head_blocks)
        c.now += step_s
        c.num_steps += 1
    c.durations.append(np.array(durations))
    c.num_cycles += 1
    c.recomputed += (len(plan) - 1) * c.chunk
    return True
