"""Fit each served engine's front end (and, jointly, its host costs); cross-validate them.

Rows: the published latency rows (TTFT, TPOT, ITL) of the runs served over HTTP and measured
by ``vllm bench serve`` (GPUStack), by front-end class (``engine/frontend.py``: vLLM v1,
SGLang, ``trtllm-serve``). Constants per class: the front end's ``per_request_s``,
``per_input_token_s`` and ``per_token_s`` on a grid inside ``BOUNDS``, and for vLLM and SGLang
the engine's host costs (``step_overhead_s``, ``per_seq_overhead_s``, ``perf/engine_overheads.py``)
on ``HOSTS`` (vLLM v1: ``VLLM_HOSTS``, bounded by what vLLM is measured to spend on the
host) with kernel factors on ``FACTORS`` (TensorRT-LLM runs ``validate``'s ``trtllm-serve``
runtime, fitted by ``fit_trtllm_serve.py``; vLLM's BF16 is the reference, 1). Every engine
simulation runs once per host-cost point; the front end is a pass over its records, so the
whole grid is searched exhaustively. Loss: mean Huber loss of log errors.

Cross-validation: grouped k-fold by configuration (``case_id``), dealt round-robin in sorted
order; each fold's rows are predicted with the grid point that fits the other folds best.
The in-sample fit is written to ``engine/data/frontend.yaml`` and
``perf/data/engine_overheads.yaml`` unless ``--dry-run``. Run from the repository root:

    .venv/bin/python scripts/fit_frontend.py --dry-run
"""

from __future__ import annotations

import argparse
import itertools
import math
import pickle
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from inferplan.engine.frontend import FrontEnd, frontend_class
from inferplan.errors import InferplanError
from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.engine_kernels import engine_factor, plan_kernel_class, scale_kernels
from inferplan.perf.sglang_moe import sglang_kernel_class
from inferplan.perf.vllm_moe import vllm_kernel_class
from inferplan.plan.chat_stream import empty_chunks, merged_gaps
from inferplan.plan.folds import (
    error_rows,
    grouped_folds,
    log_huber_loss,
    metric_key,
    relative_errors,
)
from inferplan.plan.published import ENGINES, PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    burst_reason,
    group_runs,
    memory_plan,
    metric_values,
    row_efficiency,
    run_setup,
    served_summary,
    simulate_run,
)
from inferplan.specs.hardware import load_gpu

