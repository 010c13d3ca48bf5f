"""Moving experts: what a new placement costs in weight transfers, and what losing a rank costs.

**Transfer time.** Going from placement ``old`` to ``new`` (``copies[rank, expert]`` matrices),
each rank must receive the experts it gains: ``bytes_per_expert`` (every MoE layer of the stage)
each. A rank pulls a gained expert from a peer that already holds it, over the fastest tier
between them (a peer in its node over NVLink, else over the NICs), or, when no surviving rank
holds one, from the checkpoint in host memory over its PCIe link (the weights are assumed to be
in the host page cache or pinned memory; a cold read from NVMe would be slower still, see the
catalog's ``host_memory_tier.nvme_ssd``). Ranks receive in parallel, each at its own link's rate
(per GPU and direction); the relocation takes as long as the slowest rank's receives, summed
over its source tiers, at the collective bandwidth efficiency. Inference is assumed to pause for
it (vLLM's EPLB rearranges in place between steps; TensorRT-LLM's online balancer overlaps
updates with decode, which this model does not).

**Losing a GPU** of a DP-attention + EP replica takes its whole attention rank (its ``tp``
GPUs: their sequences and KV, and their experts). The survivors keep their slots when the old
redundant copies leave room for every expert (``survivors * slots >= E``); otherwise each needs
``ceil(E / survivors)`` slots, and its KV cache shrinks by the extra expert weights
(``survivor_redundant_experts``). The balancer re-places with EPLB over the survivors;
``perf/moe_report.py`` states the degradation: busiest-rank load, expert time, KV capacity of
the replica, and the relocation time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from inferplan.specs.topology import Topology

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def relocation_s(
    old: IntArray,
    new: IntArray,
    bytes_per_expert: float,
    topology: Topology,
    *,
    link_efficiency: float = 1.0,
    rank_ids: list[int] | None = None,
) -> float:
    """Seconds to move from ``old`` to ``new`` copies; ``rank_ids[i]`` is row ``i``'s global
    rank (default ``0..``), which decides who shares a node. Rows of ``old`` and ``new`` must
    match (a lost rank is dropped from both beforehand)."""
    ranks = rank_ids if rank_ids is not None else list(range(new.shape[0]))
    node_size = max(topology.gpus_per_node, topology.domain_size)
    nodes = np.array([r // node_size for r in ranks])
    holders = old > 0
    near_link = topology.link_bytes_s(2)  # two ranks of one node
    far_link = topology.tier_bytes_s("scale_out")
    host_link = topology.tier_bytes_s("pcie")
    worst = 0.0
    for row in range(new.shape[0]):
        gained = np.flatnonzero((new[row] > 0) & ~holders[row])
        seconds = 0.0
        for expert in gained:
            peers = np.flatnonzero(holders[:, expert])
            if peers.size == 0:
                link = host_link
            elif (nodes[peers] == nodes[row]).any():
                link = near_link
            else:
                link = far_link
            seconds += bytes_per_expert / (link * link_efficiency)
        worst = max(worst, seconds)
    return worst


def survivor_redundant_experts(num_experts: int, slots_per_rank: int, survivors: int) -> int:
    """Redundant copies the survivors hold: they keep their slots when those still fit every
    expert, else each grows to ``ceil(E / survivors)`` slots."""
    slots = max(slots_per_rank, -(-num_experts // survivors))
    return slots * survivors - num_experts
