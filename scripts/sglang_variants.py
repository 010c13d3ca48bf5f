"""SGLang's ``vllm bench serve`` rows under workload variants that are not the default: median
and p90 of |error| (signed median beside) by family, metric and dataset, with the committed
constants. docs/validation.md, ``sglat2``. Run from the repository root (15-60 s):

    .venv/bin/python scripts/sglang_variants.py                      # the bundled workload
    .venv/bin/python scripts/sglang_variants.py --eos-hazard         # random: early EOS stops
    .venv/bin/python scripts/sglang_variants.py --sharegpt-lengths   # ShareGPT: measured pairs
    .venv/bin/python scripts/sglang_variants.py --dataset sharegpt --conservativeness 0.3
    .venv/bin/python scripts/sglang_variants.py --sharegpt-lengths --cv   # fit_frontend.py's CV

``--runs``: one line per run instead (measured / predicted, by metric). ``--cv``: instead of
the table, ``scripts/fit_frontend.py --engine sglang --dry-run --by`` (its grid and 5 folds by
``case_id``) on the variant's workload (10-30 min wall).

``--eos-hazard``: ``random`` outputs from ``plan/eos_stops.py`` (a constant per-token stop
probability matching each run's published mean); ``--sharegpt-lengths``: ShareGPT pairs from
``plan/sharegpt.py`` (the bundled measured pairs scaled to the run's means) instead of the
lognormal; ``--conservativeness c``: SGLang's new-token ratios as ``--schedule-conservativeness
c`` sets them (on top of what the run's settings give); ``--sharegpt-intake-ms x``: the
ShareGPT runs' tokenizer-stage cost per request (fitted: 6 ms, ``engine/data/frontend.yaml``);
``--intake-stream-us x``: every run's intake slowed by ``x`` us of its process per streamed token
(``engine/stream_intake.py``; 0 by default).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from inferplan.engine import sglang
from inferplan.engine.frontend import FrontEnd
from inferplan.plan import published_runs, published_workload
from inferplan.plan.eos_stops import random_outputs
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import RowResult, validate_rows
from inferplan.plan.sharegpt import sharegpt_lengths

METRICS: tuple[str, ...] = ("ttft_median", "ttft_p99", "tpot_mean", "tpot_median", "tpot_p99")
METRICS += ("itl_mean", "itl_median", "itl_p99")


def _patch(args: argparse.Namespace) -> None:
    bundled = published_workload._lengths

    def lengths(row: PublishedRow, num: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        if args.sharegpt_lengths and row.dataset == "sharegpt":
            mean_in, mean_out = row.input_len_mean or 1.0, row.output_len_mean or 1.0
            return sharegpt_lengths(num, mean_in, mean_out, rng)
        inputs, outputs = bundled(row, num, rng)
        if args.eos_hazard and row.dataset == "random":
            outputs = random_outputs(row, num)
        return inputs, outputs

    published_workload._lengths = lengths
    if args.sharegpt_intake_ms is not None:
        frontend, intake_s = published_runs.row_frontend, args.sharegpt_intake_ms / 1e3

        def row_frontend(row: PublishedRow) -> FrontEnd:
            fe = frontend(row)
            return replace(fe, per_request_s=intake_s) if row.dataset == "sharegpt" else fe

        published_runs.row_frontend = row_frontend
    if args.intake_stream_us:
        fronted, stream_s = published_runs.row_frontend, args.intake_stream_us / 1e6

        def streamed(row: PublishedRow) -> FrontEnd:
            return replace(fronted(row), intake_stream_s=stream_s)

        published_runs.row_frontend = streamed
    if args.conservativeness is not None:
        ratios, factor = sglang.new_token_ratios, args.conservativeness

        def scaled(conservativeness: float) -> tuple[float, float, float]:
            return ratios(conservativeness * factor)

        sglang.new_token_ratios = scaled


def _line(results: list[RowResult], label: str) -> str:
    errors = np.array([r.error for r in results if r.error is not None])
    if errors.size == 0:
        return f"{label:24s} n    0"
    absolute = np.abs(errors)
    return (
        f"{label:24s} n {errors.size:4d}  median {100 * np.median(absolute):5.1f} %  "
        f"p90 {100 * np.percentile(absolute, 90):6.1f} %  signed {100 * np.median(errors):+6.1f} %"
    )


RUN_METRICS = (
    "ttft_median",
    "tpot_mean",
    "tpot_median",
    "itl_median",
    "itl_p99",
    "output_throughput",
)


def _runs(results: list[RowResult]) -> int:
    runs: dict[tuple[object, ...], dict[str, RowResult]] = {}
    for r in results:
        runs.setdefault(r.row.run_key, {})[r.row.metric] = r
    print("run, shape: measured / predicted (signed %) for " + ", ".join(RUN_METRICS))
    for by_metric in runs.values():
        first = next(iter(by_metric.values())).row
        shape = f"{first.input_len}/{first.output_len}" if first.input_len else first.dataset
        cells = [
            f"{by_metric[m].row.value:,.0f} / {by_metric[m].predicted or 0:,.0f} "
            f"({100 * (by_metric[m].error or 0):+.0f})"
            for m in RUN_METRICS
            if m in by_metric
        ]
        print(f"{first.case_id.removeprefix('gpustack-'):40s} {shape:10s} " + "; ".join(cells))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eos-hazard", action="store_true")
    parser.add_argument("--sharegpt-lengths", action="store_true")
    parser.add_argument("--conservativeness", type=float, default=None)
    parser.add_argument("--sharegpt-intake-ms", type=float, default=None)
    parser.add_argument("--intake-stream-us", type=float, default=0.0)
    parser.add_argument("--dataset", choices=("random", "sharegpt"), default=None)
    parser.add_argument("--runs", action="store_true", help="one line per run instead")
    parser.add_argument("--cv", action="store_true", help="run fit_frontend.py's CV instead")
    parser.add_argument(
        "--cv-args",
        default="",
        help="more arguments for fit_frontend.py (--shard I/N --save F, or --load F ...)",
    )
    args = parser.parse_args(argv)
    _patch(args)
    if args.cv:
        sys.path.insert(0, str(Path(__file__).parent))
        import fit_frontend  # a sibling script, found once the path is set

        fixed = ["--engine", "sglang", "--dry-run", "--by"]
        return int(fit_frontend.main(fixed + args.cv_args.split()))
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    rows = [r for r in rows if args.dataset in (None, r.dataset)]
    results = [r for r in validate_rows(rows) if r.error is not None]
    if args.runs:
        return _runs(results)
    latency = [r for r in results if r.row.family == "latency"]
    print(_line(latency, "latency"))
    print(_line([r for r in results if r.row.family == "throughput"], "throughput"))
    for family in ("ttft", "tpot", "itl"):
        print(_line([r for r in latency if r.row.metric.startswith(family)], family))
    for metric in METRICS:
        print(_line([r for r in latency if r.row.metric == metric], metric))
    for dataset in ("random", "sharegpt"):
        print(_line([r for r in latency if r.row.dataset == dataset], f"latency {dataset}"))
        thr = [r for r in results if r.row.family == "throughput" and r.row.dataset == dataset]
        print(_line(thr, f"throughput {dataset}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
