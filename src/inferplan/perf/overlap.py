"""Host work that runs while the GPU computes (an overlap scheduler).

TensorRT-LLM's PyTorch executor prepares step ``n + 1`` (scheduling, input preparation) while the
GPU runs step ``n``: that share of the host's per-step cost is hidden behind the GPU's work, as
far as the GPU's work lasts. ``Efficiency.host_overlap`` is the share that can hide (0: the host
and the GPU take turns, as the step-time model has always assumed).

The host's speed is the host CPU's: a release's costs are stated for an x86 server's host, and
on a Grace-hosted part (GH200, GB200, GB300: ``GpuSpec.host_cpu``) they take
``Efficiency.grace_host`` times as long (``on_host``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from inferplan.perf.batch import StepBatch
from inferplan.perf.efficiency import Efficiency
from inferplan.specs.hardware import GpuSpec


def on_host(eff: Efficiency, gpu: GpuSpec) -> Efficiency:
    """``eff`` with its host work (per step and per sequence) at ``gpu``'s host CPU's speed:
    ``grace_host`` times the stated costs on a Grace-hosted part, then ``grace_host`` 1 (the
    costs are that host's now: applying it twice changes nothing). Other parts: ``eff``."""
    if gpu.host_cpu != "grace" or eff.grace_host == 1.0:
        return eff
    return replace(
        eff,
        step_overhead_s=eff.step_overhead_s * eff.grace_host,
        per_seq_overhead_s=eff.per_seq_overhead_s * eff.grace_host,
        grace_host=1.0,
    )


def host_s(eff: Efficiency, batch: StepBatch, ranks: int) -> float:
    """One rank's host work per step: scheduling, and preparing its share of the sequences."""
    seqs = (batch.num_decode_seqs + batch.num_prefill_seqs) / ranks
    return eff.step_overhead_s + eff.per_seq_overhead_s * seqs


def hidden_host_s(host_s: float, overlap: float, gpu_s: float) -> float:
    """Seconds of ``host_s`` hidden behind ``gpu_s`` of GPU work when ``overlap`` of it can run
    concurrently with the GPU."""
    return min(overlap * host_s, gpu_s)


def overlapped_line(
    line: tuple[float, float, float, float], overhead_s: float, hideable_s: float, context: float
) -> tuple[float, float, float, float]:
    """A decode line ``(a, b, lower, limit)`` (time ``a + b*C`` for ``lower <= C < limit``) with
    ``hideable_s`` of its host cost hidden behind the GPU's part, ``a - overhead_s + b*C``.

    Where the GPU's part covers the hideable host work the line drops by ``hideable_s``; below
    that context the step is the overheads alone (flat)."""
    a, b, lower, limit = line
    if hideable_s <= 0:
        return line
    gpu_a = a - overhead_s
    # The context from which the GPU's part covers the hideable host work.
    flat = -math.inf if gpu_a >= hideable_s else math.inf
    cross = (hideable_s - gpu_a) / b if b > 0 else flat
    if context >= cross:
        return a - hideable_s, b, max(lower, cross), limit
    return overhead_s, 0.0, lower, min(limit, cross)
