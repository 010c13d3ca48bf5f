"""Accelerators as data: the bundled catalog (``data/gpus.yaml``) or a user's YAML file.

The catalog's figures are published ones, each with its source in the file. Units there are
decimal (GB = 1e9 B, TB/s = 1e12 B/s); dense peaks per dtype (no 2:4 sparsity); ``unidir_gbps``
is one direction of a link. ``capacity_gb`` is a marketing label, not a byte count: a device's
memory is the total that ``nvidia-smi`` / ``rocm-smi`` reports (``reported_mib``) less what the
CUDA driver keeps for itself before an engine sees it (``CUDA_DRIVER_RESERVE_BYTES``: vLLM logs
``total_gpu_memory`` 79.11-79.22 GiB on an H100 that reports 81,559 MiB = 79.65 GiB, and
139.81 GiB on an H200 that reports 143,771 MiB = 140.40 GiB; the catalog's comments cite
them). ROCm's figure is already what the framework sees. Parts without ``reported_mib`` fall back
to ``usable_gib`` (a user's file) or the nominal capacity in decimal GB.

A user's file uses the same schema: either a whole catalog (``accelerators: {name: {...}}``) or
one accelerator's mapping at the top level. Required: ``memory.capacity_gb``,
``memory.bandwidth_tbps`` and at least one dense peak in ``compute_dense_tflops``.
"""

from __future__ import annotations

import difflib
import math
import statistics
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplan.errors import InferplanError
from inferplan.textfile import path_exists, read_user_yaml

GIB = 1024**3
MIB = 1024**2
CUDA_DRIVER_RESERVE_BYTES = 0.5 * GIB  # reported total - what cudaMemGetInfo gives an engine

# Short names -> catalog keys: the SXM/HGX parts where there is a choice.
SHORT_NAMES: dict[str, str] = {
    "a100": "a100_sxm_80gb",
    "h100": "h100_sxm_80gb",
    "h100_sxm": "h100_sxm_80gb",
    "h100_pcie": "h100_pcie_80gb",
    "h200": "h200_sxm_141gb",
    "h200_sxm": "h200_sxm_141gb",
    "b200": "b200_hgx",
    "gb200": "gb200_per_gpu",
    "gh200": "gh200_96gb",
    "b300": "b300_hgx",
    "gb300": "gb300_per_gpu",
    "rtx_pro_6000": "rtx_pro_6000_server",
    "rtx6000_pro": "rtx_pro_6000_server",
    "l40s": "l40s",
    "rtx4090": "rtx_4090",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "mi355x": "mi355x",
    "tpu_v5e": "tpu_v5e",
    "tpu_v6e": "tpu_v6e",
    "gaudi3": "gaudi3",
}


# Sanity bounds on a user's figures (not physical limits): far above any announced part, so a
# unit slip (GB typed as bytes) or a YAML ``.inf`` is refused instead of planned with.
MAX_CAPACITY_GB = 100_000.0
MAX_BANDWIDTH_TBPS = 1000.0
MAX_TFLOPS = 1e6
MAX_LINK_GBPS = 1e6
MAX_DOMAIN_SIZE = 1_000_000
_STRICT = ConfigDict(extra="allow", allow_inf_nan=False)


class _Memory(BaseModel):
    model_config = _STRICT
    capacity_gb: float = Field(gt=0, le=MAX_CAPACITY_GB)
    bandwidth_tbps: float = Field(gt=0, le=MAX_BANDWIDTH_TBPS)
    usable_gib: float | None = Field(default=None, gt=0, le=MAX_CAPACITY_GB)
    reported_mib: float | None = Field(default=None, gt=0, le=MAX_CAPACITY_GB * 1024)


class _Link(BaseModel):
    model_config = _STRICT
    unidir_gbps: float | None = Field(default=None, gt=0, le=MAX_LINK_GBPS)
    domain_size: int | None = Field(default=None, ge=1, le=MAX_DOMAIN_SIZE)
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_DOMAIN_SIZE)


