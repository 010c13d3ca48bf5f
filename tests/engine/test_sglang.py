"""SGLang's scheduler (``engine/sglang.py``): prefill-first order, chunking, new-token-ratio
admission with its decay, retraction order and ratio re-estimate, idle reset; invariants and
fast == exact on random workloads; its CLI errors."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli import main
from inferplan.cli_flags import build_memory_plan
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.session import ServingOptions
from inferplan.engine.sglang import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    NEW_TOKEN_RATIO_DECAY,
    SglangScheduler,
)
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.errors import InferplanError
from inferplan.metrics.records import RequestStatus
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload, arrival_times_s

from .replica_helpers import replica_at_zero

D = NEW_TOKEN_RATIO_DECAY


@cache
def _model() -> StepTimeModel:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return build_step_model(plan)


def _replica(
    prompts: list[int], outputs: list[int], *, num_blocks: int = 100_000, budget: int = 8192
) -> Replica:
    cfg = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=4096,
        block_size=1,
        num_blocks=num_blocks,
        scheduler="sglang",
    )
    replica = replica_at_zero(prompts, outputs, cfg, _model())
    assert isinstance(replica.scheduler, SglangScheduler)
    return replica


def _step(replica: Replica) -> list[int]:
    """One exact step; the tokens each running request got, by request id."""
    decision = replica.scheduler.schedule(replica.now)
    sched = {int(r): int(t) for r, t in zip(replica.running.ids, decision.sched, strict=True)}
    replica._run(decision)
    replica.check_invariants()
    return [sched.get(rid, 0) for rid in range(replica.records.num_requests)]


def test_prefill_runs_alone_and_decodes_wait() -> None:
    replica = _replica([100, 60], [5, 5])
    replica.add_request(0)
    assert _step(replica) == [100, 0]  # A's prefill
    assert _step(replica) == [1, 0]  # A decodes
    replica.add_request(1)
    assert _step(replica) == [0, 60]  # B's prefill: A waits (no mixed chunk)
    assert _step(replica) == [1, 1]


def test_one_request_is_chunked_at_a_time_and_goes_first() -> None:
    replica = _replica([100, 50, 10], [3, 3, 3], budget=64)
    for rid in range(3):
        replica.add_request(rid)
    assert _step(replica) == [64, 0, 0]  # A cut to the budget: the round ends
    assert _step(replica) == [36, 28, 0]  # A's rest first, then B cut
    assert _step(replica) == [0, 22, 10]  # B's rest, C whole; A (decoding) waits
    assert _step(replica) == [1, 1, 1]


def _rem_total(free: float, left: float, decode_steps: int) -> float:
    ratio = max(INIT_NEW_TOKEN_RATIO - decode_steps * D, MIN_NEW_TOKEN_RATIO)
    return free - ratio * left


@pytest.mark.parametrize(("c_output", "joins"), [(85, True), (50, False)])
def test_a_full_batch_retries_admission_only_after_a_finish_with_the_decayed_ratio(
    c_output: int, joins: bool
) -> None:
    """A: 100-token prompt, 1000 outputs; C: 10 tokens, ``c_output`` outputs; B needs 100 +
    1150 = 1250 tokens of a 2000-token pool. B fails in the first round (1999 - 1100 - 60 <
    1250): the batch is full (``batch_is_full``) and no prefill is tried while the ratio
    decays, not even where B would pass. C finishes after ``c_output - 1`` decode steps; the
    next step decodes (the batch shrank: unlatched) and the one after retries B with A alone
    after ``d = c_output`` decode steps: free 1900 - d, A's left 999 - d, ratio 0.7 - d*D,
    which passes from d = 80 on (1249.92 at 79, 1250.47 at 80)."""
    replica = _replica([100, 10, 100], [1000, c_output, 1150], num_blocks=2000)  # A, C, B
    for rid in range(3):
        replica.add_request(rid)
    assert _step(replica) == [100, 10, 0]
    assert next(j for j in range(1000) if _rem_total(1900 - j, 999 - j, j) > 1250) == 80
    for _ in range(c_output - 1):  # B would pass from step 80 on, but the batch is full
        assert _step(replica) == [1, 1, 0]
    assert replica.records.status[1] == int(RequestStatus.COMPLETED)
    assert _step(replica) == [1, 0, 0]  # unlatched by the shrink; this step still decodes
    if joins:
        assert _step(replica) == [0, 0, 100]
        return
    while replica.records.status[0] != int(RequestStatus.COMPLETED):  # retried, failed:
        assert _step(replica)[2] == 0  # full again until A finishes
    assert _step(replica) == [0, 0, 100]


def test_head_waits_for_the_running_request_to_finish_when_the_ratio_never_allows() -> None:
    # rem_total = 620.7 + 0.1003 j - 0.001003 j^2 stays below B's 700 tokens while A runs.
    replica = _replica([100, 100], [400, 600], num_blocks=1000)
    replica.add_request(0)
    replica.add_request(1)
    while replica.records.status[0] != int(RequestStatus.COMPLETED):
        assert _step(replica)[1] == 0
    assert _step(replica) == [0, 100]


def test_retraction_order_tail_requeue_and_ratio_estimate() -> None:
    prompts, generated = [50, 80, 120, 10], [3, 1, 1, 5]
    # The four hold 52 + 80 + 120 + 14 = 266 tokens of a 268-token pool.
    replica = _replica([*prompts, 7], [100] * 5, num_blocks=268)
    run, sched = replica.running, replica.scheduler
    assert isinstance(sched, SglangScheduler)
    for rid, (p, g) in enumerate(zip(prompts, generated, strict=True)):
        run.append(rid, p + g - 1, p + g, g, 100, p + g - 1, 0.0)
    replica.pool.free = 268 - int(run.held_blocks.sum())
    replica.add_request(4)
    # Fewest generated first, ties to the longest prompt: 120 (row 2), then 80 (row 1).
    assert sched.victim_row() == 2
    assert replica.pool.free == 2  # four decodes need 4 tokens: one must go
    assert _step(replica)[:4] == [1, 1, 0, 1]
    assert sched.victim_row() == 1  # next: the 80-token prompt with 1 generated
    assert [replica.waiting.pop() for _ in range(2)] == [4, 2]  # retracted to the tail
    assert replica.records.num_preemptions.tolist() == [0, 0, 1, 0, 0]
    assert replica.records.recomputed_tokens.tolist() == [0, 0, 120, 0, 0]
    # Re-estimated over the three left (before this step's tokens): (3+1+5 + 20*3) / (300+1).
    assert sched.ratio_base == pytest.approx(69 / 301)
    assert sched.ratio_steps == 0  # a step that retracted does not decay


def test_ratio_resets_to_its_start_when_the_engine_goes_idle() -> None:
    replica = _replica([10, 10], [5, 5])
    sched = replica.scheduler
    assert isinstance(sched, SglangScheduler)
    replica.add_request(0)
    while replica.has_work:
        _step(replica)
    assert sched.ratio_after(0) == pytest.approx(INIT_NEW_TOKEN_RATIO - 4 * D)
    replica.add_request(1)
    _step(replica)
    assert sched.ratio_after(0) == INIT_NEW_TOKEN_RATIO


def test_clipped_output_reservation() -> None:
    replica = _replica([10], [10_000], num_blocks=20_000)
    replica.add_request(0)
    assert replica.scheduler.head_chunk(8192, 10 + CLIP_MAX_NEW_TOKENS) == 10
    assert replica.scheduler.head_chunk(8192, 10 + CLIP_MAX_NEW_TOKENS - 1) is None


# ---- whole runs: invariants, fast == exact -------------------------------------------------


def _workload(n: int, max_input: int, max_output: int, rate: float, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        arrival_s=arrival_times_s(n, rate, 1.0, seed),
        input_tokens=rng.integers(1, max_input + 1, size=n).astype(np.int64),
        output_tokens=rng.integers(1, max_output + 1, size=n).astype(np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )


def _run(
    wl: Workload,
    *,
    exact: bool,
    blocks: int,
    budget: int,
    seqs: int,
    block: int,
    concurrency: int | None,
    policy: str = "fcfs",
    dp: int = 1,
) -> SimulationResult:
    longest = int((wl.input_tokens + wl.output_tokens).max())
    cfg = SimulationConfig(
        SchedulerConfig(
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
            block_size=block,
            num_blocks=max(blocks, -(-longest // block) + 2),
            scheduler="sglang",
        ),
        longest,
        data_parallel_size=dp,
        scheduling_policy=policy,
        max_concurrency=concurrency,
        exact=exact,
    )
    return Simulation(wl, cfg, _model()).run(check=lambda r: r.check_invariants())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(10, 60),
    max_input=st.integers(1, 600),
    max_output=st.integers(1, 400),
    rate=st.sampled_from([2.0, 20.0, 200.0, math.inf]),
    seed=st.integers(0, 2**16),
    blocks=st.sampled_from([0, 300, 1500, 100_000]),
    budget=st.sampled_from([64, 512, 8192]),
    seqs=st.sampled_from([3, 64]),
    block=st.sampled_from([1, 1, 16]),
    concurrency=st.sampled_from([None, 4]),
    policy=st.sampled_from(["fcfs", "fcfs", "spf"]),
    dp=st.sampled_from([1, 1, 2]),
)
def test_fast_mode_equals_exact_mode_and_invariants_hold(
    n: int, max_input: int, max_output: int, rate: float, seed: int, blocks: int, budget: int,
    seqs: int, block: int, concurrency: int | None, policy: str, dp: int,
) -> None:  # fmt: skip
    wl = _workload(n, max_input, max_output, rate, seed)
    fast, exact = (
        _run(wl, exact=mode, blocks=blocks, budget=budget, seqs=seqs, block=block,
             concurrency=concurrency, policy=policy, dp=dp)
        for mode in (False, True)
    )  # fmt: skip
    f, e = fast.records, exact.records
    assert fast.num_steps == exact.num_steps
    np.testing.assert_array_equal(f.status, e.status)
    assert np.all(e.status == int(RequestStatus.COMPLETED))
    np.testing.assert_array_equal(f.output_tokens, wl.output_tokens)
    np.testing.assert_array_equal(f.num_preemptions, e.num_preemptions)
    np.testing.assert_array_equal(f.recomputed_tokens, e.recomputed_tokens)
    for name in ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_allclose(getattr(f, name), getattr(e, name), rtol=1e-9, err_msg=name)
    assert fast.itl.total_weight == exact.itl.total_weight


def test_a_small_pool_retracts_and_every_request_still_completes() -> None:
    wl = _workload(60, 300, 400, math.inf, 5)
    res = _run(wl, exact=False, blocks=2000, budget=8192, seqs=64, block=1, concurrency=None)
    assert res.records.num_preemptions.sum() > 0
    assert np.all(res.records.status == int(RequestStatus.COMPLETED))


# ---- flags -------------------------------------------------------------------------------


def test_sglang_options_refuse_what_it_does_not_do() -> None:
    with pytest.raises(InferplanError, match="--enable-prefix-caching"):
        ServingOptions(engine="trtllm", enable_prefix_caching=True)
    with pytest.raises(InferplanError, match="--preemption-mode swap"):
        ServingOptions(engine="sglang", preemption_mode="swap")
    assert ServingOptions(engine="sglang").prefix_caching  # the radix cache: on by default
    assert not ServingOptions(engine="sglang", enable_prefix_caching=False).prefix_caching


def test_simulate_with_engine_sglang_runs_and_bad_flags_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h100", "--engine", "sglang"]
    run = [*base, "--num-prompts", "20", "--random-input-len", "300", "--json"]
    assert main(run) == 0
    assert '"completed": 20' in capsys.readouterr().out
    trtllm = [*base[:-1], "trtllm"]
    assert main([*trtllm, "--enable-prefix-caching"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--enable-prefix-caching" in err
