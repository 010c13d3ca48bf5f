"""MoE routing: distinct experts a batch touches (the weight bytes a step reads) and the busiest
expert-parallel rank's share of the work."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.errors import InferplanError
from inferplan.perf.moe import Routing, expected_experts_touched
from perf.perf_helpers import decode, prefill, roofline

# (experts, top-k) of real models: Mixtral, gpt-oss-120b, Qwen3-30B-A3B, DeepSeek-V3.
SHAPES = [(8, 2), (128, 4), (128, 8), (256, 8)]


@pytest.mark.parametrize(("experts", "top_k"), SHAPES)
def test_one_token_touches_exactly_k_experts(experts: int, top_k: int) -> None:
    touched, share = expected_experts_touched(experts, top_k, 1)
    assert touched == pytest.approx(top_k)
    assert share == 1.0


@pytest.mark.parametrize(("experts", "top_k"), SHAPES)
@pytest.mark.parametrize("zipf", [0.0, 0.8, 1.5])
def test_many_tokens_touch_every_expert(experts: int, top_k: int, zipf: float) -> None:
    touched, _ = expected_experts_touched(experts, top_k, 1_000_000, zipf)
    assert touched == pytest.approx(experts, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from(SHAPES),
    zipf=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    tokens=st.integers(1, 5000),
    more=st.integers(1, 5000),
)
def test_touched_experts_grow_with_tokens(
    shape: tuple[int, int], zipf: float, tokens: int, more: int
) -> None:
    experts, top_k = shape
    fewer, _ = expected_experts_touched(experts, top_k, tokens, zipf)
    larger, _ = expected_experts_touched(experts, top_k, tokens + more, zipf)
    assert fewer <= larger <= experts


@pytest.mark.parametrize(("experts", "top_k"), SHAPES)
@pytest.mark.parametrize("tokens", [4, 16, 64])
def test_skewed_routing_touches_fewer_experts_than_uniform(
    experts: int, top_k: int, tokens: int
) -> None:
    """Popular experts absorb more of the picks, so a mid-size batch reads fewer distinct ones."""
    uniform, _ = expected_experts_touched(experts, top_k, tokens, 0.0)
    skewed, _ = expected_experts_touched(experts, top_k, tokens, 1.0)
    assert skewed < uniform


@pytest.mark.parametrize(("experts", "top_k"), SHAPES)
@pytest.mark.parametrize("ep", [2, 4, 8])
def test_uniform_routing_loads_every_rank_equally(experts: int, top_k: int, ep: int) -> None:
    touched_all, _ = expected_experts_touched(experts, top_k, 32)
    touched_rank, share = expected_experts_touched(experts, top_k, 32, 0.0, ep)
    assert share == pytest.approx(1 / ep)
    assert touched_rank == pytest.approx(touched_all / ep)


@settings(max_examples=60, deadline=None)
@given(
    experts=st.integers(2, 300),
    top_k=st.integers(1, 8),
    zipf=st.floats(0.0, 3.0),
    ep=st.integers(2, 16),
    tokens=st.integers(1, 4096),
)
def test_the_busiest_rank_carries_at_least_its_fair_share(
    experts: int, top_k: int, zipf: float, ep: int, tokens: int
) -> None:
    top_k = min(top_k, experts)
    _, share = expected_experts_touched(experts, top_k, tokens, zipf, ep)
    assert 1 / ep - 1e-12 <= share <= 1.0


def test_skew_slows_compute_bound_expert_parallel_steps() -> None:
    """The step waits for the busiest rank: once the expert GEMMs are compute-bound (a long
    prefill), skew makes the step slower whatever the placement. In a small memory-bound decode
    it depends on where the hot experts sit: dealt round-robin, the busiest rank reads fewer
    distinct experts under skew and does not slow down; stacked on one rank (linear placement
    in popularity order), that rank reads all of its hot experts and does."""
    long_prefill, small_decode = prefill(8192), decode(64, 2000)
    for placement in ("linear", "round_robin"):
        uniform = roofline("DeepSeek-V3", "h200", tp=8, ep=True, placement=placement)
        skewed = roofline("DeepSeek-V3", "h200", tp=8, ep=True, zipf=1.2, placement=placement)
        assert (
            skewed.step_time(long_prefill).by_operator_s["experts"]
            > 1.3 * uniform.step_time(long_prefill).by_operator_s["experts"]
        )
    spread = roofline("DeepSeek-V3", "h200", tp=8, ep=True, zipf=1.2, placement="round_robin")
    stacked = roofline("DeepSeek-V3", "h200", tp=8, ep=True, zipf=1.2, placement="linear")
    uniform = roofline("DeepSeek-V3", "h200", tp=8, ep=True)
    base = uniform.step_time(small_decode).by_operator_s["experts"]
    assert spread.step_time(small_decode).by_operator_s["experts"] <= base
    assert stacked.step_time(small_decode).by_operator_s["experts"] > base


def test_routing_rejects_a_skew_out_of_range() -> None:
    with pytest.raises(InferplanError, match="--moe-skew: Zipf exponent must be in"):
        Routing(-0.5)


@pytest.mark.parametrize(("experts", "top_k", "zipf"), [(8, 2, 2.0), (256, 8, 1.0), (256, 8, 1.5)])
def test_one_token_touches_k_experts_under_skew(experts: int, top_k: int, zipf: float) -> None:
    """One token always routes to k distinct experts, however popular some of them are."""
    touched, _ = expected_experts_touched(experts, top_k, 1, zipf)
    assert touched == pytest.approx(top_k)
