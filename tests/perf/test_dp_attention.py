"""DP attention (vLLM's data parallelism with expert parallelism): each of ``dp`` ranks runs
attention on its share of the batch and keeps its own KV; experts span all ``tp * dp`` ranks."""

from __future__ import annotations

import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.specs.kv import kv_bytes_per_token
from inferplan.specs.parallel import Parallelism

from .perf_helpers import assert_line_matches, decode, roofline


def test_parallelism_counts_devices_and_replicas() -> None:
    dp_ep = Parallelism(tp=8, dp=2, enable_expert_parallel=True)
    assert (dp_ep.attention_dp, dp_ep.num_replicas, dp_ep.devices_per_replica, dp_ep.ep) == (
        2,
        1,
        16,
        16,
    )
    plain = Parallelism(tp=8, dp=2)
    assert (plain.attention_dp, plain.num_replicas, plain.devices_per_replica) == (1, 2, 8)


def test_memory_plan_spreads_experts_and_keeps_kv_per_rank() -> None:
    one = build_memory_plan(
        "DeepSeek-R1", "h200", 8, 1, True, None, "auto", None, 0.9, None, None, None
    )
    two = build_memory_plan(
        "DeepSeek-R1", "h200", 8, 1, True, None, "auto", None, 0.9, None, None, None, dp=2
    )
    # Routed experts halve per device; attention and dense layers stay (replicated per rank).
    ffn_one = one.stages[0].weights.by_component_bytes["ffn"]
    ffn_two = two.stages[0].weights.by_component_bytes["ffn"]
    assert ffn_two < 0.55 * ffn_one
    attention_one = one.stages[0].weights.by_component_bytes["attention"]
    assert two.stages[0].weights.by_component_bytes["attention"] == attention_one
    # Each rank keeps the KV of its own sequences: capacity is per-rank blocks times dp.
    assert two.num_blocks == two.stages[0].num_blocks * 2
    assert two.num_blocks > 2 * one.num_blocks  # and each rank has more room for KV
    assert two.max_concurrent_seqs[4096] >= 2 * one.max_concurrent_seqs[4096]


@pytest.mark.parametrize("num_seqs", [2, 64, 1024])
def test_decode_line_holds_with_dp_attention(num_seqs: int) -> None:
    model = roofline("DeepSeek-V3", "h200", tp=8, dp=2, ep=True)
    assert_line_matches(model, num_seqs, num_seqs * 2000)


def test_each_rank_reads_only_its_share_of_the_kv() -> None:
    """A big decode batch split over two ranks: per-device KV traffic halves, so decode
    attention takes half the time of one rank's (the all-to-all over twice the ranks may cost
    more than that saves), but the step is never faster than the per-device bandwidth floor."""
    single = roofline("DeepSeek-V3", "h200", tp=8, ep=True)
    split = roofline("DeepSeek-V3", "h200", tp=8, dp=2, ep=True)
    num_seqs, context = 512, 8000
    halved = split.step_time(decode(num_seqs, context)).by_operator_s["attn_decode"]
    whole = single.step_time(decode(num_seqs, context)).by_operator_s["attn_decode"]
    assert halved == pytest.approx(whole / 2, rel=0.05)
    kv_per_rank = kv_bytes_per_token(split.spec, split.kv) * num_seqs * context / 2
    floor = kv_per_rank / split.gpu.memory_bandwidth_bytes_s
    assert split.step_time(decode(num_seqs, context)).total_s >= floor
