"""Fit vLLM 0.11's per-request chat-template parse (``engine/chat_template.py``) to GPUStack's
vLLM rows: a grid of the cost, each run simulated once per grid point, 5 folds by ``case_id``.

For each grid point every vLLM ``vllm bench serve`` row is predicted (the other constants as
committed); each fold picks the grid point with the least log-Huber loss on its training
configurations and predicts its held-out ones. Prints the cross-validated and in-sample median
|error| by metric family and workload, and each grid point's in-sample errors. From the
repository root (about 10 minutes on two busy cores):

    .venv/bin/python scripts/fit_chat_template.py
    .venv/bin/python scripts/fit_chat_template.py --grid-ms 0,8 --quick
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

import inferplan.engine.chat_template as chat_template
from inferplan.plan.folds import grouped_folds, log_huber_loss, metric_key
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import validate_rows

Predictions = dict[tuple[str, str], float | None]


def vllm_rows() -> list[PublishedRow]:
    return [
        r
        for r in bundled_published()
        if r.engine == "vllm"
        and r.settings.get("bench", "").startswith("vllm bench serve")
        and skip_reason(r) is None
    ]


def predict(rows: list[PublishedRow], parse_s: float, quick: bool) -> Predictions:
    versions, _ = chat_template.bundled_parse_costs()["vllm"]
    costs = {"vllm": (versions, parse_s)}
    saved = chat_template.bundled_parse_costs
    chat_template.bundled_parse_costs = lambda: costs  # type: ignore[assignment]
    try:
        results = validate_rows(rows, quick=quick)
    finally:
        chat_template.bundled_parse_costs = saved
    return {metric_key(r.row): r.predicted for r in results}


def workload(row: PublishedRow) -> str:
    shape = "sharegpt" if row.dataset == "sharegpt" else f"{row.input_len}/{row.output_len}"
    return shape + (" @concurrency" if row.max_concurrency else "")


def family(row: PublishedRow) -> str:
    return row.metric.split("_")[0] if row.family == "latency" else "throughput"


def table(pairs: list[tuple[PublishedRow, float]], key: Callable[[PublishedRow], str]) -> None:
    groups: dict[str, list[float]] = {}
    for row, error in pairs:
        groups.setdefault(key(row), []).append(error)
    for name in sorted(groups):
        e = np.array(groups[name])
        print(
            f"| {name} | {e.size} | {np.median(abs(e)):.1%} | {np.percentile(abs(e), 90):.1%} "
            f"| {np.median(e):+.1%} |"
        )


def errors(rows: list[PublishedRow], predicted: Predictions) -> list[tuple[PublishedRow, float]]:
    out = []
    for r in rows:
        value = predicted.get(metric_key(r))
        if value is not None:
            out.append((r, (value - r.value) / r.value))
    return out


def report(title: str, pairs: list[tuple[PublishedRow, float]]) -> None:
    print(f"\n{title}\n| group | n | median abs | p90 abs | signed median |")
    print("|---|---:|---:|---:|---:|")
    table(pairs, lambda r: f"all {r.family}")
    table(pairs, family)
    table(pairs, lambda r: f"{workload(r)} {r.family}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-ms", default="0,4,8,12,16")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="runs cut to 200 requests")
    args = parser.parse_args()
    grid = [float(x) * 1e-3 for x in args.grid_ms.split(",")]
    rows = vllm_rows()
    by_grid = {}
    for parse_s in grid:
        by_grid[parse_s] = predict(rows, parse_s, args.quick)
        print(f"grid {parse_s * 1e3:g} ms: loss {log_huber_loss(rows, by_grid[parse_s]):.2f}")
        report(f"in-sample at {parse_s * 1e3:g} ms", errors(rows, by_grid[parse_s]))
    held_out: list[tuple[PublishedRow, float]] = []
    for train, test in grouped_folds(rows, args.folds):
        best = min(grid, key=lambda s: log_huber_loss(train, by_grid[s]))
        print(f"fold of {len({r.case_id for r in test})} configurations: {best * 1e3:g} ms")
        held_out += errors(test, by_grid[best])
    report(f"cross-validated ({args.folds} folds by case_id)", held_out)
    best = min(grid, key=lambda s: log_huber_loss(rows, by_grid[s]))
    print(f"\nin-sample optimum: {best * 1e3:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
