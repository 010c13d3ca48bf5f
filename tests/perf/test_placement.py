"""Expert placement (linear, round-robin, EPLB with redundant copies), the per-rank routing
picture, measured load histograms, and the slowest rank setting the MoE layer's time."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.errors import InferplanError
from inferplan.perf.batch import StepBatch
from inferplan.perf.expert_loads import class_token_shares, parse_routing, read_histogram
from inferplan.perf.moe import Routing, pick_probabilities, rank_table
from inferplan.perf.placement import eplb, linear, place_experts, replicate, round_robin
from perf.perf_helpers import roofline


def test_linear_and_round_robin_place_every_expert_once() -> None:
    loads = np.ones(10)
    lin, rr = linear(loads, 4, 0), round_robin(loads, 4, 0)
    assert lin.sum(axis=0).tolist() == rr.sum(axis=0).tolist() == [1] * 10
    assert lin.sum(axis=1).tolist() == [3, 3, 2, 2]  # vLLM: the first E mod ep ranks get one more
    assert np.flatnonzero(lin[0]).tolist() == [0, 1, 2]
    assert np.flatnonzero(rr[1]).tolist() == [1, 5, 9]


def test_eplb_by_hand() -> None:
    """Loads 8,4,2,1,1 on 2 ranks with 1 redundant slot (3 slots each): the copy goes to expert
    0 (8 > 4 per copy). Copies heaviest first (ties by expert id), each onto the least loaded
    rank with a free slot and no copy of it yet: e0 -> r0, e0 -> r1, e1 (4) -> r0 (tie),
    e2 (2) -> r1, e3 (1) -> r1, and e4 (1) -> r0, the only rank with a free slot."""
    loads = np.array([8.0, 4.0, 2.0, 1.0, 1.0])
    assert replicate(loads, 1).tolist() == [2, 1, 1, 1, 1]
    copies = eplb(loads, 2, 1)
    assert copies.tolist() == [[1, 1, 0, 0, 1], [1, 0, 1, 1, 0]]
    share = (copies / copies.sum(axis=0)) * loads
    assert share.sum(axis=1).tolist() == [9.0, 7.0]


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 100.0), min_size=8, max_size=64),
    ep=st.sampled_from([2, 4, 8]),
    extra=st.integers(0, 3),
)
def test_eplb_fills_every_slot_and_serves_every_token(
    loads: list[float], ep: int, extra: int
) -> None:
    """Greedy packing is a heuristic (it can lose to linear on adversarial loads), but every
    slot is filled, every expert has a copy, all traffic is served, and more redundant copies
    never raise the heaviest load per copy."""
    weights = np.asarray(loads)
    num_redundant = (-len(loads)) % ep + extra * ep
    copies = eplb(weights, ep, num_redundant)
    assert (copies.sum(axis=1) == (len(loads) + num_redundant) // ep).all()
    assert (copies.sum(axis=0) >= 1).all()
    served = (copies / copies.sum(axis=0) * weights).sum()
    assert served == pytest.approx(weights.sum())
    per_copy = [(weights / replicate(weights, r)).max() for r in range(num_redundant + 1)]
    assert all(b <= a for a, b in pairwise(per_copy))


@pytest.mark.parametrize(("experts", "top_k", "ep"), [(256, 8, 8), (128, 8, 8), (256, 8, 32)])
@pytest.mark.parametrize("zipf", [0.3, 0.6, 1.2])
def test_eplb_balances_zipf_routing_better_than_static_placements(
    experts: int, top_k: int, ep: int, zipf: float
) -> None:
    def busiest(placement: str, redundant: int = 0) -> float:
        table = rank_table(Routing(zipf, placement=placement), experts, top_k, ep, redundant)
        return float(table.assignment_share.max())

    assert busiest("eplb") <= min(busiest("linear"), busiest("round_robin"))
    assert busiest("eplb", ep) <= busiest("eplb") + 1e-12


def test_placement_errors_name_the_flag() -> None:
    with pytest.raises(InferplanError, match=r"--num-redundant-experts 3: .*multiple of 8"):
        place_experts(np.ones(256), 8, "eplb", 3)
    with pytest.raises(InferplanError, match=r"--num-redundant-experts: .*eplb"):
        place_experts(np.ones(256), 8, "linear", 8)
    with pytest.raises(InferplanError, match="--expert-placement"):
        Routing(placement="random")


def test_uniform_routing_by_hand() -> None:
    """DeepSeek-V3 shape, EP8: every rank takes 1/8 of the picks; a token (8 of 256 experts,
    1/32 each) reaches a rank holding 32 of them with probability 1 - (31/32)^32."""
    table = rank_table(Routing(), 256, 8, 8)
    assert table.assignment_share == pytest.approx(np.full(8, 1 / 8))
    assert table.hit_probability == pytest.approx(np.full(8, 1 - (31 / 32) ** 32))
    assert table.touched(1) == pytest.approx(np.full(8, 1.0))  # k/ep experts per rank


@settings(max_examples=50, deadline=None)
@given(
    low=st.floats(0.0, 3.0),
    delta=st.floats(0.01, 2.0),
    shape=st.sampled_from([(256, 8, 8), (128, 8, 8), (128, 8, 4), (64, 6, 16)]),
)
def test_the_busiest_linear_rank_only_gains_with_skew(
    low: float, delta: float, shape: tuple[int, int, int]
) -> None:
    """Zipf in id order with contiguous placement stacks the hottest experts on rank 0; more
    skew moves mass towards them, so the busiest rank's share never falls."""
    experts, top_k, ep = shape
    before = rank_table(Routing(low), experts, top_k, ep).assignment_share.max()
    after = rank_table(Routing(min(low + delta, 5.0)), experts, top_k, ep).assignment_share.max()
    assert after >= before - 1e-12