MS, US = 1e-3, 1e-6
# Physical bounds: an API server spends well under 10 ms of CPU on a request (parse, chat
# template, tokenise), and tens of microseconds per streamed token (detokenise, one SSE chunk,
# the client's parse of it).
FRONTENDS = [
    FrontEnd(),
    FrontEnd(per_request_s=1 * MS, per_token_s=25 * US),
    FrontEnd(per_request_s=3 * MS),
    FrontEnd(per_token_s=50 * US),
    FrontEnd(per_token_s=75 * US),
]
# Kernel factors (perf/engine_kernels.py): (0, 1], 1 = the family constants.
FACTORS = [1.0, 0.75, 0.55, 0.4, 0.3]
# Host costs (perf/engine_overheads.py): fit_engine_overheads.py's bounds, where its fit
# ends (4.96 ms, 99 us), and a quarter of them.
HOSTS = [(5 * MS, 100 * US), (1.25 * MS, 25 * US)]
# vLLM v1's (synchronous scheduling): at most what it is measured to spend on the host, the time
# --async-scheduling saves (docs/validation.md "Latency rows", vllmlat): about 3 ms per step
# (GPUStack's gpt-oss-20b on one A100, `32000/100`, TPOT 278.2 ms synchronous, 275.0 ms async)
# and 20 us per sequence and step (`2000/100`, 119.2 vs 114.2 ms at 256 sequences; 13 us per
# sequence on A100 in vllm-project/vllm#23914: 5.4 % of 63 ms at 256 sequences).
# A third value is a per-layer floor (``layer_overhead_s``): the time a decoder layer's kernels take
# however little they compute. Inside a CUDA graph a kernel costs about 3 us even when it does
# almost nothing (developer.nvidia.com/blog/cuda-graphs: 20 kernels of 2.9 us each ran at 3.4 us
# apiece when replayed as a graph), and a vLLM decoder layer runs 10-20 of them (norms, the
# projections with their FP8/MXFP4 activation quantisation, rotary and cache write, attention, the
# all-reduces, the MoE router, align, expert and sum kernels), where the roofline charges a decode
# step of a few sequences well under a microsecond for most of them: 20 or 40 us a layer
# (TensorRT-LLM's PyTorch backend fits 28 us, ``plan/data/published_cpu_costs.yaml``), tried at
# the host point every fold of the committed grid takes (3 ms, 20 us), with ``--layer-floors``
# only: the fit takes 40 us, its top, and the committed grid has none (docs/validation.md,
# ``vllmlat`` night).
VLLM_HOSTS = [
    (1 * MS, 5 * US, 0.0),
    (1 * MS, 20 * US, 0.0),
    (3 * MS, 5 * US, 0.0),
    (3 * MS, 20 * US, 0.0),
]
VLLM_LAYER_HOSTS = [(3 * MS, 20 * US, 20 * US), (3 * MS, 20 * US, 40 * US)]
# SGLang's front end takes requests in apart from its output stream (``frontend.py``
# ``with_process_split``): its per-request cost is the tokenizer stage in front of the engine
# alone, so each value is its own engine simulation. Bounds: 0-9 ms a request (SGLang's
# ``128/4`` runs of 1,000 requests reach 128-156 requests/s on one H100 and on 8 H200 alike:
# at most ~8 ms of serial work a request), 0-75 us an output token as above.
SGLANG_REQUESTS = [0.0, 3 * MS, 6 * MS, 9 * MS]
SGLANG_TOKENS = [0.0, 25 * US, 50 * US, 75 * US]
# ``--intake-streams``: the process's time per streamed token while it takes requests in, a
# simulation axis (``engine/stream_intake.py``; sgl-project/sglang#6553). Bound: the fastest-
# streaming run (4,533 tokens/s over 44 s beside 1,000 ~6 ms intakes) leaves <= ~190 us a token.
INTAKE_STREAMS = [100 * US, 150 * US]
# Kernel classes that share one factor. SGLang's fp8 class was one configuration
# (Qwen3-14B-FP8; three with main's GLM-4.6-FP8 runs), so the fold that held it out could not
# identify its factor (it fell back to 1: 40.8 % cross-validated on main 9780331 where the
# in-sample fit was 28.7 %); the FP8, MXFP4 and MLA (FP8 MoE) checkpoints all run kernels other
# than TensorRT-LLM's (block-scaled FP8, dequantising MXFP4 MoE), so one factor for them.
# vLLM's classes are not tied: its FP8 runs on A100 are Marlin W8A16 (``marlin``) and DeepSeek's
# block-scaled FP8 GEMMs on Hopper are charged against the BF16 peak (``perf/vllm_fp8.py``), so
# each class's factor is relative to the rate its kernels can reach, and a fold without
# DeepSeek takes the other classes' geometric mean as its prior (docs/validation.md ``vllm4``;
# ``vllmlat`` tied ``fp8`` and ``mla`` at 0.3, the grid's floor, before). SGLang's ``mxfp4``
# (gpt-oss: OpenAI's ``triton_kernels`` ``matmul_ogs`` for the MXFP4 experts, SGLang's
# ``Mxfp4MoEMethod``, not an FP8 GEMM) has a factor of its own since ``sglang6``: tied, its two
# configurations' misses held the FP8/MLA factor at the floor (docs/validation.md ``sglang6``).
TIED = {"sglang": ("fp8", "mla")}
FRONTEND_DATA = Path("src/inferplan/engine/data/frontend.yaml")
HOST_DATA = Path("src/inferplan/perf/data/engine_overheads.yaml")
KERNEL_DATA = Path("src/inferplan/perf/data/engine_kernels.yaml")
Host = tuple[float, ...] | None  # (step, per sequence[, per layer]) seconds
Values = dict[tuple[str, str], float | None]
# (host, factor, front end) -> predicted values of every row of one kernel class.
Table = dict[tuple[Host, float, FrontEnd], Values]


@dataclass(frozen=True)
class Fit:
    host: Host
    fe: FrontEnd
    factors: dict[str, float]


