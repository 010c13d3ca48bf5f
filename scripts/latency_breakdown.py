"""Break the published latency rows' errors down: by engine, metric, statistic, GPU, workload.

The latency rows (TTFT, TPOT, ITL) are the served runs of the published table: GPUStack's raw
``vllm bench serve`` outputs (vLLM, SGLang and TensorRT-LLM servers) and TensorRT-LLM 0.14's
Triton serving table. This script predicts them with the committed constants and prints the
signed and absolute relative errors per group, so the direction of a miss (too fast, too slow)
is visible beside its size. Run from the repository root:

    .venv/bin/python scripts/latency_breakdown.py            # every latency run
    .venv/bin/python scripts/latency_breakdown.py --rows     # ... and every row
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import RowResult, errors_by, validate_rows


def latency_rows() -> list[PublishedRow]:
    """Every row of a run that has at least one simulatable latency row."""
    rows = [r for r in bundled_published() if skip_reason(r) is None]
    runs = {r.run_key for r in rows if r.family == "latency"}
    return [r for r in rows if r.run_key in runs and r.family == "latency"]


def workload_of(row: PublishedRow) -> str:
    if row.dataset == "sharegpt":
        shape = "sharegpt"
    else:
        shape = f"{row.dataset} {row.input_len}/{row.output_len}"
    load = "rate inf" if row.request_rate == float("inf") else f"rate {row.request_rate:g}"
    if row.max_concurrency:
        load += f" conc {row.max_concurrency}"
    return f"{shape}, {load}"


def source_of(row: PublishedRow) -> str:
    return "gpustack" if row.case_id.startswith("gpustack") else "trt014-triton"


GROUPS: dict[str, Callable[[PublishedRow], str]] = {
    "source": source_of,
    "engine": lambda r: r.engine,
    "metric": lambda r: r.metric.split("_")[0],
    "statistic": lambda r: r.metric.split("_")[1],
    "engine x metric": lambda r: f"{r.engine} {r.metric.split('_')[0]}",
    "gpu": lambda r: r.gpu,
    "scenario": lambda r: r.scenario,
    "workload": workload_of,
    "model": lambda r: r.model.split("/")[-1],
}


def table(results: list[RowResult], key: Callable[[PublishedRow], str], title: str) -> str:
    lines = [f"| {title} | n | median signed | median abs | p90 abs |", "|---|---:|---:|---:|---:|"]
    for name, e in errors_by(results, key).items():
        lines.append(
            f"| {name} | {e.size} | {np.median(e):+.1%} | {np.median(abs(e)):.1%} "
            f"| {np.percentile(abs(e), 90):.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every row too")
    parser.add_argument("--quick", action="store_true", help="served runs cut to 200 requests")
    args = parser.parse_args(argv)
    results = validate_rows(latency_rows(), quick=args.quick)
    for title, key in GROUPS.items():
        print(table(results, key, title) + "\n")
    if args.rows:
        for r in results:
            if r.error is not None:
                print(
                    f"{r.row.case_id} {r.row.engine} {r.row.gpu} {workload_of(r.row)} "
                    f"{r.row.metric} measured {r.row.value:.4g} predicted {r.predicted:.4g} "
                    f"error {r.error:+.1%}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