@pytest.mark.parametrize("zipf", [0.0, 0.6, 1.5, 3.0])
def test_pick_probabilities_sum_to_k_and_stay_below_one(zipf: float) -> None:
    q = pick_probabilities(Routing(zipf).popularity(256), 8)
    assert q.sum() == pytest.approx(8)
    assert q.max() <= 1.0


def test_the_slowest_rank_sets_the_experts_time() -> None:
    model = roofline("DeepSeek-V3", "h200", dp=8, ep=True, zipf=0.6)
    ffn = next(g.ffn for g in model.groups if g.ffn.kind != "dense")
    layers = sum(g.count for g in model.groups if g.ffn.kind != "dense")
    for tokens in (8, 512, 8192):
        compute, memory = model.expert_rank_times(ffn, tokens)
        step = model.step_time(StepBatch(prefill_tokens=tokens, num_prefill_seqs=1))
        expected = np.maximum(compute, memory).max() * layers
        assert step.by_operator_s["experts"] == pytest.approx(expected, rel=1e-12)


def test_dispatch_volume_follows_the_placement() -> None:
    """Skewed routing on linear placement sends more tokens to the hot rank than uniform
    routing sends to any rank: the all-to-all grows with it."""
    batch = StepBatch(num_decode_seqs=256, decode_context_tokens=256 * 1000)
    uniform = roofline("DeepSeek-V3", "h200", dp=8, ep=True).step_time(batch)
    skewed = roofline("DeepSeek-V3", "h200", dp=8, ep=True, zipf=1.0).step_time(batch)
    assert skewed.by_bound_s["communication"] > uniform.by_bound_s["communication"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "loads.csv"
    path.write_text(text)
    return path


def test_a_histogram_with_classes_mixes_by_token_share(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "# two classes heat different experts\nexpert,load,class\n0,30,code\n1,10,code\n"
        "2,5,chat\n3,15,chat\n",
    )
    histogram = read_histogram(path)
    assert histogram.mixed(None) == pytest.approx([0.5, 1 / 6, 1 / 12, 0.25])
    assert histogram.mixed({"code": 1.0}) == pytest.approx([0.75, 0.25, 0.0, 0.0])
    assert histogram.mixed({"code": 0.5, "chat": 0.5}) == pytest.approx(
        [0.375, 0.125, 0.125, 0.375]
    )
    routing = parse_routing(
        str(path), moe_skew=None, placement="linear", num_experts=8, token_shares=None
    )
    assert routing.expert_loads is not None and len(routing.expert_loads) == 8
    shares = class_token_shares(("chat", "code"), np.array([0, 1, 1]), np.array([10, 20, 10]))
    assert shares == pytest.approx({"chat": 0.25, "code": 0.75})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("expert,count\n0,1\n", r"loads.csv:1: header must name expert and load"),
        ("expert,load\n0,1\nx,2\n", r"loads.csv:3: expert must be an integer"),
        ("expert,load\n0,-1\n", r"loads.csv:2: expert must be >= 0 and load finite"),
        ("expert,load\n0,1,2\n", r"loads.csv:2: 3 cells, the header has 2"),
        ("expert,load\n0,0\n", r"no positive load"),
        ("expert,load\n9,1\n", r"names expert 9, but the model has 8 routed experts"),
        ("", r"empty"),
    ],
)
def test_histogram_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InferplanError, match=message):
        parse_routing(str(path), moe_skew=None, placement="linear", num_experts=8)


def test_routing_flag_values() -> None:
    assert parse_routing("zipf:0.6", moe_skew=None, placement="eplb", num_experts=8) == Routing(
        0.6, placement="eplb", source="--expert-routing"
    )
    assert parse_routing(None, moe_skew=1.0, placement="linear", num_experts=8) == Routing(1.0)
    with pytest.raises(InferplanError, match="--moe-skew: give either"):
        parse_routing("zipf:1", moe_skew=1.0, placement="linear", num_experts=8)
    with pytest.raises(InferplanError, match="zipf:S"):
        parse_routing("zipf:x", moe_skew=None, placement="linear", num_experts=8)