class _ScaleOut(BaseModel):
    model_config = _STRICT
    nic_gbit_per_gpu: float | None = Field(default=None, gt=0, le=MAX_LINK_GBPS * 8)


class _Accelerator(BaseModel):
    model_config = _STRICT
    name: str | None = None
    vendor: str = "unknown"
    architecture: str = "unknown"
    memory: _Memory
    compute_dense_tflops: dict[str, Annotated[float, Field(gt=0, le=MAX_TFLOPS)] | None]
    scale_up: _Link = Field(default_factory=_Link)
    host_link: _Link = Field(default_factory=_Link)
    scale_out_typical: _ScaleOut = Field(default_factory=_ScaleOut)
    tdp_w: float | None = Field(default=None, gt=0, le=1e6)
    cloud_prices_usd_per_gpu_hour: list[dict[str, Any]] = Field(default_factory=list)
    attention_prefill_speedup: float = Field(default=1.0, ge=1.0, le=4.0)
    host_cpu: Literal["x86", "grace"] = "x86"


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator, in SI units (bytes, bytes/s, FLOP/s)."""

    key: str
    name: str
    vendor: str
    architecture: str
    memory_bytes: float
    memory_bandwidth_bytes_s: float
    peak_flops: dict[str, float]  # dense FLOP/s (TOPS for int) by dtype; absent = unsupported
    scale_up_bytes_s: float | None  # one direction, per GPU
    scale_up_domain_size: int
    host_link_bytes_s: float | None  # one direction
    scale_out_bytes_s: float | None  # per GPU
    tdp_w: float | None
    price_usd_per_hour: float | None
    gpus_per_node: int | None = None  # set where a scale-up domain spans nodes (NVL72 trays)
    # The prefill attention core's rate against its efficiency family's parts: Blackwell Ultra
    # doubles the SFU's exponentials (softmax) over Blackwell (catalog comment cites NVIDIA).
    attention_prefill_speedup: float = 1.0
    # The CPU that runs the engine's host process: "grace" on the superchips (GH200, GB200,
    # GB300), whose Arm cores run a Python executor's per-step work slower than the x86 hosts
    # of HGX servers (``Efficiency.grace_host``, ``perf/overlap.py`` ``on_host``); "x86" else.
    host_cpu: Literal["x86", "grace"] = "x86"

    def peak(self, dtype: str) -> float:
        """Dense peak for ``dtype``; formats the part lacks run at the widest one it has
        (fp4 on Hopper dequantises to fp8/bf16 tensor cores)."""
        for candidate in _FALLBACK.get(dtype, (dtype,)):
            if candidate in self.peak_flops:
                return self.peak_flops[candidate]
        return max(self.peak_flops.values())


_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "bf16", "fp16"),
    "int4": ("int4", "bf16", "fp16"),
    "fp8": ("fp8", "bf16", "fp16"),
    "int8": ("int8", "bf16", "fp16"),
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "tf32": ("tf32", "fp32", "bf16", "fp16"),
    "fp32": ("fp32", "tf32", "bf16", "fp16"),
}


def _default_price(prices: list[dict[str, Any]]) -> float | None:
    """Median of the on-demand list prices, else of every listed price."""
    listed = [
        p for p in prices if isinstance(p.get("price"), int | float) and 0 <= p["price"] < math.inf
    ]
    on_demand = [p["price"] for p in listed if str(p.get("kind", "")).startswith("on-demand")]
    pool = on_demand or [p["price"] for p in listed]
    return float(statistics.median(pool)) if pool else None


def device_memory_bytes(memory: _Memory, vendor: str) -> float:
    """What an engine sees as the device's total (module docstring)."""
    if memory.reported_mib:
        reserve = CUDA_DRIVER_RESERVE_BYTES if vendor == "nvidia" else 0.0
        return memory.reported_mib * MIB - reserve
    if memory.usable_gib:
        return memory.usable_gib * GIB
    return memory.capacity_gb * 1e9


