"""SGLang's scheduler with its radix cache (``engine/sglang.py``, ``memory/radixcache.py``) and
SGLang's retraction rule: hand-computed hits, locks in the admission test, no sharing within a
prefill round, retraction count and order, re-hits after retraction; fast == exact with
invariants after every step on shared-prefix and session workloads; flags."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli import main
from inferplan.cli_flags import build_memory_plan
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.sglang import RETRACT_DECODE_STEPS, SglangScheduler, new_token_ratios
from inferplan.engine.sglang_lpm import lpm_order
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.radixcache import RadixCache
from inferplan.metrics.records import RequestStatus
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload, build_workload
from inferplan.workload.prefixes import with_shared_prefix

from .replica_helpers import replica_at_zero
from .session_workload import conversation_workload


@cache
def _model() -> StepTimeModel:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return build_step_model(plan)


def _replica(
    prompts: list[int],
    outputs: list[int],
    chains: tuple[tuple[int, ...], ...],
    blocks: int,
    policy: str = "fcfs",
) -> Replica:
    """A page-size-1 SGLang replica whose requests carry ``chains`` of 16-token entries."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192,
        max_num_seqs=64,
        block_size=1,
        num_blocks=blocks,
        scheduler="sglang",
        enable_prefix_caching=True,
    )
    replica = replica_at_zero(prompts, outputs, cfg, _model(), WaitingQueue(policy, None))
    n = len(prompts)
    zeros = np.zeros(n, dtype=np.int64)
    records = replace(replica.records, cached_tokens=zeros, prefix_queried_tokens=zeros.copy())
    replica.records = replica.scheduler.records = records
    replica.pool.cache = RadixCache(chains, 16)
    assert isinstance(replica.scheduler, SglangScheduler)
    return replica


def _step(replica: Replica) -> list[int]:
    decision = replica.scheduler.schedule(replica.now)
    sched = {int(r): int(t) for r, t in zip(replica.running.ids, decision.sched, strict=True)}
    replica._run(decision)
    replica.check_invariants()
    return [sched.get(rid, 0) for rid in range(replica.records.num_requests)]


def _drain(replica: Replica) -> None:
    while replica.has_work:
        _step(replica)


def test_a_later_request_hits_the_shared_prefix_and_computes_only_the_rest() -> None:
    # Both prompts: 64 shared tokens (4 entries) + 20 of their own.
    replica = _replica([84, 84], [3, 3], ((1, 2, 3, 4, 5), (1, 2, 3, 4, 6)), 10_000)
    replica.add_request(0)
    _drain(replica)
    replica.add_request(1)
    assert _step(replica) == [0, 84 - 64]
    cached = replica.records.cached_tokens
    assert cached is not None and cached.tolist() == [0, 64]


def test_requests_admitted_in_one_round_do_not_share_a_new_prefix() -> None:
    """SGLang matches every request before the round's inserts: both compute the prefix; the
    second's copy is freed when it inserts (it adopts the first's entries)."""
    replica = _replica([84, 84], [3, 3], ((1, 2, 3, 4, 5), (1, 2, 3, 4, 6)), 10_000)
    replica.add_request(0)
    replica.add_request(1)
    assert _step(replica) == [84, 84]
    cached = replica.records.cached_tokens
    assert cached is not None and cached.tolist() == [0, 0]
    cache = replica.pool.cache
    assert cache is not None and cache.shared_blocks == 4 * 16  # entries 1-4 locked twice


def test_a_finished_request_inserts_its_output_when_the_hashes_cover_it() -> None:
    """Turn 1: 32-token prompt (entries 1, 2), 40 outputs (entries 3, 4 full once computed);
    turn 2's prompt is turn 1's context + 20 new tokens. Its hit covers turn 1's output."""
    replica = _replica([32, 92], [40, 2], ((1, 2, 3, 4), (1, 2, 3, 4, 5)), 10_000)
    cache = replica.pool.cache
    assert cache is not None
    cache.covers_output = True
    replica.add_request(0)
    _drain(replica)
    assert set(cache.refs) == {1, 2, 3, 4}  # 71 computed tokens: four full entries
    replica.add_request(1)
    assert _step(replica) == [0, 92 - 64]
    cached = replica.records.cached_tokens
    assert cached is not None and cached.tolist() == [0, 64]


