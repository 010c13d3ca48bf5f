"""A step and the chunk steps after it in one call (issue 10, ``long10x``'s partial cycles).

Above capacity with long outputs, a doomed head (``engine/thrash.py``) whose next cycle cannot
be taken whole (a decoder finishes within it, or its last step would start after the next
arrival is seen) runs that cycle on the general path: its admission (the vector step), its
chunks beside the decoders (``engine/chunk_step.py``), the step that preempts it
(``engine/preempt_step.py``); so does a resumed request's chunked recompute after a finish.
Each of those steps took a pass of the loop (``Simulation._advance``, ``_advance_plain``,
``can_stretch``, ``joined_admission_step``, ``_doomed_cycles``, ``Replica.step``,
``_decode_and_admit_step``), though while the last running row prefills each of them declines:
``can_stretch``, the doomed pass and ``_decode_and_admit_step`` ask for a pure decode, and the
joined step for ``can_stretch``'s answer, which it clears (``Scheduler.joins``).

``step_then_chunks`` takes ``Replica.step`` and then, while the last row prefills
(``Replica._decoding is False``) and no row finished, ``Replica.step`` again (its
``chunk_step`` or ``preempt_step``, or the general path where neither applies), doing between
two steps what the loop does there: the arrivals that came due routed through the loop's own
``intake`` (``Simulation._chain_arrivals``: its clock test, ``_arrive`` and progress), and
``Scheduler.joins`` cleared as ``can_stretch`` clears it. It stops where the loop would do
something else: a finish (the loop collects it), a batch no longer prefilling at its last row,
or a step that made no progress (the loop says why). So the steps, their times and every record
are the loop's, bit for bit (``tests/engine/test_chunk_run.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from inferplan.engine.chunk_step import prefill_on_step

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica


def step_then_chunks(r: Replica, intake: Callable[[float], float | None] | None) -> None:
    """``Replica.step``; then, given the loop's ``intake`` (a plain replica in a fused loop,
    ``Simulation._advance_plain``), the chunk and preempting steps the loop would take after
    it, up to a finish or a step of another kind (the module docstring)."""
    r.step()
    if intake is None:
        return
    scheduler = r.scheduler
    while r._decoding is False and not r.on_finish:
        intake(r.now)  # the loop's arrivals due at this clock, routed as it routes them
        scheduler.joins = None  # ``can_stretch``'s first act, each pass of the loop
        steps, now = r.num_steps, r.now
        # ``Replica.step`` with ``_decoding`` False: ``_decode_and_admit_step`` declines
        # (``is_decoding``), so its ``chunk_step``; the usual one first, inline.
        if r.offload is not None or not prefill_on_step(r):
            r.step()
        if r.num_steps == steps and r.now == now:
            return  # no progress: the loop's test
