"""What ``scripts/fit_published.py`` fits, and the constants it fits.

``FitConfig`` is one fit's configuration, built from its flags and passed to every function
that needs it (nothing module-level is changed by a flag): the bounds of each GPU family's
fractions, the host costs each engine release fits or holds fixed, and the release classes.
``Constants`` holds one point: per GPU family the physical fractions, per release class the
host costs. Physical bounds: fractions of a datasheet peak in (0, 1]; overheads >= 0.

Release classes: the rows' ``engine_release`` (TensorRT-LLM's C++ flow, 0.14 and 0.17, and
its PyTorch backend, 0.19 on), and with ``release_split`` the PyTorch backend in two:
0.19-1.0 and the main revision and 1.1 on (docs/validation.md, ``grace17``: the two want
different host costs per sequence).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from inferplan.perf import comm, multi_rank
from inferplan.perf.efficiency import FAMILY_OF_ARCHITECTURE, Efficiency
from inferplan.plan.calibration import huber
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import RowResult, engine_release, run_setup, validate_rows
from inferplan.specs.hardware import load_gpu

FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute": (0.2, 1.0),
    "memory_bandwidth": (0.4, 1.0),
    "attention_memory": (0.2, 1.0),
    "collective_bandwidth": (0.1, 1.0),
    "collective_latency_s": (0.0, 3e-5),
    "dequant_gemm": (0.1, 1.0),
    "moe_gemm": (0.1, 1.0),
}
# With --per-hop, collective_latency_s is NCCL's per-step latency (perf/comm.py): 0 to 6 us, the
# largest single-node step latency in NCCL's tuning table (PCIe, Ring / Simple: 5.7 us).
PER_HOP_BOUNDS = (0.0, 6e-6)
# With --gemm-shape, the output elements at which SM occupancy halves a TP-sharded GEMM
# (perf/gemm_shape.py): up to one wave of 128 x 256 output tiles on the bundled part with the
# most SMs (RTX PRO 6000 Blackwell, 188 SMs: 6.2 M); the tail of a GEMM's last wave idles at
# most one wave's SMs.
GEMM_SHAPE_BOUNDS = (0.0, 6.2e6)
COLLECTIVE_KEYS = ("collective_bandwidth", "collective_latency_s")
COST_BOUNDS: dict[str, tuple[float, float]] = {
    "step_overhead_s": (0.0, 5e-3),
    "per_seq_overhead_s": (0.0, 5e-5),
    "layer_overhead_s": (0.0, 1e-4),
    "host_overlap": (0.0, 1.0),
    # Zipf exponent of expert popularity (perf/moe.py), hot experts placed load-obliviously.
    # 0 is uniform routing; 0.6 reproduces the per-expert skew TensorRT-LLM measured for
    # DeepSeek-R1 (hottest expert 11.9x the mean; docs/moe.md section 5); at 1.0 every token
    # picks the hottest of 128 or 256 experts (16-32x the mean), beyond any measurement.
    "routing_skew": (0.0, 1.0),
    # A Grace host's per-step work against an x86 server's (perf/overlap.py on_host): no faster
    # (the superchips' Neoverse V2 cores against the HGX servers' Xeons) and at most 3x slower.
    "grace_host": (1.0, 3.0),
    # The per-step work of a replica on more than one GPU (perf/multi_rank.py: the scheduled
    # batch broadcast to the other ranks, their lockstep): a shared-memory or MPI broadcast on
    # one node and a rank's wait for the slowest, at most a millisecond a step.
    "rank_step_overhead_s": (0.0, 1e-3),
}
# The host costs fitted only with ``FitConfig.rank_sync`` (``--rank-sync``).
RANK_KEYS = ("rank_step_overhead_s",)
# Each constant's finite-difference step for the served rows' linearisation (--served), in its
# transformed value (log for a fraction): large enough to step over the simulations' discrete
# choices (batch sizes, graph sizes), small against the distance the fit moves a constant.
FRACTION_STEP = 0.05
SLOPE_STEPS: dict[str, float] = {
    "collective_latency_s": 3e-6,
    "step_overhead_s": 2e-4,
    "per_seq_overhead_s": 2e-6,
    "layer_overhead_s": 5e-6,
    "host_overlap": 0.1,
    "routing_skew": 0.1,
    "grace_host": 0.1,
    "rank_step_overhead_s": 1e-4,
}
# TensorRT-LLM's PyTorch backend's release classes: one, or with ``release_split`` 0.19-1.0
# (``trtllm-pytorch``) and the main revision and 1.1 on (``PYTORCH_1_1``).
PYTORCH = "trtllm-pytorch"
PYTORCH_1_1 = "trtllm-pytorch-1.1"
# The host costs every release class has (a class's ``split_keys`` aside, the 1.1 class can
# take them from the 0.19-1.0 class).
SHARED_KEYS = (
    "step_overhead_s",
    "per_seq_overhead_s",
    "layer_overhead_s",
    "host_overlap",
    "routing_skew",
)


def release_class(row: PublishedRow, split: bool = False) -> str | None:
    """The host-cost class a row is fitted in: its ``engine_release``, and with ``split`` the
    PyTorch backend's main revision and 1.1 on apart from 0.19-1.0."""
    release = engine_release(row)
    return split_class(row.engine_version) if split and release == PYTORCH else release