def test_the_hit_lock_counts_in_the_admission_test() -> None:
    """A finished request leaves 5 entries (80 tokens) cached-free. The head hits 4 of them:
    it needs 84 - 64 + 10 = 30 tokens, and locking its hit takes 64 evictable tokens."""
    replica = _replica([84, 84], [1, 10], ((1, 2, 3, 4, 5), (1, 2, 3, 4, 6)), 10_000)
    replica.add_request(0)
    _drain(replica)
    replica.add_request(1)
    sched = replica.scheduler
    assert sched.head_chunk(8192, 30 + 64) == 20
    assert sched.head_chunk(8192, 30 + 64 - 1) is None


def test_retraction_frees_room_for_twenty_steps_of_those_left_in_order() -> None:
    """``retract_decode``: fewest generated first (ties: longest prompt) until the free tokens
    cover RETRACT_DECODE_STEPS decode steps of those left; a prompt stays in the tree."""
    prompts, generated = [40, 30, 20, 10], [2, 1, 1, 3]
    chains: tuple[tuple[int, ...], ...] = ((1, 2), (3,), (4,), ())
    held = [p + g - 1 for p, g in zip(prompts, generated, strict=True)]
    replica = _replica([*prompts], [100] * 4, chains, sum(held) + 3)
    run, sched = replica.running, replica.scheduler
    for rid, (p, g) in enumerate(zip(prompts, generated, strict=True)):
        run.append(rid, p + g - 1, p + g, g, 100, p + g - 1, 0.0)
    replica.pool.free = 3  # four decodes need 4 tokens
    assert RETRACT_DECODE_STEPS == 20
    # Victims: the 30-token prompt (1 generated, the longer prompt): free 3 + 30 = 33 < 20 * 3;
    # then the 20-token one: free 53 >= 20 * 2. Retracting until the next step fits would
    # have stopped after one.
    assert _step(replica) == [1, 0, 0, 1]
    assert replica.records.num_preemptions.tolist() == [0, 1, 1, 0]
    assert [replica.waiting.pop() for _ in range(2)] == [1, 2]  # retracted to the tail
    assert isinstance(sched, SglangScheduler)
    assert sched.ratio_base == pytest.approx((2 + 3 + 20 * 2) / (200 + 1))


def test_a_retracted_request_hits_its_own_prompt_when_it_comes_back() -> None:
    """Its prompt stays in the tree, unlocked: on its return it re-prefills only what the
    four cached entries (64 tokens) do not cover, its generated tokens."""
    chains = ((1, 2, 3, 4), (5, 6, 7, 8))
    replica = _replica([64, 64], [32, 20], chains, 93 + 68)
    run, cache = replica.running, replica.pool.cache
    assert cache is not None
    run.append(0, 93, 94, 30, 32, 93, 0.0)  # 30 generated, 2 to go
    run.append(1, 68, 69, 5, 20, 68, 0.0)  # 5 generated: the victim
    for rid in (0, 1):
        assert isinstance(cache, RadixCache) and cache.insert(rid, 4) == 0
    replica.pool.free = 0
    assert _step(replica) == [1, 0]
    assert _step(replica) == [1, 0]  # request 0 finishes; 4 uncached free tokens sufficed
    assert _step(replica) == [0, 69 - 64]
    rec = replica.records
    assert rec.num_preemptions.tolist() == [0, 1]
    assert rec.recomputed_tokens.tolist() == [0, 68]
    assert rec.cached_tokens is not None and rec.cached_tokens.tolist() == [0, 64]


def test_lpm_admits_the_longest_match_first_and_fcfs_the_oldest() -> None:
    """Request 0 finishes and leaves 1-2-3-4 cached. Then 1 (no match), 2 (2 entries) and 3 (4
    entries) wait; lpm sorts them 3, 2, 1 (fcfs keeps 1, 2, 3)."""
    chains = ((1, 2, 3, 4, 5), (9,), (1, 2, 7), (1, 2, 3, 4, 8))
    for policy, order in (("lpm", [3, 2, 1]), ("fcfs", [1, 2, 3])):
        replica = _replica([84, 20, 40, 84], [1, 2, 2, 2], chains, 10_000, policy=policy)
        replica.add_request(0)
        _drain(replica)
        for rid in (1, 2, 3):
            replica.add_request(rid)
        sched = replica.scheduler
        assert isinstance(sched, SglangScheduler)
        sched._sort_waiting()
        assert replica.waiting.in_order() == order


