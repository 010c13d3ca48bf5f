"""KV-cache transfer from a prefill pool to a decode pool: bytes per request, and a link that
queues transfers when it is busy (the engine-independent part of P/D disaggregation).

**Bytes.** A request's prompt leaves the prefill instance as its KV cache:
``kv_bytes_per_token x prompt tokens`` (every layer; the memory plan's ``kv_bytes_per_token``
already counts GQA heads, MLA latents, sliding windows and the KV dtype).

**The link.** The KV is sharded like the prefill instance (by TP rank), and each rank sends its
shard over its own NIC at the same time (Mooncake's transfer engine and NVIDIA NIXL drive every
NIC of a node), so a transfer between two instances runs at ``min(prefill GPUs, decode GPUs)``
per-GPU links: the scale-up link when both pools sit in one NVLink domain, else the NICs
(``kv_link``). A transfer takes ``latency_s + bytes / (bandwidth x efficiency)``.

**Queueing.** One link carries one transfer at a time, first come first served (a single-server
FIFO queue: Lindley's recursion, ``start_i = max(arrival_i, finish_{i-1})``); a request's
transfer time counts its wait. Layer-by-layer streaming that overlaps the transfer with the
prefill itself (as Mooncake and SGLang do) is not modelled: the transfer starts when the prefill
ends, which is the conservative reading. Link utilisation is busy time over the horizon.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inferplan.errors import InferplanError
from inferplan.specs.topology import Topology

SPREAD = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


@dataclass(frozen=True)
class KvLink:
    """One prefill-to-decode path: achieved bandwidth (bytes/s) and a fixed cost per transfer."""

    bandwidth_bytes_s: float
    latency_s: float
    tier: str = "scale_out"

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_s > 0:
            raise InferplanError(f"KV link bandwidth must be > 0, got {self.bandwidth_bytes_s}")
        if self.latency_s < 0:
            raise InferplanError(f"KV link latency must be >= 0, got {self.latency_s}")

    def service_s(self, num_bytes: float) -> float:
        return self.latency_s + num_bytes / self.bandwidth_bytes_s


def kv_link(
    topology: Topology,
    *,
    prefill_gpus: int,
    decode_gpus: int,
    same_domain: bool,
    latency_s: float,
    efficiency: float = 1.0,
) -> KvLink:
    """The link between a prefill and a decode instance: their shards move in parallel, one
    per GPU pair, over NVLink inside a domain, else over the NICs."""
    if prefill_gpus < 1 or decode_gpus < 1:
        raise InferplanError("a prefill or decode instance needs at least one GPU")
    if not 0 < efficiency <= 1:
        raise InferplanError(f"KV link efficiency must be in (0, 1], got {efficiency}")
    tier = "scale_up" if same_domain and topology.scale_up_bytes_s else "scale_out"
    lanes = min(prefill_gpus, decode_gpus)
    bandwidth = topology.tier_bytes_s(tier) * lanes * efficiency
    return KvLink(bandwidth, latency_s, tier)


def kv_transfer_bytes(kv_bytes_per_token: float, prompt_tokens: int) -> float:
    if prompt_tokens < 0:
        raise InferplanError(f"prompt tokens must be >= 0, got {prompt_tokens}")
    return kv_bytes_per_token * prompt_tokens


@dataclass
class KvTransferQueue:
    """A FIFO link: ``submit`` transfers in arrival order, read the finish times and a summary."""

    link: KvLink
    _free_at: float = 0.0
    _last_arrival: float = float("-inf")
    _arrivals: list[float] = field(default_factory=list)
    _starts: list[float] = field(default_factory=list)
    _finishes: list[float] = field(default_factory=list)
    _bytes: list[float] = field(default_factory=list)

    def submit(self, now: float, num_bytes: float) -> float:
        """Queue a transfer ready at ``now``; returns when its last byte arrives."""
        if now < self._last_arrival:
            raise ValueError(
                f"transfers must be submitted in time order: {now} after {self._last_arrival}"
            )
        if num_bytes < 0:
            raise ValueError(f"a transfer cannot move {num_bytes} bytes")
        start = max(now, self._free_at)
        finish = start + self.link.service_s(num_bytes)
        self._free_at, self._last_arrival = finish, now
        self._arrivals.append(now)
        self._starts.append(start)
        self._finishes.append(finish)
        self._bytes.append(num_bytes)
        return finish

    @property
    def busy_s(self) -> float:
        return float(np.sum(np.subtract(self._finishes, self._starts)))

    def summary(self, horizon_s: float) -> dict[str, object]:
        """Bytes moved, transfer time (wait + wire) and wait as ``{mean, p50, p90, p99}`` in
        seconds, and the link's utilisation over ``horizon_s``."""
        total = np.subtract(self._finishes, self._arrivals)
        wait = np.subtract(self._starts, self._arrivals)
        return {
            "num_transfers": len(self._bytes),
            "bytes": float(np.sum(self._bytes)),
            "transfer_s": _spread(total),
            "queue_s": _spread(wait),
            "link_bandwidth_bytes_s": self.link.bandwidth_bytes_s,
            "link_tier": self.link.tier,
            "link_utilization": self.busy_s / horizon_s if horizon_s > 0 else None,
        }


def _spread(values: np.ndarray) -> dict[str, float | None]:
    if len(values) == 0:
        return {"mean": None, **dict.fromkeys(SPREAD)}
    out: dict[str, float | None] = {"mean": float(np.mean(values))}
    out.update({key: float(np.percentile(values, p)) for key, p in SPREAD.items()})
    return out