def split_class(version: str) -> str:
    """A PyTorch-backend release's class under the split: the main revision (a doc revision
    between 1.0 and 1.2, published.csv's note) and 1.1 on, or 0.19-1.0 (and no version)."""
    head = version.split("@")[0]
    if head == "main":
        return PYTORCH_1_1
    if not head:
        return PYTORCH
    numbers = re.match(r"(\d+)\.(\d+)", head)  # ``1.1rc1``, ``1.2.0rc1``: the release's
    if numbers is None:
        return PYTORCH
    major, minor = int(numbers[1]), int(numbers[2])
    return PYTORCH_1_1 if (major, minor) >= (1, 1) else PYTORCH


@dataclass(frozen=True)
class FitConfig:
    """One fit's configuration. ``family_bounds``: the fractions fitted per GPU family and
    their bounds. ``release_fixed``: host costs that are a release class's facts, not fitted
    (``overlap_scheduler``). ``release_only``: host costs fitted for the named classes only
    (``grace_host``: none by default). ``release_split``: the PyTorch backend in two classes;
    ``split_keys``: the host costs the second class fits for itself, the others its rows take
    from the first (none named: every one its own)."""

    family_bounds: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(FIT_BOUNDS))
    release_fixed: dict[str, dict[str, float]] = field(default_factory=dict)
    release_only: dict[str, tuple[str, ...]] = field(default_factory=lambda: {"grace_host": ()})
    release_split: bool = False
    split_keys: tuple[str, ...] = ()
    rank_sync: bool = False

    @classmethod
    def from_flags(
        cls,
        per_hop: bool = False,
        gemm_shape: bool = False,
        overlap_scheduler: tuple[str, ...] = (),
        release_split: bool = False,
        split_keys: tuple[str, ...] = (),
        rank_sync: bool = False,
        grace_host: tuple[str, ...] = (),
    ) -> FitConfig:
        """``overlap_scheduler``: the release classes whose host work runs behind the GPU's
        (the PyTorch backend's overlap scheduler, which trtllm-bench turns on in 0.19 and which
        is on by default from 0.20 on: step n + 1's host work while the GPU runs step n;
        ``host_overlap`` 1, not fitted) and whose Grace host speed is fitted (``grace_host``;
        docs/validation.md, ``grace17``). ``grace_host``: further classes whose Grace host speed
        is fitted with ``host_overlap`` still fitted (the host and the GPU summed, less the
        share that hides; docs/validation.md, ``trt1019``)."""
        bounds = dict(FIT_BOUNDS)
        if per_hop:
            bounds["collective_latency_s"] = PER_HOP_BOUNDS
        if gemm_shape:
            bounds["gemm_half_outputs"] = GEMM_SHAPE_BOUNDS
        return cls(
            family_bounds=bounds,
            release_fixed={r: {"host_overlap": 1.0} for r in overlap_scheduler},
            release_only={"grace_host": tuple(dict.fromkeys(overlap_scheduler + grace_host))},
            release_split=release_split,
            split_keys=split_keys if release_split else (),
            rank_sync=rank_sync,
        )

    def shared_keys(self) -> tuple[str, ...]:
        """The host costs both PyTorch classes fit, so the ones ``split_keys`` may name:
        ``SHARED_KEYS``, and with ``rank_sync`` the multi-GPU replica's per-step cost."""
        return SHARED_KEYS + (RANK_KEYS if self.rank_sync else ())

    def inherited(self) -> tuple[str, ...]:
        """The host costs the 1.1 class takes from the 0.19-1.0 class (``split_keys``)."""
        if not self.split_keys:
            return ()
        return tuple(k for k in self.shared_keys() if k not in self.split_keys)

    def block_classes(self, release: str) -> tuple[str, ...]:
        """The classes whose rows a class's constants reach: the 0.19-1.0 class's shared
        costs reach the 1.1 class's rows too."""
        return (PYTORCH, PYTORCH_1_1) if release == PYTORCH and self.inherited() else (release,)

    def pytorch_classes(self) -> tuple[str, ...]:
        return (PYTORCH, PYTORCH_1_1) if self.release_split else (PYTORCH,)

    def release_bounds(self, release: str) -> dict[str, tuple[float, float]]:
        """The host costs fitted for ``release``: ``COST_BOUNDS`` less its fixed ones and those
        fitted for another release only."""
        fixed = self.release_fixed.get(release, {})
        own = self.split_keys if release == PYTORCH_1_1 and self.split_keys else COST_BOUNDS
        return {
            k: b
            for k, b in COST_BOUNDS.items()
            if k not in fixed
            and k in own
            and release in self.release_only.get(k, (release,))
            and (self.rank_sync or k not in RANK_KEYS)
        }

    def log_keys(self) -> frozenset[str]:
        """The constants linearised in their logs: the fractions (lower bound above 0)."""
        return frozenset(k for k, (low, _) in self.family_bounds.items() if low > 0)

    def slope_steps(self) -> dict[str, float]:
        return {**dict.fromkeys(self.log_keys(), FRACTION_STEP), **SLOPE_STEPS}

    def step(self, name: str, value: float) -> float:
        """The finite-difference step of ``name`` at ``value``, away from its upper bound."""
        key = name.split(":")[1]
        step = self.slope_steps()[key]
        high = {**self.family_bounds, **COST_BOUNDS}[key][1]
        moved = value * math.exp(step) if key in self.log_keys() else value + step
        return -step if moved > high else step


