"""SGLang's overlap-scheduler admission lag, measured on every SGLang run (docs/validation.md
``sgl20``).

``engine/sglang.py`` ``OVERLAP_ADMISSION_LAG`` (off): SGLang's ``event_loop_overlap`` forms batch
k + 1 while batch k runs on the GPU, so a request that reaches a busy engine joins batch k + 2.
This script predicts every SGLang run of the bundled ``published.csv`` (``predict_run``, the
committed constants) with the lag off and on and prints the latency rows' median |error|, p90
and count above 15 %, the throughput rows' median, the same by workload, and (``--rows``) every
latency row the lag moves by more than half a point, signed (predicted / measured - 1).

    .venv/bin/python scripts/sglang_overlap_lag.py [--rows]

About 10 s of CPU a pass, two passes.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from inferplan.engine import sglang
from inferplan.plan import published_runs
from inferplan.plan.published import LATENCY_METRICS, PublishedRow, bundled_published, skip_reason


def shape(row: PublishedRow) -> str:
    return "sharegpt" if row.dataset == "sharegpt" else f"{row.input_len}/{row.output_len}"


def errors(lag: bool) -> dict[tuple[str, str], tuple[PublishedRow, float]]:
    """(case id, metric) -> (row, signed error) of every SGLang row with a prediction."""
    sglang.OVERLAP_ADMISSION_LAG = lag
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    out = {}
    try:
        for run in published_runs.group_runs(rows).values():
            values = published_runs.predict_run(run, None, False)
            for row in run:
                value = values.get(row.metric)
                if value is not None:
                    out[(row.case_id + shape(row), row.metric)] = (row, value / row.value - 1)
    finally:
        sglang.OVERLAP_ADMISSION_LAG = False
    return out


def summary(table: dict[tuple[str, str], tuple[PublishedRow, float]]) -> str:
    latency = [abs(e) for (_, m), (_, e) in table.items() if m in LATENCY_METRICS]
    throughput = [abs(e) for (_, m), (r, e) in table.items() if r.family == "throughput"]
    by_shape: dict[str, list[float]] = {}
    for (_, m), (row, e) in table.items():
        if m in LATENCY_METRICS:
            by_shape.setdefault(shape(row), []).append(abs(e))
    shapes = " ".join(f"{k} {np.median(v) * 100:.1f}" for k, v in sorted(by_shape.items()))
    return (
        f"latency n={len(latency)} median {np.median(latency) * 100:.2f} % "
        f"p90 {np.percentile(latency, 90) * 100:.1f} % above 15 %: "
        f"{sum(e > 0.15 for e in latency)} | throughput median {np.median(throughput) * 100:.2f} %"
        f" | by workload: {shapes}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="every latency row the lag moves")
    args = parser.parse_args()
    off, on = errors(False), errors(True)
    print(f"lag off: {summary(off)}")
    print(f"lag on:  {summary(on)}")
    if args.rows:
        for key, (row, before) in off.items():
            after = on[key][1]
            if row.metric in LATENCY_METRICS and abs(after - before) > 0.005:
                name = row.case_id.removeprefix("gpustack-")
                print(f"{name:44s} {shape(row):10s} {row.metric:12s} {before * 100:+7.1f} -> "
                      f"{after * 100:+7.1f} %")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
