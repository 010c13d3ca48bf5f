"""SGLang with DP attention scheduled per rank (``engine/sglang_ranks.py``): round-robin
dispatch, each rank's own pool, budget and prefill-or-decode choice, the lockstep's extra
seconds, its one-line error; fast == exact and the invariants on random workloads."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli import main
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.session import ServingOptions, sglang_radix_note, simulation_config
from inferplan.engine.sglang_ranks import SglangRankedScheduler, ranked_scheduler
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.errors import InferplanError
from inferplan.metrics.records import RequestStatus
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.workload import Workload, arrival_times_s

from .replica_helpers import replica_at_zero
from .test_sglang import _model
from .test_sglang_dp_attention import dp_plan


class _Linear:
    """Step seconds: 1 ms a token, of which the routed experts are half."""

    def step_time(self, batch: StepBatch) -> StepTime:
        total = 1e-3 * batch.num_tokens + 1e-3
        return StepTime(total, {"compute": total}, {"experts": 0.5e-3 * batch.num_tokens})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1e-3 * num_seqs + 1e-3, 0.0, math.inf


def _replica(
    prompts: list[int], outputs: list[int], *, ranks: int = 2, blocks: int = 100_000
) -> Replica:
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192 * ranks,
        max_num_seqs=64 * ranks,
        block_size=1,
        num_blocks=blocks * ranks,
        scheduler=ranked_scheduler(ranks),
    )
    replica = replica_at_zero(prompts, outputs, cfg, _Linear())
    for rid in range(len(prompts)):
        replica.add_request(rid)
    assert isinstance(replica.scheduler, SglangRankedScheduler)
    return replica


def _step(replica: Replica) -> dict[int, int]:
    decision = replica.scheduler.schedule(replica.now)
    sched = {int(r): int(t) for r, t in zip(replica.running.ids, decision.sched, strict=True)}
    replica._run(decision)
    replica.check_invariants()
    return sched


def test_requests_go_to_ranks_round_robin_in_arrival_order() -> None:
    replica = _replica([10] * 5, [3] * 5, ranks=2)
    _step(replica)
    sched = replica.scheduler
    assert isinstance(sched, SglangRankedScheduler)
    assert sched.rank_of.tolist() == [0, 1, 0, 1, 0]


def test_each_rank_admits_against_its_own_pool() -> None:
    # Five requests of 100 + 10 tokens (each admission reserves 110) on 2 ranks of 300 tokens
    # (299 below ``rem_total``): rank 0 gets requests 0, 2, 4 and takes two (330 > 299), rank 1
    # takes its two. One pool of 600 would take all five (550 <= 599).
    replica = _replica([100] * 5, [10] * 5, ranks=2, blocks=300)
    sched = _step(replica)
    assert sorted(sched) == [0, 1, 2, 3]  # request 4 (rank 0's third) waits
    assert all(sched[rid] == 100 for rid in sched)
    assert len(replica.waiting) == 1


def test_one_rank_prefills_while_the_other_decodes() -> None:
    # Rank 0 gets requests 0 and 2, rank 1 request 1. Request 2 (a long prompt) is rank 0's
    # second: after the first step rank 1 decodes while rank 0 prefills request 2's chunks.
    replica = _replica([10, 10, 20_000], [50, 50, 5], ranks=2)
    first = _step(replica)
    assert first == {0: 10, 1: 10, 2: 8182}  # rank 0: its budget's rest goes to request 2
    second = _step(replica)
    assert second == {0: 0, 1: 1, 2: 8192}  # rank 0 prefills (its decode waits), rank 1 decodes


def test_each_rank_decays_its_own_ratio_and_resets_it_idle() -> None:
    """One request (rank 0) decodes 5 steps: rank 0's new-token ratio decays a step each,
    idle rank 1 keeps its initial ratio; once rank 0 is idle with an empty queue, the next
    schedule starts it over (``SglangScheduler``'s reset, per rank)."""
    replica = _replica([10], [6], ranks=2)
    sched = replica.scheduler
    assert isinstance(sched, SglangRankedScheduler)
    while len(replica.running.ids) or len(replica.waiting):
        _step(replica)
    assert sched.ratio_steps_of == [5, 0]  # the prefill step, then 5 decodes
    assert sched._ratio(0) == pytest.approx(sched.ratio_init - 5 * sched.ratio_decay)
    assert sched._ratio(1) == sched.ratio_init
    sched.schedule(replica.now)  # idle since the last step, nothing waiting
    assert sched.ratio_steps_of == [0, 0] and sched._ratio(0) == sched.ratio_init


def test_the_lockstep_takes_the_heaviest_ranks_local_work() -> None:
    replica = _replica([10, 10, 20_000], [50, 50, 5], ranks=2)
    _step(replica)
    decision = replica.scheduler.schedule(replica.now)
    # Union: 8193 tokens (8192 + 1), 8.194 s, experts 4.0965 s. The heaviest rank's 8192 tokens
    # x 2 ranks: 16.385 s, experts 8.192 s; its local work 8.193 s plus the union's experts.
    expected = (16.385 - 8.192 + 4.0965) - 8.194
    assert decision.swap_s == pytest.approx(expected, rel=1e-9)


def test_even_ranks_add_nothing() -> None:
    replica = _replica([100, 100], [5, 5], ranks=2)
    assert replica.scheduler.schedule(replica.now).swap_s == 0.0


def test_a_request_larger_than_a_ranks_pool_is_a_one_line_error() -> None:
    replica = _replica([300], [10], ranks=2, blocks=200)  # 400 pooled, 200 a rank
    with pytest.raises(InferplanError, match="DP-attention rank's pool") as err:
        replica.scheduler.schedule(0.0)
    assert "\n" not in str(err.value)


def test_session_picks_the_ranked_scheduler_for_sglang_under_dp_attention() -> None:
    plan = dp_plan()
    cfg = simulation_config(plan, ServingOptions(engine="sglang"))
    assert cfg.scheduler.scheduler == ranked_scheduler(8) and cfg.exact
    vllm = simulation_config(plan, ServingOptions(engine="vllm"))
    assert vllm.scheduler.scheduler == "continuous" and not vllm.exact


def _workload(n: int, max_input: int, max_output: int, rate: float, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        arrival_s=arrival_times_s(n, rate, 1.0, seed),
        input_tokens=rng.integers(1, max_input + 1, size=n).astype(np.int64),
        output_tokens=rng.integers(1, max_output + 1, size=n).astype(np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )


def _run(wl: Workload, *, exact: bool, ranks: int, blocks: int, budget: int) -> SimulationResult:
    longest = int((wl.input_tokens + wl.output_tokens).max()) + 2
    cfg = SimulationConfig(
        SchedulerConfig(
            max_num_batched_tokens=budget * ranks,
            max_num_seqs=16 * ranks,
            block_size=1,
            num_blocks=max(blocks, longest) * ranks,
            scheduler=ranked_scheduler(ranks),
        ),
        longest,
        exact=exact,
    )
    return Simulation(wl, cfg, _model()).run(check=lambda r: r.check_invariants())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(5, 20),
    max_input=st.integers(1, 500),
    max_output=st.integers(1, 200),
    rate=st.sampled_from([20.0, math.inf]),
    seed=st.integers(0, 2**16),
    ranks=st.sampled_from([2, 3]),
    blocks=st.sampled_from([0, 600, 100_000]),
    budget=st.sampled_from([64, 4096]),
)
def test_fast_mode_equals_exact_mode_and_invariants_hold(
    n: int, max_input: int, max_output: int, rate: float, seed: int, ranks: int, blocks: int,
    budget: int,
) -> None:  # fmt: skip
    wl = _workload(n, max_input, max_output, rate, seed)
    fast, exact = (
        _run(wl, exact=mode, ranks=ranks, blocks=blocks, budget=budget) for mode in (False, True)
    )
    assert fast.num_steps == exact.num_steps
    assert np.all(exact.records.status == int(RequestStatus.COMPLETED))
    np.testing.assert_array_equal(fast.records.output_tokens, wl.output_tokens)
    for name in ("first_token_s", "finish_s", "max_itl_s"):
        f, e = getattr(fast.records, name), getattr(exact.records, name)
        np.testing.assert_array_equal(f, e, err_msg=name)


def test_a_budget_below_the_ranks_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Each rank takes the budget // ranks tokens a step: 1 over 2 ranks leaves none."""
    argv = "simulate --engine sglang --model Qwen3-30B-A3B --gpu h200 -dp 2"
    argv += " --enable-expert-parallel --dataset-name random --num-prompts 4"
    argv += " --random-input-len 100 --random-output-len 20 --max-num-batched-tokens 1"
    assert main(argv.split()) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --max-num-batched-tokens 1: ") and "at least 2" in err
    assert err.count("\n") == 1


def test_a_rank_that_retracts_reestimates_its_own_ratio_only() -> None:
    """Rank 0 holds four decoding requests in 266 of its 268 tokens (the pooled scheduler's
    retraction test, ``test_sglang.py``), rank 1 one request with room to spare. Rank 0 retracts
    its 120-token prompt (fewest generated, then the longest prompt) and re-estimates its ratio
    over its three left, before this step's tokens: (3 + 1 + 5 + 20 x 3) / (300 + 1). Rank 1
    decodes and decays its own ratio by the step; rank 0's starts over from the estimate."""
    prompts, generated = [50, 80, 120, 10, 10], [3, 1, 1, 5, 2]
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192 * 2,
        max_num_seqs=64 * 2,
        block_size=1,
        num_blocks=268 * 2,
        scheduler=ranked_scheduler(2),
    )
    replica = replica_at_zero(prompts, [100] * 5, cfg, _Linear())
    run, sched = replica.running, replica.scheduler
    assert isinstance(sched, SglangRankedScheduler)
    for rid, (p, g) in enumerate(zip(prompts, generated, strict=True)):
        run.append(rid, p + g - 1, p + g, g, 100, p + g - 1, 0.0)
    sched.rank_of[:] = [0, 0, 0, 0, 1]
    sched.dispatched[:] = True
    sched.ratio_steps_of[:] = [10, 10]  # both ranks decayed 10 steps so far
    replica.pool.free = 268 * 2 - int(run.held_blocks.sum())
    assert _step(replica) == {0: 1, 1: 1, 3: 1, 4: 1}
    assert replica.records.num_preemptions.tolist() == [0, 0, 1, 0, 0]
    assert sched._ratio(0) == pytest.approx(69 / 301)
    assert sched.ratio_steps_of == [0, 11]
    assert sched._ratio(1) == pytest.approx(sched.ratio_init - 11 * sched.ratio_decay)


