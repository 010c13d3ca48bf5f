"""trtllm-bench's closed form: slots refilled as requests finish, each request decoding OSL - 1
times (plan/closed_form.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.plan import closed_form
from inferplan.plan.closed_form import admitted_per_step, schedule, steady_state_throughput
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


class _AffineSteps:
    """A step takes 1 s plus 0.1 s per decode row (prefill free), so the run's time is its
    step count plus a tenth of its decode rows."""

    def step_time(self, batch: StepBatch) -> StepTime:
        total = 1.0 + 0.1 * batch.num_decode_seqs
        return StepTime(total, {"compute": total})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1.0, 0.0, float("inf")


def _plan(max_seqs: int, max_tokens: int) -> MemoryPlan:
    cfg = MemoryConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, block_size=32)
    return plan_memory(load_model("Llama-3.1-8B"), load_gpu("h100"), Parallelism(), cfg)


def test_schedule_of_whole_waves_by_hand() -> None:
    """8 slots, 4 prompts a step, OSL 10, 40 requests: the slots fill in 2 steps (0 then 4
    decodes beside the prompts: mean 2), 8 refill steps (the 4 other slots decoding), 5 x 8
    steps with all 8 decoding, and one step for the last group's last decode."""
    steps = schedule(8, 4, 10, 40)
    assert steps == {
        "ramp": (2, 4, 2),
        "refill": (8, 4, 4),
        "full": (40, 0, 8),
        "drain": (1, 0, 4),
    }


def test_a_partial_last_wave_decodes_alone() -> None:
    """16 slots in 2 groups of 8, 40 = 2 x 16 + 8: after the 3 refills the last 8 requests
    decode 9 steps with the other slots empty."""
    steps = schedule(16, 8, 10, 40)
    assert steps == {
        "ramp": (2, 8, 4),
        "refill": (3, 8, 8),
        "full": (16, 0, 16),
        "drain": (9, 0, 8),
    }


@pytest.mark.parametrize(
    ("batch", "per_step", "osl", "requests"),
    [(8, 4, 10, 40), (16, 8, 10, 40), (4096, 64, 128, 30000), (694, 4, 128, 3000), (7, 7, 2, 7)],
)
def test_each_request_decodes_osl_minus_one_times(
    batch: int, per_step: int, osl: int, requests: int
) -> None:
    """The decode rows of all the steps, prefill steps' included, are requests x (OSL - 1):
    none counted twice (a wave's prefill steps carry decodes) and none dropped; every request
    has its prompt once."""
    steps = schedule(batch, per_step, osl, requests)
    rows = sum(count * mean for count, _, mean in steps.values())
    prompts = sum(count * mean for count, mean, _ in steps.values())
    assert rows == pytest.approx(requests * (osl - 1))
    assert prompts == pytest.approx(requests)
    assert all(min(step) >= 0 for step in steps.values())


def test_prompts_limit_the_slots_in_use() -> None:
    """694 slots but 4 prompts a step and OSL 128: at most 4 x 128 = 512 requests are ever in
    flight, so every step after the first 128 admits 4 and carries 4 x 127 decodes."""
    steps = schedule(694, 4, 128, 3000)
    assert steps["ramp"] == (128, 4, 254)
    assert steps["refill"] == (622, 4, 508)
    assert steps["full"][0] == 0


def test_single_wave_time_by_hand() -> None:
    """8 requests, 8 slots, 4 prompts a step (max_num_tokens 408 = 4 prompts of ISL 100 beside
    the 8 slots' decodes), OSL 10: 2 prefill steps (0 and 4 decodes), 8 steps of 8 decodes, 1
    step of the last group's 4: 11 steps and 72 = 8 x 9 decode rows, 11 + 7.2 = 18.2 s. A wave
    that decodes all 8 for 9 steps after its prefill steps (their 4 decodes counted again)
    takes 2.4 + 16.2 = 18.6 s."""
    out, req = steady_state_throughput(_plan(8, 408), _AffineSteps(), 100, 10, 8) or (0, 0)
    assert out == pytest.approx(80 / 18.2)
    assert req == pytest.approx(8 / 18.2)


def test_decodes_take_their_tokens_of_the_budget_by_hand() -> None:
    """max_num_tokens 400 instead: the 4 decoding slots take 4 of the 400 tokens, so TensorRT-LLM
    admits 4, then 3, then 1 prompt (3 prefill steps). The closed form's mean is
    k = (400 - 8) / 99 = 3.96 prompts a step: 3 equal groups of 8/3 whose ramp decodes average
    8/3 (3 rows, rounded), 7 steps of 8 decodes, 2 drain steps of the 8 rows left (4 each):
    3 x 1.3 + 7 x 1.8 + 2 x 1.4 = 19.3 s (the whole-prompt rule, 4 a step: 18.2 s)."""
    out, _ = steady_state_throughput(_plan(8, 400), _AffineSteps(), 100, 10, 8) or (0, 0)
    assert out == pytest.approx(80 / 19.3)