def served_rows(name: str) -> list[PublishedRow]:
    """Every simulatable row of the class's served runs that have latency rows."""
    rows = [r for r in bundled_published() if skip_reason(r) is None and burst_reason(r) is None]
    rows = [r for r in rows if r.settings.get("bench", "").startswith("vllm bench serve")]
    rows = [r for r in rows if frontend_class(ENGINES[r.engine], r.engine_version) == name]
    runs = {r.run_key for r in rows if r.family == "latency"}
    return [r for r in rows if r.run_key in runs]


def run_factors(name: str, kernel: str) -> list[float]:
    """The kernel factors tried for a run: none for TensorRT-LLM (its kernels are the
    reference) and for vLLM's and SGLang's BF16 runs (the family constants describe BF16
    GEMMs, which both run in cuBLAS; SGLang's fitted to 0.3 where it was free, a stand-in for
    what the model misses on those runs, docs/validation.md ``sglfit``)."""
    if name == "trtllm-serve" or (name in ("vllm-v1", "sglang") and kernel == "bf16"):
        return [1.0]
    return FACTORS


def run_class(run: list[PublishedRow]) -> str:
    """The run's kernel class; vLLM's and SGLang's BF16 MoE runs are ``experts``
    (``perf/vllm_moe.py``, ``perf/sglang_moe.py``)."""
    plan = memory_plan(run_setup(run[0]))
    kernel = plan_kernel_class(plan)
    engine = ENGINES[run[0].engine]
    if engine == "sglang":
        return sglang_kernel_class(plan, kernel)
    return vllm_kernel_class(plan, kernel) if engine == "vllm" else kernel


def with_host(eff: Efficiency, host: tuple[float, ...]) -> Efficiency:
    """``eff`` with a host point's per-step, per-sequence (and per-layer) costs."""
    layer = host[2] if len(host) > 2 else eff.layer_overhead_s
    return replace(eff, step_overhead_s=host[0], per_seq_overhead_s=host[1], layer_overhead_s=layer)


def loaded_host(host: Host) -> Host:
    """A host point of a table saved before vLLM's had a per-layer value: that value was 0."""
    return host if host is None or len(host) > 2 else (*host, 0.0)


def tables(
    name: str,
    rows: list[PublishedRow],
    index: int,
    count: int,
    only: str | None = None,
    points: list[int] | None = None,
    layer_floors: bool = False,
    factor_grid: list[float] | None = None,
    streams: tuple[float, ...] = (0.0,),
) -> dict[str, Table]:
    """{kernel class: table}: one simulation per run (every ``count``-th from ``index``; with
    ``only``, the runs whose ``case_id`` contains it), host point (``points``: these indices
    of the engine's grid) and factor."""
    hosts: list[Host] = [None] if name == "trtllm-serve" else list(HOSTS)
    if name == "vllm-v1":
        hosts = [*VLLM_HOSTS, *(VLLM_LAYER_HOSTS if layer_floors else [])]
    if points is not None:  # a subset of the grid, to extend a saved table
        hosts = [hosts[i] for i in points]
    out: dict[str, Table] = {}
    stages: list[tuple[float, float] | None] = [None]
    if name == "sglang":
        stages = list(itertools.product(SGLANG_REQUESTS, streams))
    runs = [r for r in group_runs(rows).values() if only is None or only in r[0].case_id]
    for run in runs[index::count]:
        kernel = run_class(run)
        table = out.setdefault(kernel, {})
        family = row_efficiency(run[0], efficiency_for(load_gpu(run[0].gpu)))
        factors = [f for f in run_factors(name, kernel) if f in (factor_grid or [f])]
        grid = itertools.product(hosts, factors or run_factors(name, kernel), stages)
        for host, factor, stage in grid:
            eff = family if host is None else with_host(family, host)
            engine_fe = None if stage is None else sglang_frontend(stage[0], 0.0, stage[1])
            eff = scale_kernels(eff, factor, kernel, name)
            # trtllm-serve: validate's runtime (plan/trtllm_serve.py), not the family's constants
            run_eff = None if name == "trtllm-serve" else eff
            try:
                result = simulate_run(run, run_eff, False, engine_fe)
            except InferplanError:  # counted as missing at this point
                result = None
            for fe in frontends(stage):
                if result is None:
                    cell = table.setdefault((host, factor, fe), {})
                    cell.update({metric_key(row): None for row in run})
                    continue
                cell = table.setdefault((host, factor, fe), {})
                try:
                    summary = served_summary(result, fe, empty_chunks(run[0]), merged_gaps(run[0]))
                    values = metric_values(run, summary)
                except InferplanError:  # nothing completed: missing, as validate reports it
                    values = {row.metric: None for row in run}
                for row in run:
                    cell[metric_key(row)] = values[row.metric]
        print(f"  {run[0].case_id} {run_class(run)}: done", file=sys.stderr, flush=True)
    return out


