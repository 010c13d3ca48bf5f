"""Fit Triton's front end for TensorRT-LLM 0.14 (per request, per streamed token); cross-validate.

Rows: every simulatable row (latency and throughput) of TensorRT-LLM 0.14's Triton serving
table (``triton-trtllm``: the ``tensorrtllm_backend`` ensemble, whose ``preprocessing`` Python
model tokenises each request before the ``tensorrt_llm`` model sees it, and whose
``postprocessing`` Python model detokenises every streamed response, one token each, before
Triton sends it). Constants (``engine/frontend.py``), each on a grid inside its bound:

- ``per_request_s`` 0-10 ms (``fit_tokenizer_stage.py``'s bound: the serial work per request of
  an HTTP front end);
- ``per_token_s`` 0-100 us: each streamed token crosses into the Python backend's stub process
  and back (shared-memory IPC) and is detokenised there, serially in one model instance.

Every run is simulated once per ``per_request_s`` (it delays arrivals:
``engine/tokenizer_stage.py``); ``per_token_s`` is a pass over the records, so the grid is
searched exhaustively. Loss: mean Huber loss of log errors over the rows. Cross-validation:
grouped k-fold by configuration (``case_id``, ``plan/folds.py``). Run from the repository
root (``--write`` stores the in-sample fit in ``engine/data/frontend.yaml``):

    .venv/bin/python scripts/fit_triton_frontend.py
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from inferplan.errors import InferplanError
from inferplan.plan.folds import (
    error_rows,
    grouped_folds,
    log_huber_loss,
    metric_key,
    relative_errors,
)
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    group_runs,
    metric_values,
    row_frontend,
    served_summary,
    simulate_run,
)

MS, US = 1e-3, 1e-6
REQUEST_GRID = [0.0, 2 * MS, 4 * MS, 6 * MS, 8 * MS, 10 * MS]
TOKEN_GRID = [0.0, 10 * US, 25 * US, 50 * US, 75 * US, 100 * US]
DATA = Path("src/inferplan/engine/data/frontend.yaml")
Point = tuple[float, float]
Values = dict[tuple[str, str], float | None]


def triton_rows() -> list[PublishedRow]:
    rows = [r for r in bundled_published() if skip_reason(r) is None]
    return [r for r in rows if r.settings.get("frontend", "").startswith("Triton")]


def simulate_grid(rows: list[PublishedRow]) -> dict[Point, Values]:
    """{(per-request, per-token cost): predicted value of every row}."""
    out: dict[Point, Values] = {(r, t): {} for r in REQUEST_GRID for t in TOKEN_GRID}
    for run in group_runs(rows).values():
        for request_s in REQUEST_GRID:
            fe = replace(row_frontend(run[0]), per_request_s=request_s)
            try:
                result = simulate_run(run, None, False, fe)
            except InferplanError:
                result = None
            for token_s in TOKEN_GRID:
                values: dict[str, float | None] = {row.metric: None for row in run}
                if result is not None:
                    served = replace(fe, per_token_s=token_s)
                    values = metric_values(run, served_summary(result, served))
                out[(request_s, token_s)].update({metric_key(r): values[r.metric] for r in run})
        print(f"  {run[0].case_id} {run[0].request_rate:g}: done", file=sys.stderr, flush=True)
    return out


def loss(rows: list[PublishedRow], values: Values) -> float:
    return log_huber_loss(rows, values) / max(len(rows), 1)


def best(rows: list[PublishedRow], table: dict[Point, Values]) -> Point:
    return min(table, key=lambda p: (loss(rows, table[p]), p))


def report(label: str, errs: list[tuple[PublishedRow, float]]) -> str:
    lines = [f"| {label} | n | median | p90 | signed median |", "|---|---:|---:|---:|---:|"]
    groups: dict[str, list[float]] = {"latency": [], "throughput": []}
    for row, e in errs:
        groups[row.family].append(e)
        if row.family == "latency":
            groups.setdefault(row.metric.split("_")[0], []).append(e)
    return "\n".join(lines + error_rows(groups))


def write(point: Point) -> None:
    data = yaml.safe_load(DATA.read_text()) or {}
    data["triton-trtllm"] = {
        "per_request_s": float(f"{point[0]:.4g}"),
        "per_token_s": float(f"{point[1]:.4g}"),
    }
    header = [line for line in DATA.read_text().splitlines() if line.startswith("#")]
    DATA.write_text("\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=True))


def describe(point: Point) -> str:
    return f"per_request {point[0] / MS:g} ms, per_token {point[1] / US:g} us"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="store the in-sample fit")
    args = parser.parse_args(argv)
    rows = triton_rows()
    print(f"## triton-trtllm: {len(rows)} rows", flush=True)
    table = simulate_grid(rows)
    committed = row_frontend(rows[0])
    now = min(
        table, key=lambda p: abs(p[0] - committed.per_request_s) + abs(p[1] - committed.per_token_s)
    )
    print(report(f"committed ({describe(now)})", relative_errors(rows, table[now])) + "\n")
    fitted = best(rows, table)
    print(f"fitted: {describe(fitted)}\n")
    print(report("in-sample", relative_errors(rows, table[fitted])) + "\n")
    held_out: list[tuple[PublishedRow, float]] = []
    for train, held in grouped_folds(rows, args.folds):
        point = best(train, table)
        print(f"  fold: {describe(point)}", file=sys.stderr)
        held_out.extend(relative_errors(held, table[point]))
    print(report("cross-validated", held_out) + "\n", flush=True)
    if args.write:
        write(fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