def test_prompts_share_max_num_tokens_with_the_decodes() -> None:
    """``(S - k) + k ISL <= budget`` with ``S = min(batch, k OSL)``: prompt-bound, 8,192 tokens
    at 128/128 hold k = 8192 / 255 prompts (k OSL = 4,112 slots, under 8,192); slot-bound at
    4,096 slots, (8192 - 4096) / 127 = 32.25, not the 64 whole prompts the budget holds alone;
    at most budget // ISL whole prompts (15 of 128 in 2,000, where the decodes leave 15.35)."""
    assert admitted_per_step(8192, 128, 128, 8192) == pytest.approx(8192 / 255)
    assert admitted_per_step(8192, 128, 128, 4096) == pytest.approx(4096 / 127)
    assert admitted_per_step(2000, 128, 4096, 50) == 15.0
    for budget, isl, osl, batch in [(3584, 1024, 1024, 1610), (28672, 2048, 128, 1522)]:
        k = admitted_per_step(budget, isl, osl, batch)
        busy = min(batch, k * osl)
        assert (busy - k) + k * isl <= budget + 1e-9


def _micro_batch_walk(batch: int, budget: int, isl: int, osl: int, requests: int) -> int:
    """Steps of a run as TensorRT-LLM's micro-batch scheduler walks it, one step at a time:
    every busy slot decodes one token, then queued prompts enter whole while a slot is free
    and they fit in what the decodes left of the budget. Groups of slots by steps left."""
    groups: list[list[int]] = []  # [steps left after this one, slots]
    queued, steps = requests, 0
    while queued or groups:
        busy = sum(n for _, n in groups)
        k = min(batch - busy, queued, (budget - busy) // isl)
        groups = [[left - 1, n] for left, n in groups if left > 1]
        if k > 0:
            groups.append([osl - 1, k])
        queued -= k
        steps += 1
    return steps


@pytest.mark.parametrize(
    ("batch", "budget", "isl", "osl", "requests"),
    [
        (8, 400, 100, 10, 40),
        (4096, 8192, 128, 128, 30000),
        (1610, 3584, 1024, 1024, 3000),
        (1522, 28672, 2048, 128, 3000),
        (810, 2048, 128, 4096, 1500),
    ],
)
def test_the_step_count_is_the_micro_batch_walks(
    batch: int, budget: int, isl: int, osl: int, requests: int
) -> None:
    """The closed form's steps (``admitted_per_step`` then ``schedule``) match a step-by-step
    walk of the scheduler within 0.6 % on shapes of the perf overview's runs (128/128 at 4,096
    slots, 1,024/1,024 at 1,610, 2,048/128, 128/4,096); counting whole prompts without the
    decodes' tokens (``budget // ISL``) is off by 2-9 %."""
    k = admitted_per_step(budget, isl, osl, batch)
    steps = sum(count for count, _, _ in schedule(batch, k, osl, requests).values())
    assert steps == pytest.approx(_micro_batch_walk(batch, budget, isl, osl, requests), rel=6e-3)


def _dp_plan(ranks: int, max_seqs: int, max_tokens: int) -> MemoryPlan:
    """Attention DP over ``ranks`` GPUs (experts across them), each rank's limits as given."""
    cfg = MemoryConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, block_size=32)
    par = Parallelism(tp=1, dp=ranks, enable_expert_parallel=True)
    return plan_memory(load_model("Qwen3-30B-A3B"), load_gpu("h100"), par, cfg)


def test_attention_dp_ranks_each_hold_max_batch_size_and_max_num_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two attention-DP ranks of 4 slots and 204 tokens each (2 prompts of 100 beside 4 decodes)
    hold 8 slots and 408 tokens in all: 8 requests at 100/10 run as
    ``test_single_wave_time_by_hand``'s one rank of 8 slots and 408 tokens, 18.2 s. Read as the
    group's limits (4 slots, 204 tokens), the same run takes 2 waves: 2 ramp steps (0 and 2
    decodes beside 2 prompts), 2 refills (2 decodes each), 16 full steps of 4, 1 drain step of
    2: 21 steps and 72 rows, 28.2 s (the committed reading, ``ATTENTION_DP_RANK_LIMITS`` off)."""
    assert steady_state_throughput(_dp_plan(2, 4, 204), _AffineSteps(), 100, 10, 8) == (
        pytest.approx(80 / 28.2),
        pytest.approx(8 / 28.2),
    )
    monkeypatch.setattr(closed_form, "ATTENTION_DP_RANK_LIMITS", True)
    out, _ = steady_state_throughput(_dp_plan(2, 4, 204), _AffineSteps(), 100, 10, 8) or (0, 0)
    assert out == pytest.approx(80 / 18.2)
    assert schedule(4, 2, 10, 8) == {
        "ramp": (2, 2, 1),
        "refill": (2, 2, 2),
        "full": (16, 0, 4),
        "drain": (1, 0, 2),
    }


def test_attention_dp_slots_stay_within_the_kv_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four ranks of 4,096 slots each would hold 16,384 requests at 2,048/2,048; the group's KV
    pool (each rank keeps its own sequences') holds fewer, so the pool sets the slots: the run
    is the same with 4,096 or 40,000 slots a rank (the same pool)."""
    monkeypatch.setattr(closed_form, "ATTENTION_DP_RANK_LIMITS", True)
    plan = _dp_plan(4, 4096, 8192)
    assert plan.num_blocks // (4096 // 32) < 4 * 4096
    wider = replace(plan, config=replace(plan.config, max_num_seqs=40000))
    wide = steady_state_throughput(wider, _AffineSteps(), 2048, 2048, 20000)
    assert steady_state_throughput(plan, _AffineSteps(), 2048, 2048, 20000) == wide