def test_lpm_in_batch_duplicates_wait_behind_the_first() -> None:
    """No match in the tree; 0 and 2 share two entries (32 tokens): 2 goes last so that 0
    caches the prefix first (SGLang's in-batch prefix caching)."""
    order = lpm_order([0, 1, 2, 3], [0, 0, 0, 48], [(1, 2, 3), (5,), (1, 2, 6), (7, 8, 9)], 16)
    assert order == [3, 0, 1, 2]
    # One shared entry (16 tokens) is below the 32-token threshold: nobody is deprioritized.
    assert lpm_order([0, 1], [0, 0], [(1, 2), (1, 3)], 16) == [0, 1]


# ---- whole runs ---------------------------------------------------------------------------


def _config(
    wl: Workload, spare: int, budget: int, dp: int, *, exact: bool, policy: str = "fcfs"
) -> SimulationConfig:
    longest = int((wl.input_tokens + wl.output_tokens).max())
    sched = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=64,
        block_size=1,
        num_blocks=longest + 2 + spare,
        scheduler="sglang",
        enable_prefix_caching=True,
    )
    return SimulationConfig(
        sched, longest, data_parallel_size=dp, exact=exact, scheduling_policy=policy
    )


def _run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    return Simulation(wl, cfg, _model()).run(check=lambda replica: replica.check_invariants())


def _assert_same(f: SimulationResult, e: SimulationResult) -> None:
    assert f.num_steps == e.num_steps
    a, b = f.records, e.records
    assert np.all(b.status == int(RequestStatus.COMPLETED))
    for name in ("status", "num_preemptions", "recomputed_tokens", "cached_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(
            getattr(a, name), getattr(b, name), rtol=1e-9, equal_nan=True, err_msg=name
        )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.integers(1, 300),
    groups=st.integers(1, 4),
    spare=st.sampled_from([0, 100, 400, 3000]),
    budget=st.sampled_from([64, 256, 2048]),
    dp=st.sampled_from([1, 1, 2]),
    rate=st.sampled_from([5.0, 50.0, math.inf]),
    seed=st.integers(0, 1000),
    policy=st.sampled_from(["fcfs", "lpm"]),
)
def test_fast_equals_exact_on_shared_prefixes(
    prefix: int, groups: int, spare: int, budget: int, dp: int, rate: float, seed: int,
    policy: str,
) -> None:  # fmt: skip
    wl = _prefix_workload(prefix, groups, rate, seed)
    fast = _run(wl, _config(wl, spare, budget, dp, exact=False, policy=policy))
    exact = _run(wl, _config(wl, spare, budget, dp, exact=True, policy=policy))
    _assert_same(fast, exact)


def _prefix_workload(prefix: int, groups: int, rate: float, seed: int) -> Workload:
    base = build_workload(
        "random",
        num_prompts=40,
        random_input_len=60,
        random_output_len=40,
        random_range_ratio=0.9,
        request_rate=rate,
        seed=seed,
    )
    return with_shared_prefix(base, prefix, groups, seed)


def test_the_step_after_a_finish_unlatches_even_when_its_own_admission_failed() -> None:
    """The case that caught a stretch starting right after a finish: that step's admission
    fails and latches, but ``update_running_batch`` sees the batch shrank and unlatches, so
    the next step retries with the ratio one decay on and admits request 39 (121 prompt
    tokens, two 64-token chunks) before request 22 finishes. A stretch run from that step
    kept the latch and ran 22 to its finish first (39's first token 5 ms late, 22's finish
    11 ms early)."""
    wl = _prefix_workload(14, 1, math.inf, 78)
    fast = _run(wl, _config(wl, 3000, 64, 1, exact=False))
    exact = _run(wl, _config(wl, 3000, 64, 1, exact=True))
    _assert_same(fast, exact)
    assert (int(wl.input_tokens[39]), int(wl.output_tokens[39])) == (121, 42)
    for result in (fast, exact):
        assert result.records.first_token_s[39] < result.records.finish_s[22]


