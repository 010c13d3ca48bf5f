"""vLLM V0's scheduler (``--scheduler prefill-first``): whole prompts first, decodes only when
no prompt is admitted, optional multi-step decode blocks (``--num-scheduler-steps``); swap
preemption is emulated here only (vLLM V0 swaps to host memory, v1 never does).
"""

from __future__ import annotations

import numpy as np

from inferplan.engine.schedulers import Scheduler, StepDecision


class PrefillFirstScheduler(Scheduler):
    """vLLM V0 without chunked prefill, with optional multi-step decode blocks."""

    whole_prompts = True
    vector_step = False

    # Decode steps since the scheduler last looked at the queue, modulo num_scheduler_steps
    # (0: the next step is a scheduling point). An int: each instance's first assignment makes
    # its own copy, so no state is shared between schedulers.
    decode_phase = 0

    def schedule(self, now: float) -> StepDecision:
        prefill = self._prefill_only(now)
        if prefill is not None:
            return prefill
        decision = self.schedule_running()
        if decision.preempted:
            return decision
        return self.schedule_waiting(decision, now, admit=False)  # admission: own steps only

    def _prefill_only(self, now: float) -> StepDecision | None:
        """A step of whole new prompts while running requests wait, or None when this step
        decodes: inside a multi-step block, or the queue head cannot be admitted now."""
        if self.swapped or (self.decode_phase and len(self.running)):
            return None  # an emptied batch ends its block early
        sched = [0] * len(self.running)
        self.admit_waiting(self.cfg.max_num_batched_tokens, sched, now)
        if not any(sched):
            return None
        return StepDecision(np.array(sched, dtype=np.int64), prefill_only=True)

    def _head_fits_prefill_step(self) -> bool:
        """The queue head's whole prompt fits a prefill step now (the whole budget, the free
        pool; the pool only shrinks while decoding)."""
        if len(self.running) >= self.cfg.max_num_seqs or self.swapped:
            return False
        return self.head_chunk(self.cfg.max_num_batched_tokens, self.pool.free) is not None

    def head_can_join(self) -> bool:
        if self.swapped:  # decode steps bring them back; prompts wait until none is out
            return super().head_can_join() and self.swapped_head_fits(
                self.cfg.max_num_batched_tokens - len(self.running),
                self.available_blocks(after_decode_step=True),
            )
        # Inside a multi-step block every step decodes (the stretch stops at the block's end).
        return bool(len(self.waiting)) and self.decode_phase == 0 and self._head_fits_prefill_step()

    def steps_to_scheduling_point(self) -> int | None:
        if not len(self.waiting) or self.decode_phase == 0 or not self._head_fits_prefill_step():
            return None
        return self.cfg.num_scheduler_steps - self.decode_phase

    def note_steps(self, num_steps: int, *, prefill_only: bool = False) -> None:
        steps = self.cfg.num_scheduler_steps
        self.decode_phase = 0 if prefill_only else (self.decode_phase + num_steps) % steps
