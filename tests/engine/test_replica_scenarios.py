"""Hand-computed scheduler scenarios: a ``Replica`` driven step by step, without the event loop.

Each test builds a replica with a few requests through the small factory helpers below, runs
``step()`` by hand and checks what vLLM v1's scheduler would do (notes/engines.md §1): step times
equal the step-time model's for the batch the scheduler formed, chunked prefill splits a prompt
by the token budget, recompute preemption takes the last-admitted request to the head of the
waiting queue, static batching never admits while a batch runs, and a head that does not fit
blocks the queue.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig
from inferplan.metrics.records import RequestStatus
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload

from .replica_helpers import replica_at_zero


@cache
def _model() -> StepTimeModel:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return build_step_model(plan)


def _time(**batch: int | float) -> float:
    return _model().step_time(StepBatch(**batch)).total_s  # type: ignore[arg-type]


def _prefill_s(chunk: int, cached: int = 0) -> float:
    return _time(
        prefill_tokens=chunk,
        prefill_attention_pairs=chunk_attention_pairs(chunk, cached),
        prefill_context_tokens=cached,
        num_prefill_seqs=1,
    )


def _decode_s(contexts: list[int]) -> float:
    """One decode step; ``contexts`` are each sequence's KV length including the new token."""
    return _time(num_decode_seqs=len(contexts), decode_context_tokens=sum(contexts))