@dataclass
class Constants:
    """Per GPU family the physical fractions; per release class the host costs (the classes
    as ``release_split`` deals the rows)."""

    family: dict[str, Efficiency]
    costs: dict[str, dict[str, float]]
    release_split: bool = False
    inherit: tuple[str, ...] = ()  # the 1.1 class's costs taken from the 0.19-1.0 class

    def release_of(self, row: PublishedRow) -> str | None:
        return release_class(row, self.release_split)

    def class_costs(self, release: str) -> dict[str, float]:
        """A class's host costs as its rows run them (its own, and those it inherits)."""
        if release != PYTORCH_1_1 or not self.inherit:
            return self.costs[release]
        return {**{k: self.costs[PYTORCH][k] for k in self.inherit}, **self.costs[release]}

    def for_row(self, row: PublishedRow) -> Efficiency:
        eff = self.family[family_of(row)]
        release = self.release_of(row)
        return replace(eff, **self.class_costs(release)) if release in self.costs else eff


def family_of(row: PublishedRow) -> str:
    return FAMILY_OF_ARCHITECTURE.get(load_gpu(row.gpu).architecture, "default")


def fit_rows() -> list[PublishedRow]:
    """The closed-form throughput rows (trtllm-bench offline, fixed lengths)."""
    return [
        row
        for row in bundled_published()
        if skip_reason(row) is None and row.family == "throughput" and run_setup(row).closed_form
    ]


def served_rows() -> list[PublishedRow]:
    """The served runs' rows (simulated by the event engine, not in closed form)."""
    return [
        r for r in bundled_published() if skip_reason(r) is None and not run_setup(r).closed_form
    ]


def predict(rows: list[PublishedRow], constants: Constants) -> list[RowResult]:
    return validate_rows(rows, efficiency=constants.for_row)


def loss(results: list[RowResult]) -> float:
    terms = [huber(math.log(r.predicted / r.row.value)) for r in results if r.predicted]
    missing = sum(r.predicted is None for r in results)
    return (sum(terms) + missing * 1.0) / max(len(results), 1)


def values_of(c: Constants, config: FitConfig) -> dict[str, float]:
    """Every fitted constant as ``owner:key`` (a GPU family or a release class)."""
    keys = config.family_bounds
    out = {f"{f}:{k}": float(getattr(e, k)) for f, e in c.family.items() for k in keys}
    out.update({f"{r}:{k}": float(v) for r, costs in c.costs.items() for k, v in costs.items()})
    return out


def with_variable(c: Constants, name: str, value: float) -> Constants:
    owner, key = name.split(":")
    if owner in c.family:
        return set_family(owner)(c, key, value)
    return set_release(owner)(c, key, value)


def reaches(c: Constants, row: PublishedRow, name: str) -> bool:
    """Whether the constant ``name`` (``owner:key``) moves ``row``'s prediction: its GPU
    family's or release class's, and a 0.19-1.0 cost the 1.1 class inherits (``split_keys``)."""
    owner, key = name.split(":")
    release = c.release_of(row)
    if family_of(row) == owner or release == owner:
        return True
    return owner == PYTORCH and release == PYTORCH_1_1 and key in c.inherit


def set_family(family: str) -> Callable[[Constants, str, float], Constants]:
    def setter(c: Constants, name: str, value: float) -> Constants:
        moved = replace(c.family[family], **{name: value})
        return replace(c, family={**c.family, family: moved})

    return setter


def set_release(release: str) -> Callable[[Constants, str, float], Constants]:
    def setter(c: Constants, name: str, value: float) -> Constants:
        return replace(c, costs={**c.costs, release: {**c.costs[release], name: value}})

    return setter


def _set_switches(per_hop: bool, logits_gather: bool) -> None:
    comm.PER_HOP_LATENCY = per_hop
    multi_rank.LOGITS_GATHER = logits_gather


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """Processes for the fit's columns and folds, each set to this process's
    ``perf/comm.py`` ``PER_HOP_LATENCY`` (``--per-hop``) and ``perf/multi_rank.py``
    ``LOGITS_GATHER`` (``--logits-gather``), forked or spawned alike."""
    switches = (comm.PER_HOP_LATENCY, multi_rank.LOGITS_GATHER)
    return ProcessPoolExecutor(max_workers=jobs, initializer=_set_switches, initargs=switches)