def sglang_frontend(request_s: float, token_s: float = 0.0, stream_s: float = 0.0) -> FrontEnd:
    return FrontEnd(request_s, 0.0, token_s, requests_apart=True, intake_stream_s=stream_s)


def frontends(stage: tuple[float, float] | None) -> list[FrontEnd]:
    """The front ends tried behind one simulation: ``FRONTENDS``, or for SGLang's tokenizer
    stage of ``stage`` (seconds a request, seconds of its process a streamed token), its
    per-token costs."""
    if stage is None:
        return FRONTENDS
    return [sglang_frontend(stage[0], t, stage[1]) for t in SGLANG_TOKENS]


def fit(rows: list[PublishedRow], by_class: dict[str, Table]) -> Fit:
    """The shared (host, front end) and per-class factor of least total loss on ``rows``. A
    class none of ``rows`` has (a fold that holds out its only configurations) takes the
    grid factor nearest what the engine would run it at without a fitted factor
    (``perf/engine_kernels.py`` ``engine_factor``: the other classes' geometric mean)."""
    shared = sorted({(h, fe) for t in by_class.values() for (h, _, fe) in t}, key=repr)
    best: tuple[float, Fit] | None = None
    for host, fe in shared:
        total, factors, unseen = 0.0, {}, []
        for kernel, table in sorted(by_class.items()):
            cells = {f: v for (h, f, e), v in table.items() if (h, e) == (host, fe)}
            if len(cells) > 1 and not any(covers(rows, v) for v in cells.values()):
                unseen.append(kernel)
                continue
            score, neg = min((loss(rows, v), -f) for f, v in cells.items())
            total, factors[kernel] = total + score, -neg
        fitted = {k: f for k, f in factors.items() if len(run_grid(by_class[k])) > 1}
        for kernel in unseen:
            factors[kernel] = nearest(run_grid(by_class[kernel]), engine_factor(fitted, kernel))
        if best is None or total < best[0] - 1e-12:
            best = (total, Fit(host, fe, factors))
    assert best is not None
    return best[1]


def covers(rows: list[PublishedRow], values: Values) -> bool:
    """Whether any latency row of ``rows`` is predicted in ``values``."""
    return any(r.family == "latency" and metric_key(r) in values for r in rows)


def run_grid(table: Table) -> list[float]:
    return sorted({f for (_, f, _) in table})


def nearest(grid: list[float], value: float) -> float:
    """The grid factor nearest ``value`` in log (ties: the smaller)."""
    return min(grid, key=lambda f: (abs(math.log(f / value)), f))


def predicted(by_class: dict[str, Table], point: Fit) -> Values:
    out: Values = {}
    for kernel, table in by_class.items():
        out.update(table.get((point.host, point.factors[kernel], point.fe), {}))
    return out


def loss(rows: list[PublishedRow], predicted: dict[tuple[str, str], float | None]) -> float:
    """Summed Huber loss of log errors over the latency rows ``predicted`` covers (summed, so
    that the classes' losses add up)."""
    latency = [r for r in rows if r.family == "latency" and metric_key(r) in predicted]
    return log_huber_loss(latency, predicted)


def cross_validate(
    rows: list[PublishedRow], by_class: dict[str, Table], k: int
) -> tuple[list[tuple[PublishedRow, float]], list[Fit]]:
    out: list[tuple[PublishedRow, float]] = []
    chosen = []
    for train, held in grouped_folds(rows, k):
        point = fit(train, by_class)
        chosen.append(point)
        out.extend(relative_errors(held, predicted(by_class, point)))
    return out, chosen