def test_a_shrunk_batch_with_a_waiting_head_is_stepped_exactly() -> None:
    """Not latched, a finish since the last step, a head that cannot join: the next step must
    still be exact (it unlatches), while the same batch without the finish may stretch."""
    replica = _replica([40, 40], [5, 5], ((), ()), 85)
    sched = replica.scheduler
    assert isinstance(sched, SglangScheduler)
    replica.add_request(0)
    replica.add_request(1)
    # The first needs 40 + 5 = 45 <= 84 tokens; the second 45 > 84 - 45 (NO_TOKEN: latched).
    assert _step(replica) == [40, 0]
    assert sched.batch_is_full and not sched.head_can_join()
    # Unlatched it still cannot join: 45 free less 0.7 * 5 reserved leaves 41.
    sched.batch_is_full = False
    assert not sched.head_can_join()  # nothing shrank: a stretch may run
    sched.batch_size_seen = len(sched.running) + 1  # a row finished at the last step
    assert sched.head_can_join()
    sched.batch_is_full = True
    assert sched.head_can_join()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spare=st.integers(0, 300),
    num_sessions=st.integers(1, 6),
    seed=st.integers(0, 1000),
    policy=st.sampled_from(["fcfs", "lpm"]),
    cover_output=st.booleans(),
)
def test_fast_equals_exact_on_conversation_sessions(
    spare: int, num_sessions: int, seed: int, policy: str, cover_output: bool
) -> None:
    """Turns of conversations; with ``cover_output`` (as a session trace gives) a finished
    turn inserts its output entries too, which the next turn hits."""
    wl = conversation_workload(seed, num_sessions, cover_output)
    fast = _run(wl, _config(wl, spare, 256, 1, exact=False, policy=policy))
    exact = _run(wl, _config(wl, spare, 256, 1, exact=True, policy=policy))
    _assert_same(fast, exact)


# ---- flags --------------------------------------------------------------------------------


def test_radix_cache_is_on_by_default_and_off_with_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h100", "--engine", "sglang"]
    run = [*base, "--num-prompts", "20", "--random-input-len", "300", "--json"]
    prefix = [*run, "--random-prefix-len", "1000", "--request-rate", "1"]
    assert main(prefix) == 0
    out = capsys.readouterr().out
    assert '"prefix_cache_hit_rate"' in out and '"prefix_cache_hit_rate": null' not in out
    assert main([*prefix, "--no-enable-prefix-caching"]) == 0
    assert '"prefix_cache_hit_rate"' not in capsys.readouterr().out
    assert main([*prefix, "--scheduling-policy", "lpm"]) == 0
    capsys.readouterr()
    vllm = [*run[:5], "--engine", "vllm", *run[7:]]
    assert main([*vllm, "--scheduling-policy", "lpm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--scheduling-policy lpm" in err and "sglang" in err


def test_schedule_conservativeness_scales_the_ratio_as_sglang_does() -> None:
    assert new_token_ratios(1.0) == pytest.approx((0.7, 0.098, 0.602 / 600))
    assert new_token_ratios(0.5) == pytest.approx((0.35, 0.049, 0.301 / 600))
    assert new_token_ratios(2.0) == pytest.approx((1.0, 0.14, 0.86 / 600))  # init capped at 1


@pytest.mark.parametrize(("conservativeness", "joins"), [(1.0, False), (0.5, True)])
def test_a_less_conservative_ratio_admits_sooner(conservativeness: float, joins: bool) -> None:
    """A (100 + 1000) runs one decode step; then B (100 + 1150) arrives: free 1899 tokens less
    ratio * A's 998 left: 1201.4 < 1250 at the default ratio (0.7 - D), 1550.2 at half."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192,
        max_num_seqs=64,
        block_size=1,
        num_blocks=2000,
        scheduler="sglang",
        schedule_conservativeness=conservativeness,
    )
    replica = replica_at_zero([100, 100], [1000, 1150], cfg, _model())
    replica.add_request(0)
    assert _step(replica) == [100, 0]
    assert _step(replica) == [1, 0]
    replica.add_request(1)
    assert _step(replica) == ([0, 100] if joins else [1, 0])


def test_schedule_conservativeness_flag_errors(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h100", "--num-prompts", "5"]
    assert main([*base, "--engine", "sglang", "--schedule-conservativeness", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--schedule-conservativeness" in err and "> 0" in err
    assert main([*base, "--engine", "vllm", "--schedule-conservativeness", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--engine sglang" in err
    assert main([*base, "--engine", "sglang", "--schedule-conservativeness", "0.5", "--json"]) == 0
