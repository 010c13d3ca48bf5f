"""The closed form under pipeline parallelism: TensorRT-LLM's limits are per micro-batch."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.plan.published_runs import steady_state_throughput
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


class _OneSecondSteps:
    """Every step takes 1 s, so a run's time is its number of steps."""

    def step_time(self, batch: StepBatch) -> StepTime:
        return StepTime(1.0, {"compute": 1.0})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1.0, 0.0, float("inf")


def _plan(pp: int, max_seqs: int, max_tokens: int) -> MemoryPlan:
    cfg = MemoryConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, block_size=32)
    return plan_memory(load_model("Llama-3.1-8B"), load_gpu("h100"), Parallelism(pp=pp), cfg)


def test_pipeline_stages_each_hold_a_micro_batch_of_max_batch_size() -> None:
    """PP2, max_batch_size 8, max_num_tokens 408 (4 prompts of 100 beside 8 decodes), ISL 100 /
    OSL 10, 40 requests: 16 run at once and 2 x 4 prompts enter per step, so the 16 slots fill
    in 2 steps. A request holds its slot 10 steps: 40 = 2 x 16 + 8, so 2 ramp steps, 3 refill
    steps, 2 x (10 - 2) = 16 steps of 16 decodes, then the last 8 decode alone for 9 steps: 30 s
    for 400 output tokens. Reading the limits as the whole pipeline's (8 at once, 4 prompts per
    step) gives 51 s (below)."""
    out, req = steady_state_throughput(_plan(2, 8, 408), _OneSecondSteps(), 100, 10, 40) or (0, 0)
    assert out == pytest.approx(400 / 30)
    assert req == pytest.approx(40 / 30)


def test_without_pipeline_parallelism_the_limits_are_the_whole_batch() -> None:
    """8 slots in 2 groups of 4, 40 = 5 x 8 requests: 2 + 8 prefill steps, 5 x (10 - 2) full
    decode steps, 1 drain step (the last group's last decode): 51 s."""
    out, _ = steady_state_throughput(_plan(1, 8, 408), _OneSecondSteps(), 100, 10, 40) or (0, 0)
    assert out == pytest.approx(400 / 51)
