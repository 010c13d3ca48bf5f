"""Schedulers that reserve each request's whole prompt + output at admission (static batching,
TensorRT-LLM's GUARANTEED_NO_EVICT), so the pool never runs short and nothing is preempted; the
running and waiting passes are ``Scheduler``'s (``engine/schedulers.py``, whose docstring
describes each engine)."""

from __future__ import annotations

from inferplan.engine.schedulers import Scheduler, StepDecision


class _ReservingScheduler(Scheduler):
    """Admission reserves each request's whole prompt + output beside what every running
    request still needs to finish, so the pool never runs short and nothing is preempted."""

    reserves_whole_request = True
    can_preempt = False

    def available_blocks(self, *, after_decode_step: bool = False) -> int:
        # A decode step moves blocks from the free pool into rows' reservations: no change.
        run = self.running
        ends = self.prompt_tokens[run.ids] + run.target
        reserved = int((self.pool.blocks_for(ends) - run.held_blocks).sum())
        return self.pool.free - reserved

    def admission_blocks(self, rid: int, tokens: int, chunk_end: int) -> int:
        return self.pool.blocks_for_one(int(self.prompt_tokens[rid] + self.target_tokens[rid]))


class StaticScheduler(_ReservingScheduler):
    """Request-level batching: a new batch only when nothing runs."""

    counts_idle_slots = True
    vector_step = False

    def schedule(self, now: float) -> StepDecision:
        decision = self.schedule_running()
        admit = not decision.preempted and not len(self.running)
        return self.schedule_waiting(decision, now, admit=admit)

    def head_can_join(self) -> bool:
        return not len(self.running) and super().head_can_join()


class TrtllmScheduler(_ReservingScheduler):
    """TensorRT-LLM GUARANTEED_NO_EVICT without chunked context."""

    whole_prompts = True
    vector_step = False


class TrtllmChunkedScheduler(_ReservingScheduler):
    """TensorRT-LLM GUARANTEED_NO_EVICT with chunked context (``enable_chunked_prefill``, off
    by default in the LLM API and ``trtllm-serve``): admission still reserves prompt + output,
    and the contexts share the step's leftover ``max_num_tokens`` first come first served
    (``microBatchScheduler.cpp``, ``ContextChunkingPolicy.FIRST_COME_FIRST_SERVED``), so a
    prompt longer than the budget runs over several steps. TensorRT-LLM rounds a non-final
    chunk down to a multiple of ``tokens_per_block``; that rounding is not emulated."""

    vector_step = False
