"""SGLang's latency rows by GPU and workload, and the same runs beside other engines'.

Reads ``inferplan validate --json`` output (rows joined to the bundled ``published.csv`` by
line) and prints two tables, used by docs/validation.md's ``sgh100`` section (session 17):

- SGLang's latency rows by GPU x workload (ShareGPT, the ``128/4`` bursts, the other ``random``
  shapes): n, median |error| and signed median (predicted / measured - 1);
- (``sgl20``) SGLang's latency rows by workload x metric: signed median and rows above 15 %;
- every GPUStack ShareGPT configuration (model, GPU, GPU count) that SGLang and another engine
  both ran: measured TTFT median, TPOT median, ITL mean and output throughput with their
  signed errors, one line per engine.

    .venv/bin/inferplan validate --json > F.json
    .venv/bin/python scripts/sglang_parts.py F.json

Under a second of CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from importlib import resources
from typing import Any

PAIR_METRICS = ("ttft_median", "tpot_median", "itl_mean", "output_throughput")


def workload(row: dict[str, str]) -> str:
    if row["dataset"] == "sharegpt":
        return "sharegpt"
    return "128/4" if row["output_len"] == "4" else "random"


def joined(path: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """The predicted rows of ``path`` with their ``published.csv`` rows (the file's line)."""
    table = resources.files("inferplan.plan.data").joinpath("published.csv")
    with table.open(encoding="utf-8") as f:
        published = list(csv.DictReader(f))
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    return [(r, published[r["line"] - 2]) for r in rows if r["error"] is not None]


def by_part(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> None:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r, src in rows:
        if r["engine"] != "sglang" or r["family"] != "latency":
            continue
        gpu = src["gpu"].split("_")[0]
        for key in ((gpu, workload(src)), (gpu, "all"), ("all", workload(src))):
            groups[key].append(r["error"])
    print("SGLang latency rows: GPU, workload, n, median |error|, signed median")
    for (gpu, kind), errors in sorted(groups.items()):
        size = statistics.median(abs(e) for e in errors) * 100
        signed = statistics.median(errors) * 100
        print(f"{gpu:5s} {kind:9s} {len(errors):4d} {size:6.1f} % {signed:+6.1f} %")


def pairs(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> None:
    runs: dict[tuple[str, str, str], dict[str, dict[str, tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for r, src in rows:
        if (
            src["dataset"] != "sharegpt"
            or src["max_concurrency"]
            or r["metric"] not in PAIR_METRICS
        ):
            continue
        key = (src["model"].split("/")[-1], src["gpu"].split("_")[0], src["num_gpus"])
        runs[key][r["engine"]][r["metric"]] = (r["measured"], r["error"])
    print("\nShareGPT configurations SGLang shares with another engine: measured (signed error)")
    print("model, GPU x n, engine | " + " | ".join(PAIR_METRICS))
    for key, engines in sorted(runs.items()):
        if "sglang" not in engines or len(engines) < 2:
            continue
        for engine, metrics in sorted(engines.items()):
            cells = [
                f"{metrics[m][0]:9.1f} ({metrics[m][1] * 100:+4.0f} %)" if m in metrics else "-"
                for m in PAIR_METRICS
            ]
            print(f"{key[0]:28s} {key[1]} x{key[2]} {engine:12s} | " + " | ".join(cells))


METRICS = tuple(
    f"{kind}_{stat}" for kind in ("ttft", "tpot", "itl") for stat in ("mean", "median", "p99")
)


def by_metric(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> None:
    """SGLang's latency rows by workload x metric: signed median % and rows above 15 % of the
    group's rows (docs/validation.md ``sgl20``)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r, src in rows:
        if r["engine"] == "sglang" and r["family"] == "latency":
            for kind in (workload(src), "all"):
                groups[(kind, r["metric"])].append(r["error"])
    print("\nSGLang latency rows, workload x metric: signed median % (rows > 15 % / rows)")
    print("workload  | " + " | ".join(METRICS))
    for kind in ("sharegpt", "128/4", "random", "all"):
        cells = []
        for metric in METRICS:
            errors = groups.get((kind, metric), [])
            if not errors:
                cells.append("-")
                continue
            above = sum(abs(e) > 0.15 for e in errors)
            cells.append(f"{statistics.median(errors) * 100:+4.0f} ({above}/{len(errors)})")
        print(f"{kind:9s} | " + " | ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("validate_json", help="inferplan validate --json output")
    args = parser.parse_args()
    rows = joined(args.validate_json)
    by_part(rows)
    by_metric(rows)
    pairs(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
