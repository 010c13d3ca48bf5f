"""Fit a front end's per-request cost, the tokenizer stage in front of the engine; cross-validate.

The per-request cost (``engine/frontend.py`` ``per_request_s``) delays each request's arrival at
the scheduler (``engine/tokenizer_stage.py``: one API process, first come first served) and is
replayed in the front end's output pass. Fitted per front-end class to the class's latency rows
(TTFT, TPOT, ITL) by an exhaustive grid (every run simulated once per grid value; the other
constants stay as committed). Loss: summed Huber loss of log errors, as ``fit_frontend.py``.

Classes: ``sglang`` (SGLang's ``TokenizerManager``, the GPUStack ``vllm bench serve`` runs),
``trtllm-serve`` (the same runs of TensorRT-LLM's OpenAI server) and
``triton-trtllm`` (TensorRT-LLM 0.14 behind Triton's ``tensorrtllm_backend`` ensemble, whose
``preprocessing`` Python model tokenises each request before the ``tensorrt_llm`` model sees
it). Bounds: 0-10 ms per request. SGLang's `128/4` runs (1,000 requests of 128 tokens, 4 out)
reach 99-161 requests/s whatever the model and GPU (GLM-4.5-Air: 98.67 req/s on A100 and H100
alike; DeepSeek-R1 on 8 H200: 156), so the serial per-request work is at most ~10 ms.

Cross-validation: grouped k-fold by configuration (``case_id``), dealt round-robin in sorted
order. Run from the repository root (``--write`` stores the in-sample fit in
``engine/data/frontend.yaml``):

    .venv/bin/python scripts/fit_tokenizer_stage.py --class sglang --class triton-trtllm
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from inferplan.errors import InferplanError
from inferplan.plan.chat_stream import empty_chunks
from inferplan.plan.folds import error_rows, log_huber_loss, metric_key, relative_errors
from inferplan.plan.published import ENGINES, PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    burst_reason,
    group_runs,
    metric_values,
    row_frontend,
    served_summary,
    simulate_run,
)

MS = 1e-3
GRID = [0.0, 2 * MS, 4 * MS, 6 * MS, 8 * MS, 10 * MS]
FRONTEND_DATA = Path("src/inferplan/engine/data/frontend.yaml")
Values = dict[tuple[str, str], float | None]


def class_of(row: PublishedRow) -> str | None:
    if row.settings.get("frontend", "").startswith("Triton"):
        return "triton-trtllm"
    if not row.settings.get("bench", "").startswith("vllm bench serve"):
        return None
    return {"sglang": "sglang", "trtllm": "trtllm-serve"}.get(ENGINES[row.engine])


def class_rows(name: str) -> list[PublishedRow]:
    """Every simulatable latency row of the class's runs."""
    rows = [r for r in bundled_published() if skip_reason(r) is None and burst_reason(r) is None]
    return [r for r in rows if class_of(r) == name and r.family == "latency"]


def simulate_grid(rows: list[PublishedRow]) -> dict[float, Values]:
    """{per-request cost: predicted value of every row}."""
    out: dict[float, Values] = {v: {} for v in GRID}
    for run in group_runs(rows).values():
        for value in GRID:
            fe = replace(row_frontend(run[0]), per_request_s=value)
            try:
                result = simulate_run(run, None, False, fe)
                values = metric_values(run, served_summary(result, fe, empty_chunks(run[0])))
            except InferplanError:
                values = {row.metric: None for row in run}
            out[value].update({metric_key(row): values[row.metric] for row in run})
        print(f"  {run[0].case_id}: done", file=sys.stderr, flush=True)
    return out


def best(rows: list[PublishedRow], table: dict[float, Values]) -> float:
    return min(GRID, key=lambda v: (log_huber_loss(rows, table[v]), v))


def cross_validate(
    rows: list[PublishedRow], table: dict[float, Values], k: int
) -> tuple[list[tuple[PublishedRow, float]], list[float]]:
    cases = sorted({r.case_id for r in rows})
    out, chosen = [], []
    for i in range(min(k, len(cases))):
        held = set(cases[i::k])
        value = best([r for r in rows if r.case_id not in held], table)
        chosen.append(value)
        out.extend(relative_errors([r for r in rows if r.case_id in held], table[value]))
    return out, chosen


def report(label: str, errs: list[tuple[PublishedRow, float]]) -> str:
    lines = [f"| {label} | n | median | p90 | signed median |", "|---|---:|---:|---:|---:|"]
    groups: dict[str, list[float]] = {}
    for row, e in errs:
        groups.setdefault("latency", []).append(e)
        groups.setdefault(row.metric.split("_")[0], []).append(e)
    return "\n".join(lines + error_rows(groups))


def write(fitted: dict[str, float]) -> None:
    data = yaml.safe_load(FRONTEND_DATA.read_text()) or {}
    for name, value in fitted.items():
        entry = data.setdefault(name, {"per_request_s": 0.0, "per_token_s": 0.0})
        entry["per_request_s"] = float(f"{value:.4g}")
    header = [line for line in FRONTEND_DATA.read_text().splitlines() if line.startswith("#")]
    FRONTEND_DATA.write_text("\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=True))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--class", dest="classes", action="append", default=[])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="store the in-sample fit")
    args = parser.parse_args(argv)
    fitted: dict[str, float] = {}
    for name in args.classes or ["sglang", "triton-trtllm"]:
        rows = class_rows(name)
        print(f"## {name}: {len(rows)} latency rows", flush=True)
        table = simulate_grid(rows)
        for value in GRID:
            print(f"per_request {value / MS:g} ms: loss {log_huber_loss(rows, table[value]):.2f}")
        fitted[name] = best(rows, table)
        print(f"\nfitted: per_request {fitted[name] / MS:g} ms\n")
        print(report("in-sample", relative_errors(rows, table[fitted[name]])) + "\n")
        cv, chosen = cross_validate(rows, table, args.folds)
        print("folds: " + ", ".join(f"{v / MS:g} ms" for v in chosen) + "\n")
        print(report("cross-validated", cv) + "\n", flush=True)
    if args.write:
        write(fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
