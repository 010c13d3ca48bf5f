"""NCCL's step-count latency (``perf/comm.py`` ``PER_HOP_LATENCY``): a ring all-reduce over ``p``
ranks takes ``2 (p - 1)`` sequential steps, an all-gather / reduce-scatter / all-to-all ``p - 1``,
each charged one per-step latency on top of NCCL's base (NVIDIA/nccl ``src/graph/tuning.cc``)."""

from __future__ import annotations

import pytest

from inferplan.perf import comm
from perf.perf_helpers import toy_gpu, unit_efficiency

GPU = toy_gpu(scale_up_bytes_s=1e11, scale_up_domain_size=8, scale_out_bytes_s=1e10)
HOP_S = 1e-6


@pytest.fixture
def per_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "PER_HOP_LATENCY", True)


def test_off_by_default_one_flat_latency_whatever_the_group() -> None:
    eff = unit_efficiency(collective_latency_s=1e-5)
    assert not comm.PER_HOP_LATENCY
    assert comm.allreduce_s(8.0, 2, GPU, eff) - 16 / 2 / 1e11 == pytest.approx(1e-5)
    assert comm.allreduce_s(8.0, 8, GPU, eff) - 8 * 2 * 7 / 8 / 1e11 == pytest.approx(1e-5)


@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.usefixtures("per_hop")
def test_allreduce_charges_2_p_minus_1_steps(ranks: int) -> None:
    eff = unit_efficiency(collective_latency_s=HOP_S)
    tiny = comm.allreduce_s(1e-9, ranks, GPU, eff)  # latency-bound: the wire term vanishes
    assert tiny == pytest.approx(comm.NCCL_BASE_LATENCY_S + 2 * (ranks - 1) * HOP_S)


@pytest.mark.usefixtures("per_hop")
def test_gather_scatter_and_alltoall_charge_p_minus_1_steps_and_a_send_one() -> None:
    eff = unit_efficiency(collective_latency_s=HOP_S)
    base = comm.NCCL_BASE_LATENCY_S
    for collective in (comm.allgather_s, comm.reducescatter_s, comm.alltoall_s):
        assert collective(1e-9, 8, GPU, eff) == pytest.approx(base + 7 * HOP_S)
    assert comm.p2p_s(1e-9, GPU, eff, group_size=8) == pytest.approx(base + HOP_S)


@pytest.mark.usefixtures("per_hop")
def test_tp8_pays_more_latency_than_tp2() -> None:
    eff = unit_efficiency(collective_latency_s=HOP_S)
    tp2, tp4, tp8 = (comm.allreduce_s(1e-9, p, GPU, eff) for p in (2, 4, 8))
    assert tp8 - tp2 == pytest.approx(12 * HOP_S)
    assert tp2 < tp4 < tp8
    assert comm.allreduce_s(1e-9, 1, GPU, eff) == 0.0  # TP1 still has no collective
