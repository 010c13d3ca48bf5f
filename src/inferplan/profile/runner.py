"""Run the profile: every operator of the deployment's layer kinds over its grid, into rows.

Rows are what ``load_operator_table`` reads (``operator,num_tokens,context_tokens,time_s``), in a
fixed order (operators as ``perf.table`` lists them, grid points ascending), preceded by ``#``
comment lines that record what was profiled, where and how, and any fallback taken. No date is
written, so two profiles of the same deployment differ only in their times.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import torch

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.table import COLUMNS, LAYER_OPERATORS
from inferplan.profile import kernels, timing
from inferplan.profile.grid import Grid, grid_for
from inferplan.profile.shapes import TINY, ProfileShapes, profile_shapes, weighted_kinds

Row = tuple[str, int, int, float]
# (warm-up runs, timed runs) per grid point
RUNS = {"cuda": (3, 10), "cpu": (2, 5)}
KV_MEMORY_SHARE = 0.25  # largest attention point: this share of the free device memory
CPU_KV_BYTES = 2**28


@dataclass(frozen=True)
class Profile:
    rows: list[Row]
    comments: list[str]
    notes: list[str]
    device: str
    is_tiny: bool

    @property
    def is_for_planning(self) -> bool:
        return self.device == "cuda" and not self.is_tiny


def _env(plan: MemoryPlan, device: str, notes: list[str]) -> kernels.Env:
    dtype = plan.spec.dtype
    formats = plan.weight_formats

    def precision(fmt_what: str, grouped: bool = False) -> timing.Precision:
        fmt = getattr(formats, fmt_what)
        return timing.precision_for(
            fmt, what=fmt_what, device=device, model_dtype=dtype, notes=notes, grouped=grouped
        )

    if device == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info()
        max_kv = KV_MEMORY_SHARE * free_bytes
        if plan.kv_format.name != dtype:
            notes.append(f"attention: {plan.kv_format.name} KV cache timed as {dtype}")
    else:
        max_kv = CPU_KV_BYTES
    return kernels.Env(
        device,
        timing.activation_dtype(device, dtype),
        precision("linear"),
        precision("experts", grouped=True),
        precision("other"),
        max_kv,
    )


def _points(operator: str, grid: Grid, max_model_len: int) -> list[tuple[int, int]]:
    if operator == "attn_decode":
        return grid.decode_points()
    if operator == "attn_prefill":
        return grid.prefill_points(max_model_len)
    return [(n, 0) for n in grid.tokens]


def _measure(
    operator: str,
    kinds: dict[object, int],
    point: tuple[int, int],
    env: kernels.Env,
    timer: timing.Timer,
) -> float | None:
    """Count-weighted mean time over the layer kinds at one point (None: a kind is too large)."""
    total = 0.0
    for shape, count in kinds.items():
        try:
            run = kernels.build(operator, shape, *point, env)
            if run is None:
                return None
            total += timer.median_s(run) * count
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None
        except RuntimeError as err:
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise InferplanError(
                f"profile: {operator} at {point} failed on {env.device}: {message}"
            ) from None
    return total / sum(kinds.values())


def _layer_rows(
    shapes: ProfileShapes, grid: Grid, plan: MemoryPlan, env: kernels.Env, timer: timing.Timer
) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    skipped: list[str] = []
    for operator in LAYER_OPERATORS:
        kinds = weighted_kinds(shapes, operator)
        if not kinds:
            continue
        for point in _points(operator, grid, plan.max_model_len):
            time_s = _measure(operator, kinds, point, env, timer)
            if time_s is None:
                skipped.append(f"{operator}{point}")
            else:
                rows.append((operator, *point, time_s))
        env.release_weights()  # one operator's weights at a time (a MoE's experts: tens of GB)
    for n in grid.logit_tokens:
        time_s = _measure("lm_head", {shapes.lm_head: 1}, (n, 0), env, timer)
        if time_s is not None:
            rows.append(("lm_head", n, 0, time_s))
    notes = []
    if skipped:
        notes.append(f"skipped (too large for device memory): {', '.join(skipped)}")
    return rows, notes


def _allreduce_rows(plan: MemoryPlan, device: str, shapes: ProfileShapes, grid: Grid) -> list[Row]:
    from inferplan.profile.allreduce import measure_allreduce

    warmup, repeats = RUNS[device]
    times = measure_allreduce(
        shapes.hidden,
        list(grid.tokens),
        world=plan.parallelism.tp,
        backend="nccl",
        warmup=warmup,
        repeats=repeats,
    )
    return [("allreduce", n, 0, t) for n, t in sorted(times.items())]


def _comments(plan: MemoryPlan, gpu_name: str, device: str, shapes: ProfileShapes) -> list[str]:
    par, fmt = plan.parallelism, plan.weight_formats
    warmup, repeats = RUNS[device]
    clock = "CUDA events, L2 flushed before each run" if device == "cuda" else "perf_counter"
    size = "full shapes" if not shapes.is_tiny else f"TINY shapes ({TINY})"
    lines = [
        "inferplan profile: per-layer operator times for --operator-table",
        f"gpu-name: {gpu_name}; device: {timing.describe_device(device)}; "
        f"torch {torch.__version__}",
        f"deployment: model {plan.spec.name}; --gpu {plan.gpu.key}; tp {par.tp}; ep {par.ep}; "
        f"weights linear={fmt.linear.name} experts={fmt.experts.name} other={fmt.other.name}; "
        f"kv {plan.kv_format.name}",
        f"shapes: {size}; {len(shapes.kinds)} layer kind(s), each operator's time is the "
        "count-weighted mean over the kinds that run it",
        f"timing: median of {repeats} runs after {warmup} warm-up runs ({clock})",
    ]
    if device == "cpu" or shapes.is_tiny:
        lines.append("NOT FOR PLANNING: a CPU or tiny profile tests the pipeline only")
    return lines


def run_profile(plan: MemoryPlan, *, gpu_name: str, device: str, tiny: bool) -> Profile:
    """Time ``plan``'s operators on ``device`` (``auto``, ``cpu`` or ``cuda``)."""
    chosen = timing.pick_device(device)
    is_tiny = tiny or chosen == "cpu"
    shapes, grid = profile_shapes(plan, tiny=is_tiny), grid_for(plan, tiny=is_tiny)
    notes: list[str] = []
    if chosen == "cpu" and not tiny:
        notes.append("on the CPU the shapes are always tiny")
    env = _env(plan, chosen, notes)
    warmup, repeats = RUNS[chosen]
    threads = torch.get_num_threads()
    try:
        if chosen == "cpu":  # one thread: a busy core stalls a multi-threaded op for whole ms
            torch.set_num_threads(1)
        with torch.inference_mode():
            timer = timing.Timer(chosen, warmup=warmup, repeats=repeats)
            rows, skipped = _layer_rows(shapes, grid, plan, env, timer)
    finally:
        torch.set_num_threads(threads)
    notes += skipped
    tp, found = plan.parallelism.tp, torch.cuda.device_count() if chosen == "cuda" else 0
    if tp > 1 and chosen == "cuda" and found >= tp:
        rows += _allreduce_rows(plan, chosen, shapes, grid)
    else:
        why = "tp is 1" if tp == 1 else f"needs {tp} CUDA devices, found {found}"
        notes.append(f"all-reduce not measured ({why}): the roofline's stays")
    comments = _comments(plan, gpu_name, chosen, shapes) + [f"note: {n}" for n in notes]
    return Profile(rows, comments, notes, chosen, is_tiny)


def write_profile(profile: Profile, path: Path) -> None:
    try:
        with path.open("w", newline="") as handle:
            handle.writelines(f"# {line}\n" for line in profile.comments)
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerows((op, n, c, f"{t:.6e}") for op, n, c, t in profile.rows)
    except OSError as err:
        raise InferplanError(f"--output: cannot write {path}: {err.strerror}") from None