def _replica(
    prompts: list[int],
    outputs: list[int],
    *,
    budget: int = 8192,
    max_num_seqs: int = 1024,
    block_size: int = 16,
    num_blocks: int = 10_000,
    preemption_mode: str = "recompute",
    scheduler: str = "continuous",
    kv_block_bytes: float = 0.0,
    num_scheduler_steps: int = 1,
    waiting: WaitingQueue | None = None,
) -> Replica:
    """A replica with requests ``0..n-1`` known to it (none queued yet: see ``add_request``)."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_blocks=num_blocks,
        preemption_mode=preemption_mode,
        scheduler=scheduler,
        kv_block_bytes=kv_block_bytes,
        num_scheduler_steps=num_scheduler_steps,
    )
    return replica_at_zero(prompts, outputs, cfg, _model(), waiting)


def _with_all_queued(replica: Replica) -> Replica:
    for rid in range(replica.records.num_requests):
        replica.add_request(rid)
    return replica


def _run_to_end(replica: Replica, max_steps: int = 10_000) -> None:
    for _ in range(max_steps):
        if not replica.has_work:
            return
        replica.step()
        replica.check_invariants()
    raise AssertionError("replica did not drain")


# ---- one request: latency is the sum of its step times -------------------------------------


def test_single_request_ttft_and_e2e_are_sums_of_model_step_times() -> None:
    prompt, output = 100, 5
    replica = _with_all_queued(_replica([prompt], [output]))
    _run_to_end(replica)
    rec = replica.records
    ttft = _prefill_s(prompt)
    decodes = [_decode_s([prompt + i + 1]) for i in range(output - 1)]
    assert rec.first_token_s[0] == pytest.approx(ttft, rel=1e-12)
    assert rec.finish_s[0] == pytest.approx(ttft + sum(decodes), rel=1e-12)
    assert rec.status[0] == int(RequestStatus.COMPLETED)
    assert rec.output_tokens[0] == output
    assert replica.num_steps == output
    assert replica.pool.free == replica.cfg.num_blocks
    assert rec.max_itl_s[0] == pytest.approx(max(decodes), rel=1e-12)


def test_single_request_fast_mode_gives_the_same_latency() -> None:
    """The event loop in fast mode (one closed-form stretch) gives the hand-summed latency."""
    prompt, output = 300, 200
    wl = Workload(
        arrival_s=np.zeros(1),
        input_tokens=np.array([prompt]),
        output_tokens=np.array([output]),
        class_ids=np.zeros(1, dtype=np.int64),
    )
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192, max_num_seqs=16, block_size=16, num_blocks=100
    )
    res = Simulation(wl, SimulationConfig(cfg, 1024, exact=False), _model()).run()
    ttft = _prefill_s(prompt)
    e2e = ttft + sum(_decode_s([prompt + i + 1]) for i in range(output - 1))
    assert res.records.first_token_s[0] == pytest.approx(ttft, rel=1e-12)
    assert res.records.finish_s[0] == pytest.approx(e2e, rel=1e-9)
    assert res.num_steps == output


def test_two_simultaneous_requests_share_steps() -> None:
    replica = _with_all_queued(_replica([40, 60], [3, 2]))
    replica.step()  # both prefill in one step
    both = _time(
        prefill_tokens=100,
        prefill_attention_pairs=chunk_attention_pairs(40, 0) + chunk_attention_pairs(60, 0),
        num_prefill_seqs=2,
    )
    assert replica.now == pytest.approx(both, rel=1e-12)
    assert replica.records.first_token_s[0] == replica.records.first_token_s[1] == replica.now
    replica.step()  # both decode; request 1 finishes
    assert replica.now == pytest.approx(both + _decode_s([41, 61]), rel=1e-12)
    assert replica.records.status[1] == int(RequestStatus.COMPLETED)
    replica.step()  # request 0 alone
    assert replica.records.finish_s[0] == pytest.approx(
        both + _decode_s([41, 61]) + _decode_s([42]), rel=1e-12
    )


# ---- chunked prefill -------------------------------------------------------------------------


def test_chunked_prefill_150_tokens_with_budget_64_takes_three_steps() -> None:
    replica = _with_all_queued(_replica([150], [2], budget=64))
    rec = replica.records
    expected = 0.0
    for chunk, cached in [(64, 0), (64, 64)]:
        replica.step()
        expected += _prefill_s(chunk, cached)
        assert math.isnan(rec.first_token_s[0])  # a non-final chunk's sample is discarded
        assert replica.now == pytest.approx(expected, rel=1e-12)
    replica.step()
    expected += _prefill_s(22, 128)
    assert rec.first_token_s[0] == pytest.approx(expected, rel=1e-12)
    assert replica.num_steps == 3
    assert int(replica.running.num_computed[0]) == 150


def test_prefill_chunk_shares_the_budget_with_running_decodes() -> None:
    """Running decodes take one token each; the next prefill gets what is left."""
    big = _replica([10, 10, 100], [5, 5, 1], budget=64)
    big.add_request(0)
    big.add_request(1)
    big.step()  # both prefill (20 tokens)
    big.add_request(2)
    big.step()  # 2 decodes + a 62-token chunk of request 2
    assert big.running.num_computed.tolist() == [11, 11, 62]
    assert big.now == pytest.approx(
        _time(
            prefill_tokens=20,
            prefill_attention_pairs=2 * chunk_attention_pairs(10, 0),
            num_prefill_seqs=2,
        )
        + _time(
            prefill_tokens=62,
            prefill_attention_pairs=chunk_attention_pairs(62, 0),
            num_prefill_seqs=1,
            num_decode_seqs=2,
            decode_context_tokens=22,
        ),
        rel=1e-12,
    )


# ---- preemption ------------------------------------------------------------------------------


def _two_running_at_block_boundary(preemption_mode: str) -> Replica:
    """Block size 4, 4 blocks: two 4-token prompts each fill 2 blocks after 4 decodes; the next
    decode needs a third block each and the pool is empty."""
    replica = _replica(
        [4, 4, 4],
        [10, 10, 3],  # 4 + 10 tokens fit in the pool: one request can always finish
        block_size=4,
        num_blocks=4,
        preemption_mode=preemption_mode,
        kv_block_bytes=1e6,
    )
    replica.add_request(0)
    replica.add_request(1)
    for _ in range(5):
        replica.step()
        replica.check_invariants()
    assert replica.running.num_computed.tolist() == [8, 8]
    assert replica.pool.free == 0
    replica.add_request(2)  # waits behind; the preempted request must go ahead of it
    return replica


def test_recompute_preemption_takes_the_last_admitted_to_the_head_of_waiting() -> None:
    replica = _two_running_at_block_boundary("recompute")
    replica.step()
    replica.check_invariants()
    rec = replica.records
    assert replica.running.ids.tolist() == [0]
    assert rec.num_preemptions.tolist() == [0, 1, 0]
    assert rec.recomputed_tokens.tolist() == [0, 8, 0]
    # Prepended, and it must now recompute prompt + the 5 tokens it generated.
    assert replica.waiting.peek() == (1, 9)
    assert len(replica.waiting) == 2
    assert replica.pool.free == 4 - 3
    _run_to_end(replica)
    assert rec.status.tolist() == [int(RequestStatus.COMPLETED)] * 3
    assert rec.output_tokens.tolist() == [10, 10, 3]
    assert rec.first_scheduled_s[2] > rec.first_scheduled_s[1]


def test_no_admission_in_a_step_that_preempted() -> None:
    replica = _two_running_at_block_boundary("recompute")
    replica.step()
    # Request 1's 2 blocks were freed and request 0 took one; one block is free and request 2's
    # prompt fits in it, but vLLM admits nothing in a step that preempted.
    assert 2 not in replica.running.ids.tolist()


def test_swap_preemption_moves_kv_to_host_and_charges_the_link() -> None:
    replica = _two_running_at_block_boundary("swap")
    before = replica.now
    replica.step()
    rec = replica.records
    assert rec.num_preemptions.tolist() == [0, 1, 0]
    assert rec.recomputed_tokens.tolist() == [0, 0, 0]
    assert rec.swapped_bytes[1] == 2 * 1_000_000
    assert replica.swapped[0][0] == 1
    swap_s = 2 * 1e6 / replica.cfg.host_link_bytes_s
    assert replica.now - before == pytest.approx(_decode_s([9]) + swap_s, rel=1e-12)
    replica.step()  # request 1 cannot come back yet: request 0 holds 3 of the 4 blocks
    assert rec.swapped_bytes[1] == 2 * 1_000_000
    _run_to_end(replica)
    assert rec.status.tolist() == [int(RequestStatus.COMPLETED)] * 3
    assert rec.swapped_bytes[1] >= 4 * 1_000_000  # out, and back in


# ---- admission rules ---------------------------------------------------------------------------


def test_static_batching_never_admits_while_a_batch_runs() -> None:
    replica = _with_all_queued(
        _replica([10, 10, 10], [2, 6, 2], max_num_seqs=2, scheduler="static")
    )
    replica.step()
    assert replica.running.ids.tolist() == [0, 1]
    replica.step()  # request 0 finishes: a slot is free, but the batch is still running
    assert replica.records.status[0] == int(RequestStatus.COMPLETED)
    while len(replica.running):
        assert 2 not in replica.running.ids.tolist()
        replica.step()
        replica.check_invariants()
    replica.step()
    assert replica.running.ids.tolist() == [2]
    assert replica.records.first_scheduled_s[2] == replica.records.finish_s[1]


def test_continuous_batching_admits_into_the_freed_slot() -> None:
    replica = _with_all_queued(_replica([10, 10, 10], [2, 6, 2], max_num_seqs=2))
    replica.step()
    replica.step()  # request 0 finishes
    replica.step()
    assert replica.running.ids.tolist() == [1, 2]


def test_static_batching_reserves_prompt_plus_output() -> None:
    # 16-token blocks, 5 blocks: request 0 reserves ceil((10 + 60) / 16) = 5, so request 1
    # (which alone would fit) waits although the first chunk of each needs just one block.
    replica = _with_all_queued(
        _replica([10, 10], [60, 5], num_blocks=5, scheduler="static", block_size=16)
    )
    replica.step()
    assert replica.running.ids.tolist() == [0]
    _run_to_end(replica)
    assert replica.records.num_preemptions.sum() == 0


def test_trtllm_admits_beside_running_requests_within_their_reservations() -> None:
    # GUARANTEED_NO_EVICT: 16-token blocks, 9 blocks. Request 0 reserves ceil((10 + 60) / 16) = 5;
    # request 1 needs ceil((10 + 40) / 16) = 4 more: both run at once (unlike static batching),
    # request 2 (4 more blocks) waits until one finishes, and nothing is ever preempted.
    replica = _with_all_queued(
        _replica([10, 10, 10], [60, 40, 40], num_blocks=9, scheduler="trtllm", block_size=16)
    )
    replica.step()
    assert replica.running.ids.tolist() == [0, 1]
    while replica.records.status[1] != int(RequestStatus.COMPLETED):
        assert 2 not in replica.running.ids.tolist()
        replica.step()
        replica.check_invariants()
    _run_to_end(replica)
    assert replica.records.num_preemptions.sum() == 0
    assert replica.records.first_scheduled_s[2] >= replica.records.finish_s[1]


def test_trtllm_schedules_prompts_whole() -> None:
    # Without chunked context a 150-token prompt waits for a step with 150 tokens of budget:
    # with a 100-token budget it can never run, and nothing behind it is admitted.
    replica = _with_all_queued(_replica([150, 10], [5, 5], budget=100, scheduler="trtllm"))
    replica.step()
    assert len(replica.running) == 0
    roomy = _with_all_queued(_replica([150, 10], [5, 5], budget=200, scheduler="trtllm"))
    roomy.step()
    assert roomy.running.num_computed.tolist() == [150, 10]  # both prompts whole in one step


def test_head_of_line_blocking() -> None:
    # 10 blocks of 16 tokens; request 0 holds 2. Request 1 (200 tokens, 13 blocks) cannot be
    # admitted; request 2 (16 tokens) would fit but waits behind it (vLLM v1's break).
    replica = _replica([20, 200, 16], [50, 1, 1], num_blocks=14)
    replica.add_request(0)
    replica.step()
    replica.add_request(1)
    replica.add_request(2)
    for _ in range(5):
        replica.step()
        assert replica.running.ids.tolist() == [0]
        assert len(replica.waiting) == 2


def test_max_num_seqs_bounds_the_running_set() -> None:
    replica = _with_all_queued(_replica([5] * 7, [4] * 7, max_num_seqs=3))
    while replica.has_work:
        replica.step()
        replica.check_invariants()
        assert len(replica.running) <= 3
    assert replica.records.status.tolist() == [int(RequestStatus.COMPLETED)] * 7


# ---- regressions -------------------------------------------------------------------------------


def test_one_token_final_prefill_chunk_records_first_token() -> None:
    # Regression: a 65-token prompt with a 64-token budget; the second chunk is 1 token, and it
    # is the request's prefill, not a decode (fast mode once stretched over it).
    wl = Workload(
        arrival_s=np.zeros(1),
        input_tokens=np.array([65]),
        output_tokens=np.array([10]),
        class_ids=np.zeros(1, dtype=np.int64),
    )
    cfg = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, block_size=16, num_blocks=100)
    res = Simulation(wl, SimulationConfig(cfg, 1024, exact=False), _model()).run()
    assert not math.isnan(res.records.first_token_s[0])


def test_prefill_first_runs_new_prompts_in_steps_of_their_own() -> None:
    # vLLM V0 without chunked prefill: request 0 decodes; when request 1 arrives the next step
    # is its whole prompt alone (request 0 waits a step), then both decode together.
    replica = _replica([100, 300], [5, 5], scheduler="prefill_first")
    replica.add_request(0)
    replica.step()
    assert replica.now == pytest.approx(_prefill_s(100))
    replica.step()
    replica.add_request(1)
    t = replica.now
    replica.step()
    assert replica.running.num_computed.tolist() == [101, 300]  # request 0 did not decode
    assert replica.now - t == pytest.approx(_prefill_s(300))
    t = replica.now
    replica.step()
    assert replica.running.num_computed.tolist() == [102, 301]
    assert replica.now - t == pytest.approx(_decode_s([102, 301]))


def test_prefill_first_batches_waiting_prompts_up_to_the_budget() -> None:
    # Three 300-token prompts with a 700-token budget: the first step takes two whole prompts,
    # the third (it would need 300 more) runs in the next step, before anyone decodes.
    replica = _with_all_queued(
        _replica([300, 300, 300], [3, 3, 3], budget=700, scheduler="prefill_first")
    )
    replica.step()
    assert replica.running.num_computed.tolist() == [300, 300]
    first = replica.now
    replica.step()
    assert replica.running.num_computed.tolist() == [300, 300, 300]
    firsts = replica.records.first_token_s
    assert firsts.tolist() == [first, first, replica.now]
    _run_to_end(replica)
    assert (replica.records.status == int(RequestStatus.COMPLETED)).all()


def test_multi_step_admits_new_prompts_only_between_blocks() -> None:
    # Prefill-first with 3 scheduler steps: request 0's prefill, then a block of 3 decodes.
    # Request 1 arrives after the first decode of the block: the next two steps still decode
    # request 0 alone, and its prefill runs at the block's end.
    replica = _replica([100, 50], [10, 5], scheduler="prefill_first", num_scheduler_steps=3)
    replica.add_request(0)
    replica.step()  # prefill
    replica.step()  # decode 1 of the block
    replica.add_request(1)
    for computed in (102, 103):  # decodes 2 and 3: the queue waits
        replica.step()
        assert replica.running.num_computed.tolist() == [computed]
    t = replica.now
    replica.step()
    assert replica.running.num_computed.tolist() == [103, 50]
    assert replica.now - t == pytest.approx(_prefill_s(50))
    _run_to_end(replica)
    assert (replica.records.status == int(RequestStatus.COMPLETED)).all()


# ---- priority preemption: the victim is the largest (priority, arrival) ----------------------


def _three_running_then_short(policy: str) -> Replica:
    """Request 1 (priority 5) is admitted first, then 0 (priority 0) and 2 (priority 1); at
    the next block boundary of 0 and 2 the 5-block pool has one block for two crossings."""
    keys = np.array([0.0, 5.0, 1.0])
    waiting = WaitingQueue(policy, keys if policy == "priority" else None)
    replica = _replica([4, 4, 4], [12, 12, 12], block_size=4, num_blocks=5, waiting=waiting)
    replica.add_request(1)
    replica.step()  # 1's prompt
    replica.add_request(0)
    replica.add_request(2)
    replica.step()  # 1 decodes (a new block), 0 and 2 prefill
    assert replica.running.ids.tolist() == [1, 0, 2]
    assert replica.pool.free == 1
    replica.step()  # 0 and 2 each cross into a second block: one of the three must go
    replica.check_invariants()
    return replica


def test_priority_preemption_victim_is_the_largest_priority_even_if_scheduled() -> None:
    """vLLM v1 (priority policy): victim = max(running, key=(priority, arrival)); here it is
    request 1, already granted this step, whose tokens go back to the budget."""
    replica = _three_running_then_short("priority")
    assert replica.records.num_preemptions.tolist() == [0, 1, 0]
    assert replica.running.ids.tolist() == [0, 2]
    assert replica.running.num_computed.tolist() == [5, 5]
    assert replica.waiting.peek() == (1, 6)  # prompt + 2 generated tokens to recompute
    _run_to_end(replica)
    assert replica.records.status.tolist() == [int(RequestStatus.COMPLETED)] * 3


def test_fcfs_preemption_victim_is_the_last_admitted() -> None:
    replica = _three_running_then_short("fcfs")
    assert replica.records.num_preemptions.tolist() == [0, 0, 1]
    assert replica.running.ids.tolist() == [1, 0]
