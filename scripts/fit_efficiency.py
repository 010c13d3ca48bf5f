"""Fit the Hopper efficiency constants to the bundled published cases, all at once.

Every bundled validation case ran on H100s, so the fit writes the ``hopper`` family file
(``src/inferplan/perf/data/efficiency/hopper.yaml``), with the loss before and after and each
measurement's residual as comments. Run from the repository root:

    .venv/bin/python scripts/fit_efficiency.py            # fit and write the file
    .venv/bin/python scripts/fit_efficiency.py --dry-run  # fit and print only

It simulates every case once per evaluation (about five seconds), so a fit takes several minutes.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields
from pathlib import Path

from inferplan.perf.efficiency import Efficiency, bundled_efficiency
from inferplan.plan.calibration import BOUNDS, FitStep, fit_efficiency, loss
from inferplan.plan.validation import Result, bundled_cases, predict, runs_for

TARGET = Path("src/inferplan/perf/data/efficiency/hopper.yaml")

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


def _render(eff: Efficiency, before: list[Result], after: list[Result]) -> str:
    lines = [
        "# Efficiency constants for NVIDIA Hopper (H100, H200), fitted.",
        "# Written by scripts/fit_efficiency.py: one set of constants for every bundled",
        "# published case at once (docs/validation.md), minimising the mean Huber loss of log",
        "# errors. Fitted:",
        f"# {', '.join(BOUNDS)}; the others keep their starting values (docs/modeling.md).",
        f"# Loss: {loss(before):.4f} with the starting constants, {loss(after):.4f} fitted.",
        "",
    ]
    for f in fields(eff):
        value = getattr(eff, f.name)
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"{f.name}: {text}  # {COMMENTS[f.name]}")
    lines += ["", "# Residuals, (predicted - measured) / measured: starting -> fitted"]
    for b, a in zip(before, after, strict=True):
        where = f"{b.run.case_id} | {b.run.label} | {b.run.metric}"
        lines.append(f"#   {where}: {b.error:+.1%} -> {a.error:+.1%}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print, do not write the file")
    parser.add_argument("--sweeps", type=int, default=2)
    args = parser.parse_args()
    runs = [run for case in bundled_cases() for run in runs_for(case)]
    start = bundled_efficiency("hopper")
    before = [Result(run, predict(run, start)) for run in runs]
    print(f"starting loss {loss(before):.4f} over {len(runs)} measurements", flush=True)

    def report(step: FitStep) -> None:
        print(f"  {step.constant:22s} -> {step.value:.4g}   loss {step.loss:.4f}", flush=True)

    fitted, after = fit_efficiency(runs, start, sweeps=args.sweeps, on_step=report)
    text = _render(fitted, before, after)
    if args.dry_run:
        sys.stdout.write(text)
    else:
        TARGET.write_text(text)
        print(f"wrote {TARGET}")
    return 0 if math.isfinite(loss(after)) else 1


if __name__ == "__main__":
    sys.exit(main())
