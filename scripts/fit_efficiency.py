"""Fit the Hopper efficiency constants and vLLM 0.6.0's CPU costs to the bundled published cases.

Two stages, each minimising the mean Huber loss of log errors (``plan/calibration.py``) inside
physical bounds:

1. By coordinate descent, the Hopper family constants (GEMM, streaming, attention and
   collective efficiencies, the per-step and per-sequence overheads of a current engine) on
   every TensorRT-LLM measurement:
   ``trtllm-bench`` offline throughput of Llama-3.1-8B on one H100 and Llama-3.3-70B on two.
2. With those held, vLLM 0.6.0's per-step and per-sequence CPU costs (its V0 engine) on every
   measurement of the two vLLM 0.6.0 cases (``plan/data/engine_cpu_costs.yaml``), by a
   Nelder-Mead simplex: the two trade off along a valley that coordinate steps crawl.

Left out of both, and reported after the fit: the MLPerf server run. Its throughput is the
offered load whenever the simulated capacity exceeds it, so it says nothing about constants above
that point; its latencies are set by how close to saturation the real system ran
(docs/validation.md), which a fit cannot learn from one point. Run from the repository root:

    .venv/bin/python scripts/fit_efficiency.py            # fit and write both files
    .venv/bin/python scripts/fit_efficiency.py --dry-run  # fit and print only
    .venv/bin/python scripts/fit_efficiency.py --cpu-costs-only  # stage 2 alone (minutes)

The Hopper constants now come from ``scripts/fit_published.py`` (every GPU family, on the
published table, cross-validated by configuration); stage 1 runs only with
``--hopper-from-cases``, and by default this script refits stage 2 on the committed Hopper file.

Stage 1 simulates 11 runs per evaluation (about 3 s), so the fit takes about ten minutes.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path

from inferplan.perf.efficiency import Efficiency, bundled_efficiency
from inferplan.plan.calibration import BOUNDS, FitStep, fit_efficiency, fit_simplex, loss
from inferplan.plan.validation import (
    Result,
    Run,
    bundled_cases,
    deployment_efficiency,
    predict,
    runs_for,
)

FAMILY_FILE = Path("src/inferplan/perf/data/efficiency/hopper.yaml")
CPU_COSTS_FILE = Path("src/inferplan/plan/data/engine_cpu_costs.yaml")
RELEASE = "vllm-0.6.0"

FAMILY_BOUNDS = {
    **BOUNDS,
    "collective_bandwidth": (0.2, 1.0),
    "collective_latency_s": (0.0, 5e-5),
}
CPU_BOUNDS = {"step_overhead_s": (0.0, 0.01), "per_seq_overhead_s": (0.0, 5e-5)}

COMMENTS = {
    "gemm_compute": "fraction of dense tensor-core peak for large GEMMs",
    "gemm_half_tokens": "GEMM rows (tokens) at which achieved compute is half of that",
    "memory_bandwidth": "fraction of HBM bandwidth when streaming weights",
    "attention_compute": "fraction of peak in flash-attention prefill",
    "attention_memory": "fraction of HBM bandwidth in paged-attention KV reads",
    "collective_bandwidth": "fraction of scale-up link bandwidth in all-reduce / all-to-all",
    "collective_latency_s": "fixed cost of one collective call",
    "step_overhead_s": "CPU scheduling, input preparation and sampling, per step",
    "per_seq_overhead_s": "the same, per scheduled sequence",
    "eager_layer_overhead_s": "kernel launches per layer when a step runs outside CUDA graphs",
    "elementwise_passes": "hidden-state reads+writes per layer (norms, residuals, RoPE, act)",
}


def _value(value: float) -> str:
    return f"{value:.4g}"


def _as_written(
    fitted: Efficiency, runs: list[Run], names: Iterable[str]
) -> tuple[Efficiency, list[Result]]:
    """The fitted constants as the file will hold them (4 significant digits), and the residuals
    they give: what ``inferplan validate`` reproduces from the committed file."""
    written = replace(fitted, **{name: float(_value(getattr(fitted, name))) for name in names})
    return written, [Result(run, predict(run, written)) for run in runs]


def _residuals(before: list[Result], after: list[Result]) -> list[str]:
    lines = []
    for b, a in zip(before, after, strict=True):
        where = f"{b.run.case_id} | {b.run.label} | {b.run.metric}"
        lines.append(f"#   {where}: {b.error:+.1%} -> {a.error:+.1%}")
    return lines


def _family_file(eff: Efficiency, before: list[Result], after: list[Result]) -> str:
    lines = [
        "# Efficiency constants for NVIDIA Hopper (H100, H200), fitted.",
        "# Written by scripts/fit_efficiency.py (stage 1): one set of constants for every",
        "# TensorRT-LLM measurement of the bundled published cases at once (docs/validation.md),",
        "# minimising the mean Huber loss of log errors. Fitted:",
        f"# {', '.join(FAMILY_BOUNDS)}; the others keep their starting values (docs/modeling.md).",
        f"# Loss: {loss(before):.4f} with the starting constants, {loss(after):.4f} fitted.",
        "",
    ]
    for f in fields(eff):
        lines.append(f"{f.name}: {_value(getattr(eff, f.name))}  # {COMMENTS[f.name]}")
    lines += ["", "# Residuals, (predicted - measured) / measured: starting -> fitted"]
    return "\n".join(lines + _residuals(before, after)) + "\n"


def _cpu_costs_file(costs: dict[str, float], before: list[Result], after: list[Result]) -> str:
    text = CPU_COSTS_FILE.read_text()
    head = text[: text.index(f"\n{RELEASE}:") + 1]
    lines = [f"{RELEASE}:"] + [f"  {name}: {_value(value)}" for name, value in costs.items()]
    lines += [
        "",
        f"# Fitted by scripts/fit_efficiency.py (stage 2), the Hopper constants held. Loss: "
        f"{loss(before):.4f} -> {loss(after):.4f}.",
        "# Residuals, (predicted - measured) / measured: starting -> fitted",
    ]
    return head + "\n".join(lines + _residuals(before, after)) + "\n"


def _report(step: FitStep) -> None:
    print(f"  {step.constant:22s} -> {step.value:.4g}   loss {step.loss:.4f}", flush=True)


def _clamped(eff: Efficiency, bounds: dict[str, tuple[float, float]]) -> Efficiency:
    """``eff`` with every bounded constant moved inside its bounds (the fit only improves)."""
    return replace(
        eff,
        **{name: min(max(getattr(eff, name), low), high) for name, (low, high) in bounds.items()},
    )


def _fit_family(runs: list[Run], sweeps: int) -> tuple[Efficiency, list[Result], list[Result]]:
    start = _clamped(bundled_efficiency("hopper"), FAMILY_BOUNDS)
    before = [Result(run, predict(run, start)) for run in runs]
    print(f"stage 1: loss {loss(before):.4f} over {len(runs)} measurements", flush=True)
    fitted, _ = fit_efficiency(runs, start, sweeps=sweeps, bounds=FAMILY_BOUNDS, on_step=_report)
    written, after = _as_written(fitted, runs, FAMILY_BOUNDS)
    return written, before, after


def _fit_cpu_costs(
    runs: list[Run], family: Efficiency, iterations: int
) -> tuple[dict[str, float], list[Result], list[Result]]:
    """The release's costs as the family's overheads of runs that name no release."""
    plain = [replace(run, deployment=replace(run.deployment, cpu_costs=None)) for run in runs]
    start = deployment_efficiency(runs[0].deployment, family)
    before = [Result(run, predict(run, start)) for run in plain]
    print(f"stage 2: loss {loss(before):.4f} over {len(runs)} measurements", flush=True)
    # The two costs trade off along a valley (per step vs per sequence): a simplex follows it.
    fitted, _ = fit_simplex(plain, start, CPU_BOUNDS, iterations=iterations)
    fitted, after = _as_written(fitted, plain, CPU_BOUNDS)
    print(f"  {', '.join(f'{n} -> {getattr(fitted, n):.4g}' for n in CPU_BOUNDS)}", flush=True)
    print(f"  loss {loss(after):.4f}", flush=True)
    return {name: getattr(fitted, name) for name in CPU_BOUNDS}, before, after


def _emit(path: Path, text: str, dry_run: bool) -> None:
    if dry_run:
        sys.stdout.write(f"--- {path}\n{text}")
    else:
        path.write_text(text)
        print(f"wrote {path}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print, do not write the files")
    parser.add_argument("--sweeps", type=int, default=2)
    parser.add_argument(
        "--cpu-costs-only",
        action="store_true",
        help="stage 2 only (the default now; kept for old command lines)",
    )
    parser.add_argument(
        "--hopper-from-cases",
        action="store_true",
        help="also stage 1: refit hopper.yaml on the 11 TensorRT-LLM case rows (superseded by "
        "scripts/fit_published.py, which fits every family on the published table)",
    )
    args = parser.parse_args()
    runs = [run for case in bundled_cases() for run in runs_for(case)]
    family_runs = [run for run in runs if run.case_id.startswith("trtllm-")]
    release_runs = [run for run in runs if run.deployment.cpu_costs == RELEASE]
    if args.cpu_costs_only or not args.hopper_from_cases:
        family = bundled_efficiency("hopper")
    else:
        family, family_before, family_after = _fit_family(family_runs, args.sweeps)
        _emit(FAMILY_FILE, _family_file(family, family_before, family_after), args.dry_run)
    costs, cpu_before, cpu_after = _fit_cpu_costs(release_runs, family, iterations=120)
    _emit(CPU_COSTS_FILE, _cpu_costs_file(costs, cpu_before, cpu_after), args.dry_run)
    return 0 if math.isfinite(loss(cpu_after)) else 1


if __name__ == "__main__":
    sys.exit(main())
