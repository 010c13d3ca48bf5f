"""KV memory tiers below HBM: host DRAM, CXL memory expanders and NVMe SSDs (DESIGN §2.6).

A tier is plain data: a name, its capacity for one replica's KV, and the bandwidths at which
one replica reads KV back from it and writes KV into it. ``--kv-tiers`` lists them as
``name:capacity[:bandwidth]`` separated by commas, e.g. ``host:512GiB,nvme:3.84TB``;
``bandwidth`` is GB/s (decimal), one figure for both directions or ``read/write``.

Defaults (the bundled catalog ``specs/data/gpus.yaml``, section ``host_memory_tier``, which
cites its sources; figures are per GPU, one direction):

- ``host``: the GPU's host link (``host_link.unidir_gbps``: PCIe Gen5 x16 = 64 GB/s on H100/H200),
  both directions. Host DRAM itself (8-12 DDR5 channels, 307-614 GB/s per socket) is faster
  than the link, so the link is the bound. Capacity: none (the user says how much host memory
  the KV may use).
- ``cxl``: one CXL 2.0 memory expander per GPU (Micron CZ120, 36 GB/s mixed read/write,
  128 or 256 GB: the larger is the default capacity), behind the same host link.
- ``nvme``: one PCIe Gen5 x4 enterprise drive per GPU (Samsung PM1743: 13.0 GB/s sequential
  read, 6.6 GB/s write), behind the host link. Capacity: none (e.g. AWS p5 carries
  8 x 3.84 TB, one drive per GPU).

Assumptions: a replica's KV is sharded over its GPUs (TP x PP), each GPU moves its shard over
its own link at the same time, so a replica's bandwidth is the per-GPU figure times its GPUs
(``replica_tier``). Sustained copies reach 80-90% of these theoretical figures (a rule of thumb
the catalog notes without a source); they are used as they are, and ``bandwidth`` overrides them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import yaml

from inferplan.errors import InferplanError

TIER_NAMES = ("host", "cxl", "nvme")
_UNITS = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
MAX_TIER_BYTES = 1e18  # one exabyte: a typo, not a deployment
MAX_TIER_BYTES_S = 1e15  # 1 PB/s: far above any link


@dataclass(frozen=True)
class TierSpec:
    """One tier for one replica: capacity and bandwidths (bytes, bytes/s)."""

    name: str
    capacity_bytes: float
    read_bytes_s: float
    write_bytes_s: float


@dataclass(frozen=True)
class TierRequest:
    """A tier as ``--kv-tiers`` gives it (None: the catalog's default)."""

    name: str
    capacity_bytes: float | None
    read_bytes_s: float | None = None
    write_bytes_s: float | None = None


def parse_size_bytes(flag: str, text: str) -> float:
    """``512GiB``, ``3.84TB``, ``1e12`` (bytes) -> bytes."""
    match = _SIZE.match(text)
    unit = match.group(2).upper() if match else ""
    if match is None or (unit not in _UNITS and unit != ""):
        raise InferplanError(
            f"{flag}: {text!r} is not a size; use a number with B, KB, MB, GB, TB, KiB, MiB, "
            "GiB or TiB, e.g. 512GiB"
        )
    value = float(match.group(1)) * _UNITS.get(unit, 1)
    if not 0 < value <= MAX_TIER_BYTES:
        raise InferplanError(f"{flag}: {text!r} must be > 0 and at most 1 EB")
    return value


def _bandwidth(flag: str, text: str) -> float:
    try:
        value = float(text) * 1e9
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_TIER_BYTES_S:
        raise InferplanError(
            f"{flag}: bandwidth {text!r} must be a number of GB/s in (0, 1e6], "
            "e.g. nvme:3.84TB:13/6.6"
        )
    return value


def parse_kv_tiers(text: str, flag: str = "--kv-tiers") -> tuple[TierRequest, ...]:
    """``name:capacity[:bandwidth]`` items, comma-separated; each name once."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InferplanError(f"{flag}: expected name:capacity items, e.g. host:512GiB,nvme:3.84TB")
    out: list[TierRequest] = []
    for item in items:
        parts = [p.strip() for p in item.split(":")]
        name = parts[0].lower()
        if name not in TIER_NAMES or len(parts) > 3:
            raise InferplanError(
                f"{flag}: {item!r}: expected name:capacity[:bandwidth] with name one of "
                f"{', '.join(TIER_NAMES)}"
            )
        if any(r.name == name for r in out):
            raise InferplanError(f"{flag}: tier {name!r} is listed twice")
        capacity = parse_size_bytes(f"{flag} {name}", parts[1]) if len(parts) > 1 else None
        read = write = None
        if len(parts) == 3:
            pair = parts[2].split("/")
            if len(pair) > 2:
                raise InferplanError(f"{flag} {name}: bandwidth is GB/s or read/write GB/s")
            read = _bandwidth(f"{flag} {name}", pair[0])
            write = _bandwidth(f"{flag} {name}", pair[-1])
        out.append(TierRequest(name, capacity, read, write))
    return tuple(out)


@cache
def _offload_catalog() -> dict[str, Any]:
    text = resources.files("inferplan.specs").joinpath("data/gpus.yaml").read_text()
    section: dict[str, Any] = yaml.safe_load(text)["host_memory_tier"]
    return section


def catalog_tier(name: str, host_link_bytes_s: float | None) -> TierSpec:
    """The catalog's per-GPU figures for tier ``name`` behind a host link of
    ``host_link_bytes_s`` (None: not in the catalog); capacity 0 where it has none."""
    if host_link_bytes_s is None:
        raise InferplanError(
            f"--kv-tiers {name}: the GPU's host link bandwidth is not in the catalog; give the "
            f"tier's bandwidth, e.g. {name}:512GiB:64"
        )
    link = host_link_bytes_s
    section = _offload_catalog()
    if name == "host":
        return TierSpec(name, 0.0, link, link)
    if name == "cxl":
        module = section["cxl_memory_expander"]["products"][0]  # Micron CZ120
        bw = min(float(module["bandwidth_gbps"]) * 1e9, link)
        return TierSpec(name, max(module["capacity_gb"]) * 1e9, bw, bw)
    drive = next(d for d in section["nvme_ssd"] if "PM1743" in d["class"])
    read, write = float(drive["seq_read_gbps"]) * 1e9, float(drive["seq_write_gbps"]) * 1e9
    return TierSpec(name, 0.0, min(read, link), min(write, link))


def replica_tier(request: TierRequest, host_link_bytes_s: float | None, gpus: int) -> TierSpec:
    """Tier ``request`` for a replica of ``gpus`` GPUs: catalog bandwidths (per GPU) times
    ``gpus`` unless overridden (an override is the replica's); the capacity as given."""
    read, write = request.read_bytes_s, request.write_bytes_s
    if read is not None and write is not None:
        base = TierSpec(request.name, 0.0, read, write)
    else:
        per_gpu = catalog_tier(request.name, host_link_bytes_s)
        read, write = per_gpu.read_bytes_s * gpus, per_gpu.write_bytes_s * gpus
        base = replace(per_gpu, read_bytes_s=read, write_bytes_s=write)
    capacity = request.capacity_bytes
    if capacity is None:
        if request.name != "cxl":
            raise InferplanError(
                f"--kv-tiers {request.name}: give its capacity, e.g. {request.name}:512GiB "
                "(the catalog has a default for cxl only)"
            )
        capacity = catalog_tier("cxl", host_link_bytes_s or 1.0).capacity_bytes
    return replace(base, capacity_bytes=capacity)


@dataclass(frozen=True)
class OffloadConfig:
    """A replica's tiers and how it moves KV to and from them (``engine/offload.py``)."""

    tiers: tuple[TierSpec, ...]
    block_bytes: float  # one pool block across the replica's GPUs
    eviction_cap_bytes_s: float | None = None  # cap on write bandwidth (None: the tiers')
    overlaps_compute: bool = True  # transfers run beside the step's compute (vLLM v1)

    def capacity_blocks(self, tier: TierSpec) -> int:
        return int(tier.capacity_bytes // self.block_bytes) if self.block_bytes > 0 else 0

    def write_bytes_s(self, tier: TierSpec) -> float:
        cap = self.eviction_cap_bytes_s
        return tier.write_bytes_s if cap is None else min(tier.write_bytes_s, cap)
