"""Collectives: ring all-reduce's 2(p-1)/p bytes per rank (Patarasuk & Yuan 2009), all-to-all's
(p-1)/p, and which link carries them (scale-up inside the NVLink domain, the NIC beyond it)."""

from __future__ import annotations

import pytest

from inferplan.perf.comm import allreduce_s, alltoall_s, link_bytes_s, p2p_s
from perf.perf_helpers import decode, roofline, toy_gpu, unit_efficiency

MESSAGE_BYTES = 8e6
GPU = toy_gpu(scale_up_bytes_s=1e11, scale_up_domain_size=8, scale_out_bytes_s=1e10)


def test_one_rank_needs_no_collective() -> None:
    eff = unit_efficiency(collective_latency_s=1e-5)
    assert allreduce_s(MESSAGE_BYTES, 1, GPU, eff) == 0.0
    assert alltoall_s(MESSAGE_BYTES, 1, GPU, eff) == 0.0
    assert allreduce_s(0.0, 8, GPU, eff) == 0.0


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_ring_allreduce_moves_2_p_minus_1_over_p_of_the_message(ranks: int) -> None:
    eff = unit_efficiency(collective_latency_s=1e-5, collective_bandwidth=0.5)
    wire = 2 * (ranks - 1) / ranks * MESSAGE_BYTES
    assert allreduce_s(MESSAGE_BYTES, ranks, GPU, eff) == pytest.approx(1e-5 + wire / (1e11 * 0.5))
    assert alltoall_s(MESSAGE_BYTES, ranks, GPU, eff) == pytest.approx(
        1e-5 + wire / 2 / (1e11 * 0.5)
    )


def test_allreduce_grows_with_ranks_but_saturates_at_twice_the_message() -> None:
    eff = unit_efficiency()
    times = [allreduce_s(MESSAGE_BYTES, p, GPU, eff) for p in (2, 4, 8)]
    assert times == sorted(times)
    assert times[2] / times[0] == pytest.approx((7 / 8) / (1 / 2))
    assert times[2] < 2 * MESSAGE_BYTES / 1e11


def test_groups_beyond_the_scale_up_domain_use_the_scale_out_link() -> None:
    assert link_bytes_s(GPU, 8) == 1e11
    assert link_bytes_s(GPU, 9) == 1e10
    assert link_bytes_s(GPU, 16) == 1e10
    eff = unit_efficiency()
    inside = allreduce_s(MESSAGE_BYTES, 8, GPU, eff)
    across = allreduce_s(MESSAGE_BYTES, 16, GPU, eff)
    assert across == pytest.approx(inside * (15 / 16) / (7 / 8) * 10)


def test_parts_without_a_fabric_fall_back_to_the_host_link() -> None:
    pcie_only = toy_gpu(scale_up_bytes_s=None, scale_up_domain_size=1, scale_out_bytes_s=None)
    assert link_bytes_s(pcie_only, 2) == 25e9  # comm.py's fallback when no link is listed


def test_pipeline_send_is_latency_plus_bytes_over_link() -> None:
    eff = unit_efficiency(collective_latency_s=2e-6)
    assert p2p_s(MESSAGE_BYTES, GPU, eff, group_size=4) == pytest.approx(2e-6 + 8e6 / 1e11)
    assert p2p_s(0.0, GPU, eff, group_size=4) == 0.0


def test_tensor_parallel_step_communication_grows_with_tp() -> None:
    """Llama-3.1-70B: two all-reduces per layer of the same activation; more ranks, more wire."""
    batch = decode(64, 1000)
    comm = [
        roofline("Llama-3.1-70B", "h100", tp=tp).step_time(batch).by_bound_s["communication"]
        for tp in (1, 2, 4, 8)
    ]
    assert comm[0] == 0.0
    assert 0 < comm[1] < comm[2] < comm[3]
