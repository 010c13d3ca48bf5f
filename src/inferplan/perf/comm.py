"""Collectives over the scale-up or scale-out link: ring all-reduce, all-to-all, point-to-point.

Ring all-reduce of ``B`` bytes over ``p`` ranks moves ``2 (p-1)/p * B`` bytes per rank in each
direction (Patarasuk & Yuan 2009; NCCL's "bus bandwidth" convention), so it takes
``latency + 2 (p-1)/p * B / (link x efficiency)``. All-to-all sends ``(p-1)/p`` of each rank's
buffer. The link is the GPU's scale-up fabric (NVLink/Infinity Fabric) while the group fits in
one scale-up domain, else the per-GPU scale-out NIC. Figures are one direction (``unidir``).

With a ``Topology`` (``specs/topology.py``) the link is the slowest tier the group crosses (a
ring runs at its slowest hop), and an all-to-all that spans nodes splits its traffic: the part
for peers in the same node goes over the fast tier, the rest over the NICs, both at once, so it
takes the longer of the two.

Latency (``PER_HOP_LATENCY``, off by default): NCCL's tuning model charges a ring collective a
base latency plus one hardware latency per sequential step: ``2 (p - 1)`` steps for an
all-reduce, ``p - 1`` for an all-gather or reduce-scatter (NVIDIA/nccl ``src/graph/tuning.cc``,
``ncclTopoTuneModel``: base 3.6-6.6 us for Ring / LL, per step 0.47-0.6 us over NVLink, 1.0 us
over PCIe, 2.7 us over the network; a single-node tree has the same ``2 (p - 1)`` count). With
the flag on, ``collective_latency_s`` is that per-step latency (fitted per family, so one per
interconnect kind) and ``NCCL_BASE_LATENCY_S`` the fixed part; off, it is one flat latency per
call whatever the group size (the committed constants are fitted that way). Measured in
``docs/validation.md`` (``comm``, 2026-12-02).
"""

from __future__ import annotations

from inferplan.perf.efficiency import Efficiency
from inferplan.specs.hardware import GpuSpec
from inferplan.specs.topology import Topology

PER_HOP_LATENCY = False  # docs/validation.md (`comm`, 2026-12-02): measured, left off
NCCL_BASE_LATENCY_S = 6.6e-6  # NCCL tuning.cc baseLat, Ring / LL (the small-message protocol)


def latency_s(eff: Efficiency, steps: int) -> float:
    """Fixed cost of a collective of ``steps`` sequential ring steps (``PER_HOP_LATENCY``)."""
    if not PER_HOP_LATENCY:
        return eff.collective_latency_s
    return NCCL_BASE_LATENCY_S + steps * eff.collective_latency_s


def link_bytes_s(gpu: GpuSpec, group_size: int, topology: Topology | None = None) -> float:
    """One-direction bandwidth per GPU for a group of ``group_size`` ranks."""
    if topology is not None:
        return topology.link_bytes_s(group_size)
    if group_size <= gpu.scale_up_domain_size and gpu.scale_up_bytes_s:
        return gpu.scale_up_bytes_s
    if gpu.scale_out_bytes_s:
        return gpu.scale_out_bytes_s
    return gpu.host_link_bytes_s or 25e9  # PCIe-only parts: peer traffic crosses the host link


def _collective_s(
    wire_bytes: float,
    ranks: int,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None,
    steps: int,
) -> float:
    """``wire_bytes`` per rank over the group's slowest link, plus the latency of ``steps``."""
    link = link_bytes_s(gpu, ranks, topology)
    return latency_s(eff, steps) + wire_bytes / (link * eff.collective_bandwidth)


def _ring_pass_s(
    num_bytes: float,
    ranks: int,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None,
) -> float:
    """One pass round the ring (an all-gather, a reduce-scatter, a one-tier all-to-all): each
    rank moves the ``(p-1)/p`` of the ``num_bytes`` buffer it does not hold, in ``p - 1``
    steps."""
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    return _collective_s((ranks - 1) / ranks * num_bytes, ranks, gpu, eff, topology, ranks - 1)


def allreduce_s(
    num_bytes: float,
    ranks: int,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None = None,
) -> float:
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    wire_bytes = 2 * (ranks - 1) / ranks * num_bytes
    return _collective_s(wire_bytes, ranks, gpu, eff, topology, 2 * (ranks - 1))


def alltoall_s(
    num_bytes: float,
    ranks: int,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None = None,
) -> float:
    """One all-to-all where each rank holds ``num_bytes`` to scatter."""
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    if topology is not None and topology.tier(ranks) == "scale_out":
        inner = topology.inner_size(ranks)
        near = (inner - 1) / ranks * num_bytes / topology.link_bytes_s(inner)
        far = (ranks - inner) / ranks * num_bytes / topology.link_bytes_s(ranks)
        return latency_s(eff, ranks - 1) + max(near, far) / eff.collective_bandwidth
    return _ring_pass_s(num_bytes, ranks, gpu, eff, topology)


def p2p_s(
    num_bytes: float,
    gpu: GpuSpec,
    eff: Efficiency,
    *,
    group_size: int,
    topology: Topology | None = None,
) -> float:
    """A send between neighbouring pipeline stages."""
    if num_bytes <= 0:
        return 0.0
    return _collective_s(num_bytes, group_size, gpu, eff, topology, 1)


def allgather_s(
    num_bytes: float,
    ranks: int,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None = None,
) -> float:
    """One all-gather whose gathered buffer (every rank's part together) is ``num_bytes``:
    each rank receives the ``(p-1)/p`` it does not hold (NCCL's ring all-gather)."""
    return _ring_pass_s(num_bytes, ranks, gpu, eff, topology)


def reducescatter_s(
    num_bytes: float,
    ranks: int,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None = None,
) -> float:
    """One reduce-scatter of a ``num_bytes`` buffer that every rank holds in full: each rank
    sends the ``(p-1)/p`` that the others own (half of a ring all-reduce)."""
    return _ring_pass_s(num_bytes, ranks, gpu, eff, topology)
