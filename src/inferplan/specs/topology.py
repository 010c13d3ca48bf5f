"""Where a replica's GPUs sit: nodes, scale-up domains, and the link each parallel group uses.

Three tiers, from the catalog (``data/gpus.yaml``):

- a **scale-up domain** (``scale_up.domain_size``) of GPUs joined by NVLink/NVSwitch or
  Infinity Fabric at ``scale_up.unidir_gbps`` per GPU and direction: 8 on HGX H100/H200/B200 and
  MI300X boards, 72 in a GB200 NVL72 rack (NVIDIA's NVL72 page: "130 TB/s" over 72 GPUs);
- a **node** (``scale_up.gpus_per_node``, else ``max(domain, 8)``): one host. GPUs of one node
  outside each other's domain (PCIe cards such as L40S, bridged H100 PCIe pairs) talk over the
  host link (PCIe peer-to-peer). A GB200 compute tray holds 4 GPUs, but its NVLink domain spans
  18 trays, so its traffic never uses the PCIe tier;
- **scale-out**: one NIC per GPU (``scale_out_typical.nic_gbit_per_gpu``, e.g. 400 Gb/s
  ConnectX-7 NDR on HGX H200 = 50 GB/s per direction) between nodes.

Ranks are laid out as vLLM and Megatron do: tensor-parallel ranks adjacent, then pipeline
stages, then data-parallel (attention) ranks, so a group of ``g`` consecutive ranks fits in one
domain when ``g <= domain``. A group that spans domains runs at the slowest tier it crosses.

A tensor-parallel group larger than a node is refused unless the user asks for it
(``--allow-cross-node-tp``): tensor parallelism puts two all-reduces in every layer, and
deployments keep it inside the NVLink domain (vLLM's multi-node guide: "tensor parallel size
within a node, pipeline parallel size across nodes"). Expert- and pipeline-parallel groups may
span nodes (wide EP over InfiniBand is what DeepEP is built for).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.errors import InferplanError
from inferplan.specs.hardware import GpuSpec
from inferplan.specs.parallel import Parallelism

DEFAULT_NODE_GPUS = 8  # HGX/MI300X boards, 8-card PCIe servers, 8-chip TPU hosts
PCIE_FALLBACK_BYTES_S = 25e9  # parts that list no link at all: PCIe Gen4 x16, one direction

TIERS = ("scale_up", "pcie", "scale_out")


@dataclass(frozen=True)
class Topology:
    """The link tiers of one deployment's GPUs (bytes/s are per GPU, one direction)."""

    gpus_per_node: int
    domain_size: int
    scale_up_bytes_s: float | None
    host_link_bytes_s: float | None
    scale_out_bytes_s: float | None
    allow_cross_node_tp: bool = False

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise InferplanError(f"--gpus-per-node: must be >= 1, got {self.gpus_per_node}")
        if self.domain_size < 1:
            raise InferplanError(f"scale-up domain size must be >= 1, got {self.domain_size}")

    def tier(self, group_size: int) -> str:
        """The slowest tier a group of ``group_size`` consecutive ranks crosses."""
        if group_size <= self.domain_size and self.scale_up_bytes_s:
            return "scale_up"
        if group_size <= max(self.gpus_per_node, self.domain_size):
            return "pcie"
        return "scale_out"

    def tier_bytes_s(self, tier: str) -> float:
        pcie = self.host_link_bytes_s or PCIE_FALLBACK_BYTES_S
        if tier == "scale_up" and self.scale_up_bytes_s:
            return self.scale_up_bytes_s
        if tier == "scale_out" and self.scale_out_bytes_s:
            return self.scale_out_bytes_s
        return pcie  # no NIC listed: peers reach each other through the host link at best

    def link_bytes_s(self, group_size: int) -> float:
        return self.tier_bytes_s(self.tier(group_size))

    def num_nodes(self, group_size: int) -> int:
        """Nodes (or, for rack-scale domains, domains) a group of consecutive ranks spans."""
        return -(-group_size // max(self.gpus_per_node, self.domain_size))

    def inner_size(self, group_size: int) -> int:
        """Ranks of the group that share the fastest tier with any one rank."""
        return min(group_size, max(self.gpus_per_node, self.domain_size))


def topology_for(
    gpu: GpuSpec, *, gpus_per_node: int | None = None, allow_cross_node_tp: bool = False
) -> Topology:
    """The catalog's topology for ``gpu``; ``gpus_per_node`` overrides the node size.

    A node smaller than the catalog's domain is a smaller board (a 4-GPU HGX), so the domain
    shrinks with it, unless the catalog says the domain spans nodes (NVL72)."""
    domain = gpu.scale_up_domain_size
    catalog_node = gpu.gpus_per_node
    spans_nodes = catalog_node is not None and catalog_node < domain
    if gpus_per_node is not None and gpus_per_node < 1:
        raise InferplanError(f"--gpus-per-node: must be >= 1, got {gpus_per_node}")
    node = gpus_per_node or catalog_node or max(domain, DEFAULT_NODE_GPUS)
    if gpus_per_node is not None and not spans_nodes:
        domain = min(domain, gpus_per_node)
    return Topology(
        gpus_per_node=node,
        domain_size=domain,
        scale_up_bytes_s=gpu.scale_up_bytes_s,
        host_link_bytes_s=gpu.host_link_bytes_s,
        scale_out_bytes_s=gpu.scale_out_bytes_s,
        allow_cross_node_tp=allow_cross_node_tp,
    )


def check_layout(topo: Topology, par: Parallelism) -> None:
    """Refuse a tensor-parallel group that cannot sit in one node (or one scale-up domain)."""
    reach = max(topo.gpus_per_node, topo.domain_size)
    if par.tp > reach and not topo.allow_cross_node_tp:
        raise InferplanError(
            f"-tp {par.tp}: a tensor-parallel group needs its GPUs in one node, and a node "
            f"here has {reach} (scale-up domain {topo.domain_size}); use -tp <= {reach} with "
            "-pp or -dp across nodes, or --allow-cross-node-tp to model TP over the "
            "scale-out network"
        )


def group_links(topo: Topology, par: Parallelism) -> dict[str, dict[str, object]]:
    """Which tier each parallel group of one replica uses: the plan's "which link" answer."""
    groups = {
        "tp": par.tp,
        "pp": par.tp * par.pp,
        "ep": par.ep if par.enable_expert_parallel else 1,
    }
    out: dict[str, dict[str, object]] = {}
    for name, size in groups.items():
        if size <= 1 or (name == "pp" and par.pp == 1):
            continue
        tier = topo.tier(size)
        out[name] = {
            "ranks": size,
            "link": tier,
            "link_bytes_s": topo.tier_bytes_s(tier),
            "num_nodes": topo.num_nodes(size),
        }
    return out


def topology_json(topo: Topology, par: Parallelism) -> dict[str, object]:
    return {
        "gpus_per_node": topo.gpus_per_node,
        "scale_up_domain_size": topo.domain_size,
        "scale_up_bytes_s": topo.scale_up_bytes_s,
        "pcie_bytes_s": topo.host_link_bytes_s,
        "scale_out_bytes_s": topo.scale_out_bytes_s,
        "allow_cross_node_tp": topo.allow_cross_node_tp,
        "num_nodes_per_replica": topo.num_nodes(par.devices_per_replica),
        "groups": group_links(topo, par),
    }