def _to_spec(key: str, acc: _Accelerator, source: str) -> GpuSpec:
    peaks = {k: float(v) * 1e12 for k, v in acc.compute_dense_tflops.items() if v is not None}
    if not any(k in peaks for k in ("bf16", "fp16", "fp8", "fp32", "tf32")):
        raise InferplanError(
            f"{source}: accelerator {key!r}: compute_dense_tflops needs at least one of "
            "bf16, fp16, fp8, fp32, tf32"
        )
    memory_bytes = device_memory_bytes(acc.memory, acc.vendor)
    return GpuSpec(
        key=key,
        name=acc.name or key,
        vendor=acc.vendor,
        architecture=acc.architecture,
        memory_bytes=memory_bytes,
        memory_bandwidth_bytes_s=acc.memory.bandwidth_tbps * 1e12,
        peak_flops=peaks,
        scale_up_bytes_s=acc.scale_up.unidir_gbps * 1e9 if acc.scale_up.unidir_gbps else None,
        scale_up_domain_size=acc.scale_up.domain_size or 1,
        host_link_bytes_s=acc.host_link.unidir_gbps * 1e9 if acc.host_link.unidir_gbps else None,
        scale_out_bytes_s=(
            acc.scale_out_typical.nic_gbit_per_gpu * 1e9 / 8
            if acc.scale_out_typical.nic_gbit_per_gpu
            else None
        ),
        tdp_w=acc.tdp_w,
        price_usd_per_hour=_default_price(acc.cloud_prices_usd_per_gpu_hour),
        gpus_per_node=acc.scale_up.gpus_per_node,
        attention_prefill_speedup=acc.attention_prefill_speedup,
        host_cpu=acc.host_cpu,
    )


def _parse_catalog(data: Any, source: str) -> dict[str, GpuSpec]:
    if not isinstance(data, dict):
        raise InferplanError(f"{source}: expected a YAML mapping at the top level")
    entries = data.get("accelerators")
    if entries is None:
        entries = {str(data.get("name") or Path(source).stem): data}
    if not isinstance(entries, dict) or not entries:
        raise InferplanError(f"{source}: 'accelerators' must map names to accelerator specs")
    out = {}
    for key, raw in entries.items():
        try:
            acc = _Accelerator.model_validate(raw)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InferplanError(
                f"{source}: accelerator {key!r}: {where}: {first['msg']}"
            ) from None
        out[str(key)] = _to_spec(str(key), acc, source)
    return out


@cache
def bundled_gpus() -> dict[str, GpuSpec]:
    text = resources.files("inferplan.specs").joinpath("data/gpus.yaml").read_text()
    return _parse_catalog(yaml.safe_load(text), "gpus.yaml")


def load_gpu(name: str) -> GpuSpec:
    """A GpuSpec from a short name, a catalog key or a YAML file path."""
    if not name.strip() or "\0" in name:
        raise InferplanError(f"--gpu: {name!r} is not a GPU name or path (`inferplan gpus`)")
    catalog = bundled_gpus()
    key = name.strip().lower().replace("-", "_")
    key = SHORT_NAMES.get(key, key)
    if key in catalog:
        return catalog[key]
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or path_exists(path):
        return _load_gpu_file(path)
    names = sorted(set(SHORT_NAMES) | set(catalog))
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.4)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    raise InferplanError(f"--gpu: unknown GPU {name!r}{hint} (`inferplan gpus` lists them all)")


def _load_gpu_file(path: Path) -> GpuSpec:
    data = read_user_yaml(path, "GPU")
    specs = _parse_catalog(data, str(path))
    if len(specs) != 1:
        raise InferplanError(
            f"--gpu: {path} holds {len(specs)} accelerators; use one of {', '.join(specs)} "
            "as the name with that file, or a file with a single accelerator"
        )
    return next(iter(specs.values()))
