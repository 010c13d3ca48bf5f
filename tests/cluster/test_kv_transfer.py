"""KV transfer between prefill and decode pools: bytes by hand, the link by tier, FIFO queueing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.cluster.kv_transfer import KvLink, KvTransferQueue, kv_link, kv_transfer_bytes
from inferplan.errors import InferplanError
from inferplan.specs.hardware import load_gpu
from inferplan.specs.topology import topology_for


def test_deepseek_prompt_kv_by_hand() -> None:
    """MLA: 576 latent values x 61 layers x 2 bytes = 70,272 bytes per token; a 2,000-token
    prompt moves 140.5 MB, over eight 50 GB/s NICs in 0.35 ms plus the latency."""
    plan = build_memory_plan(
        "DeepSeek-R1", "h200", 8, 1, False, None, "auto", 8192, 0.9, None, None, None
    )
    assert plan.kv_bytes_per_token == 576 * 61 * 2
    num_bytes = kv_transfer_bytes(plan.kv_bytes_per_token, 2000)
    link = kv_link(
        topology_for(load_gpu("h200")),
        prefill_gpus=8,
        decode_gpus=8,
        same_domain=False,
        latency_s=1e-5,
    )
    assert link.bandwidth_bytes_s == 8 * 50e9
    assert link.service_s(num_bytes) == pytest.approx(1e-5 + 140_544_000 / 400e9)


def test_pools_in_one_domain_use_nvlink_and_the_smaller_instance_sets_the_lanes() -> None:
    topo = topology_for(load_gpu("h200"))
    near = kv_link(topo, prefill_gpus=2, decode_gpus=4, same_domain=True, latency_s=0.0)
    assert (near.tier, near.bandwidth_bytes_s) == ("scale_up", 2 * 450e9)
    far = kv_link(topo, prefill_gpus=2, decode_gpus=4, same_domain=False, latency_s=0.0)
    assert far.bandwidth_bytes_s == near.bandwidth_bytes_s / 9  # NVLink / NIC on H200


def test_a_busy_link_queues_the_next_transfer() -> None:
    queue = KvTransferQueue(KvLink(bandwidth_bytes_s=1e9, latency_s=1e-3))
    assert queue.submit(0.0, 1e9) == pytest.approx(1.001)
    assert queue.submit(0.5, 1e9) == pytest.approx(2.002)  # waits 0.501 s for the first
    assert queue.submit(5.0, 0.0) == pytest.approx(5.001)  # an idle link starts at once
    summary = queue.summary(horizon_s=10.0)
    assert summary["bytes"] == 2e9
    assert summary["queue_s"]["mean"] == pytest.approx(0.501 / 3)  # type: ignore[index]
    assert summary["transfer_s"]["mean"] == pytest.approx((1.001 + 1.502 + 0.001) / 3)  # type: ignore[index]
    assert summary["link_utilization"] == pytest.approx(2.003 / 10)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=40),
    sizes=st.lists(st.floats(0.0, 3e9), min_size=40, max_size=40),
    latency=st.floats(0.0, 0.01),
)
def test_fifo_link_invariants(gaps: list[float], sizes: list[float], latency: float) -> None:
    """One transfer at a time, in order; none finishes before its own wire time; the link is
    never idle while a transfer waits; every byte submitted is counted."""
    link = KvLink(bandwidth_bytes_s=1e9, latency_s=latency)
    queue = KvTransferQueue(link)
    arrivals = np.cumsum(gaps)
    finishes = [queue.submit(float(t), b) for t, b in zip(arrivals, sizes, strict=False)]
    previous = 0.0
    for t, b, f in zip(arrivals, sizes, finishes, strict=False):
        start = f - link.service_s(b)
        assert start >= t - 1e-9 and start >= previous - 1e-9
        assert start == pytest.approx(max(t, previous))  # work-conserving
        previous = f
    summary = queue.summary(horizon_s=float(finishes[-1]) or 1.0)
    assert summary["bytes"] == pytest.approx(sum(sizes[: len(arrivals)]))
    assert 0 <= summary["link_utilization"] <= 1 + 1e-9  # type: ignore[operator]


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(InferplanError, match="bandwidth must be > 0"):
        KvLink(bandwidth_bytes_s=0.0, latency_s=0.0)
    with pytest.raises(InferplanError, match="efficiency"):
        kv_link(
            topology_for(load_gpu("h200")),
            prefill_gpus=1,
            decode_gpus=1,
            same_domain=False,
            latency_s=0.0,
            efficiency=1.5,
        )
    queue = KvTransferQueue(KvLink(bandwidth_bytes_s=1.0, latency_s=0.0))
    queue.submit(1.0, 1.0)
    with pytest.raises(ValueError, match="time order"):
        queue.submit(0.5, 1.0)
    with pytest.raises(InferplanError, match="prompt tokens"):
        kv_transfer_bytes(100.0, -1)
