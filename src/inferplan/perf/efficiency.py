"""Efficiency constants: the achievable fraction of each peak, and fixed overheads, per GPU family.

They are data (``data/efficiency/<family>.yaml``), documented there with their starting values'
sources; the calibration command fits them to measurements and writes a file of the same schema.
Fractions must lie in (0, 1]: a fit that needs more means the model misses a mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplan.errors import InferplanError
from inferplan.specs.hardware import GpuSpec
from inferplan.textfile import read_user_yaml

FAMILY_OF_ARCHITECTURE = {
    "hopper": "hopper",
    "ampere": "ampere",
    "blackwell": "blackwell",
    "ada_lovelace": "ada",
    # RTX PRO 6000 Blackwell (sm_120, GB202): warp-level MMA tensor cores, GDDR7 and PCIe like
    # Ada's L40S, not the B200's tcgen05/TMEM SMs, HBM and NVLink (docs/validation.md, catalog).
    "blackwell_gb202": "ada",
    "cdna3": "cdna3",
    "cdna4": "cdna3",
}


# Upper bounds on overheads: a second per step or per collective is no GPU's behaviour; the
# bundled families use microseconds. They keep a hand-edited file from planning with absurd
# constants (or .inf, which YAML accepts).
MAX_OVERHEAD_S = 1.0
MAX_ROUTING_SKEW = 5.0  # the Zipf exponents perf/moe.py accepts
# A host CPU's per-step work against an x86 server's (``grace_host``): a sanity range, a factor
# of four either way.
MIN_HOST_SPEED = 0.25
MAX_TILE_ROWS = 256.0  # the largest query tile of the attention kernels modelled (FA2/FA3: 64-128)
# Output elements at which SM occupancy halves a TP-sharded GEMM (perf/gemm_shape.py): a
# sanity limit for hand-edited files, 16 waves of 128 x 256 tiles on the bundled part with the
# most SMs (188: about 99 M); the fit keeps it within one wave.
MAX_HALF_OUTPUTS = 1e8


class _EfficiencyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    gemm_compute: float = Field(gt=0, le=1)
    gemm_half_tokens: float = Field(ge=0, le=1e9)
    memory_bandwidth: float = Field(gt=0, le=1)
    attention_compute: float = Field(gt=0, le=1)
    attention_memory: float = Field(gt=0, le=1)
    collective_bandwidth: float = Field(gt=0, le=1)
    collective_latency_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    step_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    per_seq_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    eager_layer_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    elementwise_passes: float = Field(ge=0, le=1000)
    layer_overhead_s: float = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S)
    dequant_gemm: float = Field(default=1.0, gt=0, le=1)
    host_overlap: float = Field(default=0.0, ge=0, le=1)
    routing_skew: float = Field(default=0.0, ge=0, le=MAX_ROUTING_SKEW)
    moe_gemm: float = Field(default=1.0, gt=0, le=1)
    mixed_decode_rows: float = Field(default=1.0, ge=1, le=MAX_TILE_ROWS)
    gemm_half_outputs: float = Field(default=0.0, ge=0, le=MAX_HALF_OUTPUTS)
    grace_host: float = Field(default=1.0, ge=MIN_HOST_SPEED, le=1 / MIN_HOST_SPEED)
    rank_step_overhead_s: float = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S)


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak and per-step overheads (see the family files)."""

    gemm_compute: float  # of dense tensor-core peak, for large GEMMs
    gemm_half_tokens: float  # GEMM rows at which achieved compute is half of gemm_compute
    memory_bandwidth: float  # of HBM bandwidth, streaming weights
    attention_compute: float  # of peak, flash-attention prefill
    attention_memory: float  # of HBM bandwidth, paged-attention KV reads
    collective_bandwidth: float  # of the link bandwidth, all-reduce / all-to-all
    collective_latency_s: float  # per collective call
    step_overhead_s: float  # CPU scheduling, input preparation, sampling per step
    per_seq_overhead_s: float  # per scheduled sequence and step
    eager_layer_overhead_s: float  # kernel launches per layer outside CUDA graphs
    elementwise_passes: float  # hidden-state reads+writes per layer for norms, residuals, RoPE
    # Per layer and step, CUDA graphs or not: each of a layer's kernels takes a few microseconds
    # however little it does (launch, synchronisation, tail), which the roofline of tiny
    # decode GEMMs and collectives does not see.
    layer_overhead_s: float = 0.0
    # Of gemm_compute, for GEMMs whose weights are in a format the part has no tensor cores
    # for (MXFP4 on Hopper): the kernel dequantises each tile to BF16 before the MMA.
    dequant_gemm: float = 1.0
    # Share of the host's per-step and per-sequence costs that runs while the GPU computes
    # (an overlap scheduler), hidden as far as the GPU's work lasts (perf/overlap.py).
    host_overlap: float = 0.0
    # Zipf exponent of the experts' popularity where the run states no routing (perf/moe.py),
    # with the hot experts placed without regard to load (placement ``oblivious``): the
    # busiest expert-parallel rank gets more than its share of the picks. 0: uniform routing.
    routing_skew: float = 0.0
    # Of gemm_compute, for the routed experts' grouped GEMMs: each expert's rows are padded to
    # the kernel's tile and the tokens are permuted in and reduced out around the GEMMs, so the
    # per-row (MMA) part runs slower than a dense GEMM's; the small-batch ramp is unchanged.
    moe_gemm: float = 1.0
    # Query rows the attention kernel computes for each decode sequence and query head in a step
    # that also carries a prefill chunk: 1 where the kernel packs decode queries (or the real
    # rows); an engine whose kernel gives each decode query a whole tile sets the tile's rows
    # (perf/vllm_attention.py: vLLM's FlashAttention-2 on Ampere, 64). Engine-set, not fitted.
    mixed_decode_rows: float = 1.0
    # Output elements (rows x per-rank columns) at which SM occupancy alone halves a
    # TP-sharded GEMM's efficiency (perf/gemm_shape.py): its half-efficiency rows grow as
    # the rank's matrices narrow. 0: the ramp depends on the rows only.
    gemm_half_outputs: float = 0.0
    # The host's per-step and per-sequence work (step_overhead_s, per_seq_overhead_s) on a
    # Grace-hosted part (GpuSpec.host_cpu "grace": GH200, GB200, GB300), as a multiple of the
    # x86 host's the costs are stated for; an engine release's constant (perf/overlap.py
    # ``on_host``; read by TensorRT-LLM's runs only). 1: the same host speed.
    grace_host: float = 1.0
    # Host work per step that only a replica of more than one rank does (perf/multi_rank.py:
    # the scheduled batch sent to the other ranks and the ranks' lockstep); an engine
    # release's constant, added to step_overhead_s when the replica spans several GPUs.
    rank_step_overhead_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def parse_efficiency(data: object, source: str) -> Efficiency:
    try:
        parsed = _EfficiencyFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InferplanError(f"{source}: {where}: {first['msg']}") from None
    return Efficiency(**parsed.model_dump())


@cache
def bundled_efficiency(family: str) -> Efficiency:
    name = family if family in set(FAMILY_OF_ARCHITECTURE.values()) else "default"
    text = resources.files("inferplan.perf").joinpath(f"data/efficiency/{name}.yaml").read_text()
    return parse_efficiency(yaml.safe_load(text), f"efficiency/{name}.yaml")


def efficiency_for(gpu: GpuSpec) -> Efficiency:
    return bundled_efficiency(FAMILY_OF_ARCHITECTURE.get(gpu.architecture, "default"))


def load_efficiency_file(path: Path) -> Efficiency:
    """A calibration file (``--calibration``): the same keys, under ``efficiency:``."""
    data = read_user_yaml(path, "--calibration")
    if isinstance(data, dict) and "efficiency" in data:
        data = data["efficiency"]
    return parse_efficiency(data, str(path))
