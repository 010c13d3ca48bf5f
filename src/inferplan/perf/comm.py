"""Collectives over the scale-up or scale-out link: ring all-reduce, all-to-all, point-to-point.

Ring all-reduce of ``B`` bytes over ``p`` ranks moves ``2 (p-1)/p * B`` bytes per rank in each
direction (Patarasuk & Yuan 2009; NCCL's "bus bandwidth" convention), so it takes
``latency + 2 (p-1)/p * B / (link x efficiency)``. All-to-all sends ``(p-1)/p`` of each rank's
buffer. The link is the GPU's scale-up fabric (NVLink/Infinity Fabric) while the group fits in
one scale-up domain, else the per-GPU scale-out NIC. Figures are one direction (``unidir``).
"""

from __future__ import annotations

from inferplan.perf.efficiency import Efficiency
from inferplan.specs.hardware import GpuSpec


def link_bytes_s(gpu: GpuSpec, group_size: int) -> float:
    """One-direction bandwidth per GPU for a group of ``group_size`` ranks."""
    if group_size <= gpu.scale_up_domain_size and gpu.scale_up_bytes_s:
        return gpu.scale_up_bytes_s
    if gpu.scale_out_bytes_s:
        return gpu.scale_out_bytes_s
    return gpu.host_link_bytes_s or 25e9  # PCIe-only parts: peer traffic crosses the host link


def allreduce_s(num_bytes: float, ranks: int, gpu: GpuSpec, eff: Efficiency) -> float:
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    wire = 2 * (ranks - 1) / ranks * num_bytes
    return eff.collective_latency_s + wire / (link_bytes_s(gpu, ranks) * eff.collective_bandwidth)


def alltoall_s(num_bytes: float, ranks: int, gpu: GpuSpec, eff: Efficiency) -> float:
    """One all-to-all where each rank holds ``num_bytes`` to scatter."""
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    wire = (ranks - 1) / ranks * num_bytes
    return eff.collective_latency_s + wire / (link_bytes_s(gpu, ranks) * eff.collective_bandwidth)


def p2p_s(num_bytes: float, gpu: GpuSpec, eff: Efficiency, *, group_size: int) -> float:
    """A send between neighbouring pipeline stages."""
    if num_bytes <= 0:
        return 0.0
    return eff.collective_latency_s + num_bytes / (
        link_bytes_s(gpu, group_size) * eff.collective_bandwidth
    )