def report(label: str, errs: list[tuple[PublishedRow, float]]) -> str:
    lines = [f"| {label} | n | median | p90 | signed median |", "|---|---:|---:|---:|---:|"]
    groups: dict[str, list[float]] = {}
    for row, e in errs:
        name = row.family if row.family == "throughput" else row.metric.split("_")[0]
        groups.setdefault("latency" if row.family == "latency" else "throughput", []).append(e)
        if row.family == "latency":
            groups.setdefault(name, []).append(e)
    return "\n".join(lines + error_rows(groups))


def model_family(row: PublishedRow) -> str:
    name = row.model.split("/")[-1].lower()
    for prefix in ("qwen3", "glm", "deepseek", "gpt-oss", "llama"):
        if prefix in name:
            return prefix
    return name


def workload(row: PublishedRow) -> str:
    return "sharegpt" if row.dataset == "sharegpt" else f"{row.input_len}/{row.output_len}"


BREAKDOWNS = {"GPU": lambda r: r.gpu, "model family": model_family, "workload": workload}


def breakdown(label: str, errs: list[tuple[PublishedRow, float]], family: str = "latency") -> str:
    """The ``family`` rows' errors by GPU, model family and workload (``--by``)."""
    parts = []
    for title, key in BREAKDOWNS.items():
        groups: dict[str, list[float]] = {}
        for row, e in errs:
            if row.family == family:
                groups.setdefault(key(row), []).append(e)
        lines = [f"| {label}, {family} by {title} | n | median | p90 | signed median |"]
        lines.append("|---|---:|---:|---:|---:|")
        parts.append("\n".join(lines + error_rows(dict(sorted(groups.items())))))
    return "\n\n".join(parts)


def describe(point: Fit) -> str:
    fe = point.fe
    text = f"per_request {fe.per_request_s / MS:g} ms, per_token {fe.per_token_s / US:g} us"
    if fe.intake_stream_s:
        text += f", intake_stream {fe.intake_stream_s / US:g} us"
    if point.host is not None:
        text += f"; step {point.host[0] / MS:g} ms, per_seq {point.host[1] / US:g} us"
        if len(point.host) > 2:
            text += f", per_layer {point.host[2] / US:g} us"
    return text + f"; factors {point.factors}"


def tie_classes(by_class: dict[str, Table], tied: tuple[str, ...]) -> dict[str, Table]:
    """``by_class`` with the ``tied`` classes' tables merged into one class (named by theirs,
    joined with ``+``), so that they are fitted with one factor on their rows together."""
    members = sorted(k for k in by_class if k in tied)
    if len(members) < 2:
        return by_class
    merged: Table = {}
    for kernel in members:
        for point, values in by_class[kernel].items():
            merged.setdefault(point, {}).update(values)
    out = {k: t for k, t in by_class.items() if k not in tied}
    out["+".join(members)] = merged
    return out


def untie(point: Fit) -> Fit:
    """``point`` with a tied class's factor given to each of its members."""
    factors = {k: f for name, f in point.factors.items() for k in name.split("+")}
    return replace(point, factors=factors)