def test_the_bench_exchange_is_tensorrt_llms_gather_under_attention_dp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TensorRT-LLM gathers (top-8 Qwen3-30B-A3B on two H100 attention-DP ranks: EP 2 <= top-8,
    and an 8-GPU NVLink domain is not multi-node); without attention DP, experts or the flag
    there is no exchange to choose."""
    assert closed_form.bench_exchange(_dp_plan(2, 4, 204)) == "allgather"
    tp = plan_memory(
        load_model("Qwen3-30B-A3B"),
        load_gpu("h100"),
        Parallelism(tp=2, enable_expert_parallel=True),
        MemoryConfig(max_num_seqs=4, max_num_batched_tokens=204, block_size=32),
    )
    assert closed_form.bench_exchange(tp) is None
    dense = _plan(8, 408)
    assert closed_form.bench_exchange(replace(dense, parallelism=Parallelism(dp=2))) is None
    monkeypatch.setattr(closed_form, "TRTLLM_MOE_EXCHANGE", False)
    assert closed_form.bench_exchange(_dp_plan(2, 4, 204)) is None


def _roofline_time(
    monkeypatch: pytest.MonkeyPatch, on: bool, python_executor: bool, overlap: float
) -> float:
    """The run of ``test_single_wave_time_by_hand`` (2 prefill steps, 9 pure decodes) on
    Llama-3.1-8B on one H100, with 1 ms of host work a step and ``overlap`` of it hidden."""
    monkeypatch.setattr(closed_form, "EAGER_STEPS_HIDE_NO_HOST", on)
    plan = _plan(8, 408)
    eff = replace(
        efficiency_for(plan.gpu),
        step_overhead_s=1e-3,
        per_seq_overhead_s=0.0,
        host_overlap=overlap,
    )
    step = build_step_model(plan, efficiency=eff)
    out, _ = steady_state_throughput(plan, step, 100, 10, 8, python_executor=python_executor) or (
        1.0,
        0.0,
    )
    return 80 / out


def test_steps_with_a_prompt_hide_no_host_work_on_the_python_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the switch on, each of the 2 steps that carry prompts loses the 0.5 ms of host work
    the overlap hid (half of 1 ms, the GPU's part being longer); the 9 graph-replayed decodes
    keep it: 1 ms in all. Off, for the C++ flow, or without an overlap: nothing changes."""
    base = _roofline_time(monkeypatch, False, True, 0.5)
    assert _roofline_time(monkeypatch, True, True, 0.5) - base == pytest.approx(1e-3, rel=1e-6)
    assert _roofline_time(monkeypatch, True, False, 0.5) == base
    assert _roofline_time(monkeypatch, True, True, 0.0) == _roofline_time(
        monkeypatch, False, True, 0.0
    )


def test_the_eager_model_leaves_the_runs_model_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(closed_form, "EAGER_STEPS_HIDE_NO_HOST", True)
    plan = _plan(8, 408)
    step = build_step_model(plan, efficiency=replace(efficiency_for(plan.gpu), host_overlap=0.3))
    eager = closed_form.eager_step_model(step)
    assert eager is not step
    assert eager.eff.host_overlap == 0.0  # type: ignore[attr-defined]
    assert step.eff.host_overlap == 0.3  # type: ignore[attr-defined]
    monkeypatch.setattr(closed_form, "EAGER_STEPS_HIDE_NO_HOST", False)
    assert closed_form.eager_step_model(step) is step


def test_the_eager_model_times_decode_lines_without_the_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The eager copy's decode lines hide no host work, even after the run's model cached its
    own (overlapped) line for the same batch: the copy keeps no line of the original's."""
    monkeypatch.setattr(closed_form, "EAGER_STEPS_HIDE_NO_HOST", True)
    plan = _plan(8, 408)
    eff = replace(efficiency_for(plan.gpu), step_overhead_s=1e-3, host_overlap=0.5)
    step = build_step_model(plan, efficiency=eff)
    overlapped = step.decode_line(8, 4000)
    eager = closed_form.eager_step_model(step)
    fresh = build_step_model(plan, efficiency=replace(eff, host_overlap=0.0))
    assert eager.decode_line(8, 4000) == fresh.decode_line(8, 4000) != overlapped
    assert step.decode_line(8, 4000) == overlapped
