"""The step whose prefilling last row is preempted, beside implicit decoders (issue 10).

Above capacity the last running row is often a resumed request whose recompute the budget cut
into chunks (``engine/chunk_step.py``); where the pool cannot give its next chunk's blocks
beside the decoders' crossings, vLLM v1's running pass (``Scheduler.
_schedule_running_with_preemption``) preempts the last admitted row: that same prefilling row.
Whether the pass first fails at the prefilling row or at a decoder before it, the outcome is
the same where the victim's blocks cover the decoders' crossings (``crossing <= free + held``):
the prefilling row goes back to the queue's head (its blocks freed, its preemption and
recomputed tokens counted), every decoder computes and samples one token, and nothing is
admitted (a preempting step has no waiting pass). Where they do not, more rows would be
preempted: the general path runs the step. Under the priority policy the victim may be another
row, and a swap moves KV over the host link: both stay on the general path too.

So the step is a pure decode of rows ``[0, m)`` after one ``Scheduler.preempt``: its blocks
from the crossing histogram, its shape ``m`` decodes of the known context, its emission the one
``chunk_step`` writes with no row after the decoders (one ITL mark and one histogram sample of
the step, rows that reach their target finished), all on the implicit scalars, instead of the
scheduler's numpy pass, ``_batch``, ``_finish_step`` and ``_emit`` and the relearning of the
scalars the next fast path would pay. Results are the general path's bit for bit
(``tests/engine/test_preempt_step.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferplan.engine.chunk_step import column_finish, emit_rows, last_row_chunk
from inferplan.engine.stepshape import step_shape

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica


def preempt_step(r: Replica) -> bool:
    """Run the step where the prefilling last row is preempted and the others decode (the
    module docstring); False, having changed nothing the general path reads, elsewhere."""
    crossing = victim_crossing(r)
    if crossing is None:
        return False
    run, pool = r.running, r.pool
    last, lag = run._size - 1, run.rows.lag
    r.scheduler.preempt(last)  # its blocks back to the pool, it to the queue's head
    pool.free_blocks -= crossing  # nothing to evict (no prefix cache)
    decode_context = run.rows.computed_sum + last * (lag + 1)
    duration = r.step_s.seconds(*step_shape(last, decode_context, [], []))
    r.trace.record(r.now, pool.num_blocks - pool.free_blocks)
    start = r.now
    r.now = now = start + duration
    r.num_steps += 1
    if start != now - duration:  # gaps not one step long in floats: the column form
        column_finish(r, last, [], duration)
        return True
    emit_rows(r, last, [], duration)
    return True


def victim_crossing(r: Replica) -> int | None:
    """The decoders' crossing blocks where this step is ``preempt_step``'s (the module
    docstring), else None; either way nothing the general path reads has changed (the
    decoders' scalars may be learnt and the last row's lazy block and time written)."""
    if r.cfg.preemption_mode != "recompute" or r.waiting.policy == "priority":
        return None  # a swap, or a victim other than the last row
    shape = last_row_chunk(r, 1)
    if shape is None:
        return None
    held, grown = shape[4], shape[5]
    rows, free = r.running.rows, r.pool.free_blocks
    crossing: int = rows.hist[-rows.lag % rows.block]  # ``crossings(1)`` of the decoders
    if crossing + grown <= free or crossing > free + held:
        return None  # no preemption (``chunk_step``), or more than one victim
    return crossing