def write(fitted: dict[str, Fit]) -> None:
    fe_data = yaml.safe_load(FRONTEND_DATA.read_text()) or {}
    host_data = yaml.safe_load(HOST_DATA.read_text()) or {}
    kernel_data = yaml.safe_load(KERNEL_DATA.read_text()) or {}
    for name, point in fitted.items():
        fe_data[name] = {
            "per_request_s": float(f"{point.fe.per_request_s:.4g}"),
            "per_token_s": float(f"{point.fe.per_token_s:.4g}"),
        }
        if point.fe.intake_stream_s:
            fe_data[name]["intake_stream_s"] = float(f"{point.fe.intake_stream_s:.4g}")
        # HOSTS[0] stands for fit_engine_overheads.py's fit, at these bounds: kept as it is.
        if point.host is not None and (name == "vllm-v1" or point.host != HOSTS[0]):
            host_data[name] = {
                "step_overhead_s": float(f"{point.host[0]:.4g}"),
                "per_seq_overhead_s": float(f"{point.host[1]:.4g}"),
            }
            if len(point.host) > 2 and point.host[2] > 0:
                host_data[name]["layer_overhead_s"] = float(f"{point.host[2]:.4g}")
        factors = {k: v for k, v in point.factors.items() if v != 1.0}
        if factors:
            kernel_data[name] = factors
        else:
            kernel_data.pop(name, None)
    for path, data in (
        (FRONTEND_DATA, fe_data),
        (HOST_DATA, host_data),
        (KERNEL_DATA, kernel_data),
    ):
        header = [line for line in path.read_text().splitlines() if line.startswith("#")]
        path.write_text("\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=True))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", action="append", choices=("vllm-v1", "sglang", "trtllm-serve"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--dry-run", action="store_true", help="write nothing")
    parser.add_argument("--save", help="pickle the simulated tables to this file")
    parser.add_argument(
        "--load", action="append", help="read the tables from --save's files (no simulation)"
    )
    parser.add_argument("--shard", default="0/1", help="I/N: simulate every N-th run from I")
    parser.add_argument(
        "--only",
        help="simulate only the runs whose case_id contains this (to refresh one "
        "configuration of --save's tables: --load the old file, then this one)",
    )
    parser.add_argument(
        "--points",
        help="comma-separated indices into the engine's host grid: simulate only these (to "
        "extend --save's tables with new points: --load the old file, then this one)",
    )
    parser.add_argument(
        "--layer-floors",
        action="store_true",
        help="vLLM v1: add the per-layer floors (VLLM_LAYER_HOSTS) to the host grid",
    )
    parser.add_argument(
        "--by", action="store_true", help="latency errors by GPU, model family and workload too"
    )
    parser.add_argument(
        "--factors",
        help="comma-separated kernel factors: simulate only these (where a run has any)",
    )
    parser.add_argument(
        "--intake-streams",
        action="store_true",
        help="SGLang: add the intake's per-streamed-token cost (INTAKE_STREAMS) to the grid",
    )
    args = parser.parse_args(argv)
    fitted: dict[str, Fit] = {}
    for name in args.engine or ["vllm-v1", "sglang", "trtllm-serve"]:
        rows = served_rows(name)
        print(f"## {name}: {len(rows)} rows of {len({r.run_key for r in rows})} runs", flush=True)
        factor_grid = [float(f) for f in args.factors.split(",")] if args.factors else None
        if args.load:
            by_class: dict[str, Table] = {}
            for path in args.load:
                for kernel, table in pickle.loads(Path(path).read_bytes())[name].items():
                    for (host, factor, fe), values in table.items():
                        key = (loaded_host(host), factor, fe)
                        by_class.setdefault(kernel, {}).setdefault(key, {}).update(values)
        else:
            index, count = (int(x) for x in args.shard.split("/"))
            points = [int(i) for i in args.points.split(",")] if args.points else None
            streams = (0.0, *(INTAKE_STREAMS if args.intake_streams else []))
            by_class = tables(
                name, rows, index, count, args.only, points, args.layer_floors, factor_grid, streams
            )
        if args.save:
            Path(args.save).write_bytes(pickle.dumps({name: by_class}))
        start = Fit(
            None if name == "trtllm-serve" else HOSTS[0], FrontEnd(), {k: 1.0 for k in by_class}
        )
        before = relative_errors(rows, predicted(by_class, start))
        if before:  # vLLM v1's grid no longer holds the constants it started from
            print(report("before (main's constants)", before) + "\n")
        by_class = tie_classes(by_class, TIED.get(name, ()))
        fitted[name] = fit(rows, by_class)
        print(f"fitted: {describe(fitted[name])}\n")
        in_sample = relative_errors(rows, predicted(by_class, fitted[name]))
        print(report("in-sample", in_sample) + "\n")
        cv, chosen = cross_validate(rows, by_class, args.folds)
        for i, point in enumerate(chosen):
            print(f"  fold {i + 1}: {describe(point)}")
        print("\n" + report("cross-validated", cv) + "\n", flush=True)
        if args.by:
            for family in ("latency", "throughput"):
                print(breakdown("cross-validated", cv, family) + "\n")
                print(breakdown("in-sample", in_sample, family) + "\n", flush=True)
    if not args.dry_run:
        write({name: untie(point) for name, point in fitted.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