def test_simulate_notes_that_the_radix_cache_is_off_under_dp_attention(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Shared prefixes on SGLang under DP attention: one line on stderr says no prefix hit is
    counted (one radix tree per rank, not emulated)."""
    argv = "simulate --engine sglang --model Qwen3-30B-A3B --gpu h200 -dp 2"
    argv += " --enable-expert-parallel --dataset-name random --num-prompts 4"
    argv += " --random-input-len 100 --random-output-len 20 --random-prefix-len 50 --json"
    assert main(argv.split()) == 0
    err = capsys.readouterr().err
    assert "note: SGLang's radix cache is not emulated under DP attention (2 ranks" in err


def test_the_radix_note_only_where_the_cache_would_have_applied() -> None:
    plan = dp_plan()  # 8 DP-attention ranks
    wl = _workload(4, 100, 20, math.inf, 0)
    shared = replace(wl, prefix_hashes=((1, 2),) * 4, prefix_block_tokens=16)
    sglang = ServingOptions(engine="sglang")
    assert "8 ranks" in (sglang_radix_note(plan, shared, sglang) or "")
    assert sglang_radix_note(plan, wl, sglang) is None  # nothing shared to hit
    off = ServingOptions(engine="sglang", enable_prefix_caching=False)
    assert sglang_radix_note(plan, shared, off) is None
    assert sglang_radix_note(plan, shared, ServingOptions(engine="vllm")) is None
    one_rank = replace(plan, parallelism=replace(plan.parallelism, dp=1))
    assert one_rank.parallelism.attention_dp == 1
    assert sglang_radix_note(one_rank, shared, sglang) is None
