"""Relocating experts: weight-transfer time by source tier, and the stated degradation after a
rank of a DP-attention + EP replica is lost."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.perf.factory import build_step_model
from inferplan.perf.moe import Routing
from inferplan.perf.moe_report import expert_parallel_report
from inferplan.perf.relocation import relocation_s, survivor_redundant_experts
from inferplan.specs.topology import Topology

TOPO = Topology(
    gpus_per_node=2,
    domain_size=2,
    scale_up_bytes_s=100.0,
    host_link_bytes_s=10.0,
    scale_out_bytes_s=20.0,
)
EXPERT_BYTES = 1000.0


def test_a_gained_expert_comes_from_the_nearest_holder_or_the_host() -> None:
    """Four ranks on two 2-GPU nodes. Rank 0 gains expert 1 (held by rank 1, same node:
    NVLink, 10 s) and expert 4 (held by nobody: host, 100 s); rank 2 gains expert 0 (only on
    rank 0, other node: NIC, 50 s). Ranks receive in parallel: the slowest takes 110 s."""
    old = np.array([[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0]])
    new = np.array([[1, 1, 0, 0, 1], [0, 1, 0, 0, 0], [1, 0, 1, 0, 0], [0, 0, 0, 1, 0]])
    assert relocation_s(old, new, EXPERT_BYTES, TOPO) == pytest.approx(110.0)
    assert relocation_s(old, old, EXPERT_BYTES, TOPO) == 0.0
    assert relocation_s(old, new, EXPERT_BYTES, TOPO, link_efficiency=0.5) == pytest.approx(220)


def test_survivors_keep_their_slots_while_redundant_copies_leave_room() -> None:
    assert survivor_redundant_experts(256, 40, 7) == 40 * 7 - 256  # 280 slots still hold all
    assert survivor_redundant_experts(256, 36, 7) == 37 * 7 - 256  # 252 < 256: 37 slots each


def _report(dp: int, placement: str, redundant: int) -> dict[str, Any]:
    plan = build_memory_plan(
        "DeepSeek-R1",
        "h200",
        1,
        1,
        True,
        None,
        "auto",
        32768,
        0.9,
        None,
        None,
        None,
        dp=dp,
        num_redundant_experts=redundant,
    )
    model = build_step_model(plan, routing=Routing(0.6, placement=placement))
    report = expert_parallel_report(model, plan)
    assert report is not None
    return report


def test_losing_a_rank_states_its_degradation() -> None:
    report = _report(8, "eplb", 32)
    loss = report["device_loss"]
    assert isinstance(loss, dict)
    assert loss["surviving_ep_ranks"] == 7
    assert loss["slots_per_rank_after"] == 37  # 36 * 7 = 252 < 256 experts
    assert loss["kv_capacity_tokens_after"] < 7 / 8 * loss["kv_capacity_tokens_before"]
    assert loss["max_load_share_after"] >= 1 / 7
    assert loss["max_experts_time_s_after"] > report["max_experts_time_s"]
    assert loss["relocation_s"] > 0
    # Rebalancing away from linear moves experts too (over NVLink inside the HGX node).
    assert report["rebalance_from_linear_s"] > 0


def test_a_replica_without_dp_attention_has_no_degraded_mode() -> None:
    plan = build_memory_plan(
        "DeepSeek-R1", "h200", 8, 1, True, None, "auto", 32768, 0.9, None, None, None
    )
    report = expert_parallel_report(build_step_model(plan), plan)
    assert report is not None and report["device_loss"] is None
