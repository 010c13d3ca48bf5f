"""``trtllm-bench`` under attention DP rank by rank (plan/adp_steps.py): each rank's own
limits, pool and share of the requests, every class of steps timed as ``r`` copies of the
busiest rank's batch."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.plan import closed_form
from inferplan.plan.adp_steps import rank_limits, rank_run_seconds
from inferplan.plan.closed_form import steady_state_throughput
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


class _AffineSteps:
    """A step takes 1 s plus 0.1 s per decode row of the group (prefill free); it keeps the
    batches it was asked about."""

    def __init__(self) -> None:
        self.batches: list[StepBatch] = []

    def step_time(self, batch: StepBatch) -> StepTime:
        self.batches.append(batch)
        total = 1.0 + 0.1 * batch.num_decode_seqs
        return StepTime(total, {"compute": total})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1.0, 0.0, float("inf")


def _dp_plan(ranks: int, max_seqs: int, max_tokens: int) -> MemoryPlan:
    cfg = MemoryConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, block_size=32)
    par = Parallelism(tp=1, dp=ranks, enable_expert_parallel=True)
    return plan_memory(load_model("Qwen3-30B-A3B"), load_gpu("h100"), par, cfg)


def test_the_busiest_rank_holds_its_own_limits_and_the_ceiling_of_the_requests() -> None:
    """Four ranks, 10 requests: the busiest rank is dealt 3 (ceil(10 / 4)), so 3 of its 8 slots
    are busy; its budget is its own 408 tokens; the KV pool bounding it is its quarter."""
    plan = _dp_plan(4, 8, 408)
    assert rank_limits(plan, 100, 10, 10) == (3, 408, 3)
    wide = _dp_plan(4, 100_000, 8192)
    pool = wide.num_blocks // 4 // ((2048 + 2048) // 32)
    assert pool < wide.num_blocks // ((2048 + 2048) // 32) < 100_000
    assert rank_limits(wide, 2048, 2048, 10**7)[0] == pool


def test_an_uneven_share_runs_as_long_as_the_busiest_rank_by_hand() -> None:
    """Two ranks of 4 slots and 204 tokens (2 prompts of 100 beside 4 decodes), 9 requests at
    100/10: the busiest rank runs 5: 2 ramp steps (0 and 2 decodes beside its 2 prompts), 1
    refill (2 decodes beside 1 prompt), 8 full steps of 4 decodes, then its fifth request
    decodes alone 9 steps. Each step is timed as both ranks' rows: 2 x 1.2 + 1.4 + 8 x 1.8 +
    9 x 1.2 = 29.0 s."""
    assert rank_run_seconds(_dp_plan(2, 4, 204), _AffineSteps(), 100, 10, 9) == pytest.approx(29.0)


def test_each_step_is_the_ranks_copies_of_one_rank_batch() -> None:
    """The step model is asked for two ranks' worth of prompts and rows: a ramp step of the
    rank's 2 prompts of 100 is 400 prompt tokens on the group (2 ranks x 2 x 100)."""
    steps = _AffineSteps()
    rank_run_seconds(_dp_plan(2, 4, 204), steps, 100, 10, 8)
    prefill = [b for b in steps.batches if b.prefill_tokens > 0]
    assert prefill[0].prefill_tokens == 2 * 2 * 100
    assert prefill[0].num_decode_seqs == 2 * 1  # the ramp's mean: one decode a rank
    assert max(b.num_decode_seqs for b in steps.batches) == 2 * 4


def test_the_closed_form_takes_the_rank_run_only_with_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off, the group runs on one rank's limits (28.2 s, ``test_closed_form``); on, the 8
    requests split 4 and 4 over two ranks of 4 slots: 18.2 s; a run without attention DP is
    the same either way."""
    plan = _dp_plan(2, 4, 204)
    off = steady_state_throughput(plan, _AffineSteps(), 100, 10, 8)
    monkeypatch.setattr(closed_form, "ATTENTION_DP_RANK_LIMITS", True)
    on = steady_state_throughput(plan, _AffineSteps(), 100, 10, 8)
    assert off == (pytest.approx(80 / 28.2), pytest.approx(8 / 28.2))
    assert on == (pytest.approx(80 / 18.2), pytest.approx(8 / 18.2))
    cfg = MemoryConfig(max_num_seqs=8, max_num_batched_tokens=408, block_size=32)
    dense = plan_memory(load_model("Llama-3.1-8B"), load_gpu("h100"), Parallelism(), cfg)
    monkeypatch.setattr(closed_form, "ATTENTION_DP_RANK_LIMITS", False)
    before = steady_state_throughput(dense, _AffineSteps(), 100, 10, 8)
    monkeypatch.setattr(closed_form, "ATTENTION_DP_RANK_LIMITS", True)
    assert steady_state_throughput(dense, _AffineSteps(), 100, 10, 8) == before
