"""Topology: nodes and scale-up domains from the catalog, the link each parallel group uses,
refusal of tensor parallelism across nodes, and what crossing nodes costs."""

from __future__ import annotations

import json

import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.memory.plan import weight_formats_for
from inferplan.perf.batch import StepBatch
from inferplan.perf.comm import allreduce_s, alltoall_s
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.catalog import load_model
from inferplan.specs.dtypes import kv_format
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism
from inferplan.specs.topology import Topology, check_layout, group_links, topology_for
from perf.perf_helpers import unit_efficiency


def test_hgx_h200_is_one_nvlink_domain_of_eight_with_a_nic_per_gpu() -> None:
    topo = topology_for(load_gpu("h200"))
    assert (topo.gpus_per_node, topo.domain_size) == (8, 8)
    assert topo.link_bytes_s(8) == 450e9  # NVLink 4: 900 GB/s both directions
    assert topo.link_bytes_s(16) == 400e9 / 8  # one 400 Gb/s ConnectX-7 per GPU
    assert topo.tier(8) == "scale_up"
    assert topo.tier(9) == "scale_out"
    assert topo.num_nodes(16) == 2


def test_an_nvl72_domain_spans_its_four_gpu_trays() -> None:
    topo = topology_for(load_gpu("gb200"))
    assert (topo.gpus_per_node, topo.domain_size) == (4, 72)
    assert topo.tier(8) == "scale_up"  # two trays, one NVLink domain
    assert topo.tier(72) == "scale_up"
    assert topo.tier(144) == "scale_out"
    check_layout(topo, Parallelism(tp=16))  # allowed: the group stays inside the domain


def test_pcie_cards_of_one_node_talk_over_the_host_link() -> None:
    topo = topology_for(load_gpu("l40s"))
    assert topo.domain_size == 1
    assert topo.tier(2) == "pcie"
    assert topo.link_bytes_s(2) == load_gpu("l40s").host_link_bytes_s
    check_layout(topo, Parallelism(tp=4))


def test_a_smaller_node_shrinks_a_board_domain_but_not_a_rack_domain() -> None:
    assert topology_for(load_gpu("h100"), gpus_per_node=4).domain_size == 4
    assert topology_for(load_gpu("gb200"), gpus_per_node=2).domain_size == 72


def test_tensor_parallelism_across_nodes_is_refused_unless_asked_for() -> None:
    par = Parallelism(tp=16)
    with pytest.raises(InferplanError, match="--allow-cross-node-tp"):
        check_layout(topology_for(load_gpu("h100")), par)
    check_layout(topology_for(load_gpu("h100"), allow_cross_node_tp=True), par)
    # Pipeline and expert parallelism may span nodes.
    check_layout(topology_for(load_gpu("h100")), Parallelism(tp=8, pp=2))
    check_layout(
        topology_for(load_gpu("h100")), Parallelism(tp=1, dp=16, enable_expert_parallel=True)
    )


def test_a_node_size_below_one_is_refused() -> None:
    with pytest.raises(InferplanError, match="--gpus-per-node"):
        topology_for(load_gpu("h100"), gpus_per_node=0)


def test_the_plan_says_which_link_each_group_uses() -> None:
    topo = topology_for(load_gpu("h200"))
    links = group_links(topo, Parallelism(tp=8, pp=2))
    assert links["tp"]["link"] == "scale_up"
    assert links["pp"] == {"ranks": 16, "link": "scale_out", "link_bytes_s": 50e9, "num_nodes": 2}
    ep = group_links(topo, Parallelism(tp=1, dp=16, enable_expert_parallel=True))
    assert ep["ep"]["link"] == "scale_out"
    assert "tp" not in ep


def _roofline(topology: Topology) -> RooflineModel:
    spec, gpu = load_model("Llama-3.1-70B"), load_gpu("h200")
    return RooflineModel(
        spec,
        gpu,
        Parallelism(tp=8),
        weight_formats_for(spec, None),
        kv_format("auto", model_dtype=spec.dtype),
        unit_efficiency(),
        topology=topology,
    )


@pytest.mark.parametrize("tokens", [1, 64, 4096])
def test_tp_across_nodes_is_slower_by_the_catalog_link_ratio(tokens: int) -> None:
    """The same TP8 group, once inside an HGX node and once split over two 4-GPU nodes: every
    all-reduce runs at the slowest hop, so the communication time grows by exactly
    NVLink / NIC bandwidth (450 GB/s / 50 GB/s = 9 on H200), and the step with it."""
    gpu = load_gpu("h200")
    inside = _roofline(topology_for(gpu))
    across = _roofline(topology_for(gpu, gpus_per_node=4, allow_cross_node_tp=True))
    batch = StepBatch(num_decode_seqs=tokens, decode_context_tokens=tokens * 1000)
    near, far = inside.step_time(batch), across.step_time(batch)
    ratio = gpu.scale_up_bytes_s / gpu.scale_out_bytes_s  # type: ignore[operator]
    assert ratio == pytest.approx(9.0)
    assert far.by_bound_s["communication"] == pytest.approx(
        ratio * near.by_bound_s["communication"], rel=1e-12
    )
    assert far.total_s > near.total_s
    assert far.by_bound_s["compute"] + far.by_bound_s["memory"] == pytest.approx(
        near.by_bound_s["compute"] + near.by_bound_s["memory"], rel=1e-12
    )


def test_an_all_to_all_over_two_nodes_splits_near_and_far_traffic() -> None:
    """EP16 over two 8-GPU nodes: 7/16 of each rank's buffer goes over NVLink, 8/16 over the
    NIC, at the same time; the NIC part is the longer."""
    gpu = load_gpu("h200")
    topo = topology_for(gpu)
    eff = unit_efficiency()
    num_bytes = 1.6e9
    far = 8 / 16 * num_bytes / 50e9
    assert alltoall_s(num_bytes, 16, gpu, eff, topo) == pytest.approx(far)
    assert alltoall_s(num_bytes, 8, gpu, eff, topo) == pytest.approx(7 / 8 * num_bytes / 450e9)
    assert allreduce_s(num_bytes, 16, gpu, eff, topo) == pytest.approx(
        2 * 15 / 16 * num_bytes / 50e9
    )


def test_the_cli_refuses_cross_node_tp_and_reports_the_links(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["memory", "--model", "Llama-3.1-70B", "--gpu", "h100", "-tp", "16", "--json"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: -tp 16:") and err.count("\n") == 1
    assert main([*args, "--allow-cross-node-tp"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["topology"]["groups"]["tp"]["link"] == "scale_out"
    assert data["topology"]["num_nodes_per_replica"] == 2
