"""Where the closed-form throughput predictions miss: residuals broken down by row attribute.

Predicts the closed-form ``trtllm-bench`` throughput rows (the rows ``fit_published.py`` fits)
with the committed constants and prints, per GPU, model, precision, TP/EP/PP, ISL/OSL, engine
release and batch-size regime, the number of rows with the signed median error (bias:
positive = predicted too fast) and the median and p90 absolute error, then the worst rows.
A group whose signed median is as large as its absolute median is a one-sided miss: a missing
or over-counted cost, not noise. Run from the repository root (a few seconds):

    .venv/bin/python scripts/residuals_published.py             # every breakdown
    .venv/bin/python scripts/residuals_published.py --by model  # one breakdown
    .venv/bin/python scripts/residuals_published.py --model gpt-oss --worst 40
    .venv/bin/python scripts/residuals_published.py --by case  # per configuration (case_id)
    .venv/bin/python scripts/residuals_published.py --by tp_osl --without-v10-moe  # TP x OSL
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    RowResult,
    engine_release,
    errors_by,
    memory_plan,
    run_setup,
    validate_rows,
)


def _rows(model: str | None) -> list[PublishedRow]:
    return [
        row
        for row in bundled_published()
        if skip_reason(row) is None
        and row.family == "throughput"
        and run_setup(row).closed_form
        and (model is None or model.lower() in row.model.lower())
    ]


_V10_MOE_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B", "Llama-4-")


def is_v10_moe(row: PublishedRow) -> bool:
    """TensorRT-LLM v1.0's MoE rows, whose EP / attention-DP setting the doc does not state
    (``docs/validation.md``, ``trtput3``): set apart when grouping the rest of the tail."""
    return row.case_id.startswith("trt10-") and any(m in row.model for m in _V10_MOE_MODELS)


def _batch(row: PublishedRow) -> str:
    """The closed form's concurrent requests: the capacity or max_batch_size regime."""
    plan = memory_plan(run_setup(row))
    blocks = -(-((row.input_len or 1) + (row.output_len or 1)) // plan.config.block_size)
    by_kv = plan.num_blocks // blocks
    limit = plan.config.max_num_seqs
    return "kv-bound" if by_kv < limit else "batch-bound"


KEYS: dict[str, Callable[[PublishedRow], str]] = {
    "case": lambda r: r.case_id,
    "gpu": lambda r: r.gpu,
    "model": lambda r: r.model.split("/")[-1],
    "precision": lambda r: r.weights_dtype,
    "parallel": lambda r: f"tp{r.tp} pp{r.pp} ep{r.ep or 1}{' adp' if r.attention_dp else ''}",
    "isl_osl": lambda r: f"{r.input_len}/{r.output_len}",
    "release": lambda r: str(engine_release(r)),
    "regime": _batch,
    # tensor parallelism against output length: long decodes on a TP group (docs/validation.md,
    # `trtput4`)
    "tp_osl": lambda r: (
        f"tp{r.tp} pp{r.pp}{' adp' if r.attention_dp else ''} "
        f"osl{'>=' if (r.output_len or 0) >= 2048 else '<'}2048"
    ),
}


def breakdown(results: list[RowResult], key: Callable[[PublishedRow], str], title: str) -> str:
    groups = errors_by(results, key)
    width = max([34, *(len(name) for name in groups)])
    lines = [f"{title:<{width}} {'n':>4} {'bias':>8} {'median':>8} {'p90':>8}"]
    for name, e in groups.items():
        lines.append(
            f"{name:<{width}} {e.size:>4} {np.median(e):>+8.1%} {np.median(abs(e)):>8.1%} "
            f"{np.percentile(abs(e), 90):>8.1%}"
        )
    return "\n".join(lines)


def worst(results: list[RowResult], count: int) -> str:
    ranked = sorted((r for r in results if r.error is not None), key=lambda r: -abs(r.error or 0))
    lines = ["worst rows: error, case, isl/osl, measured, predicted"]
    for r in ranked[:count]:
        lines.append(
            f"{r.error:>+8.1%} {r.row.case_id:<48} {r.row.input_len}/{r.row.output_len} "
            f"{r.row.value:>10.5g} {r.predicted or 0:>10.5g}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by", choices=sorted(KEYS), action="append")
    parser.add_argument("--model", help="only models whose id contains this")
    parser.add_argument("--worst", type=int, default=25)
    parser.add_argument(
        "--without-v10-moe", action="store_true", help="leave out TensorRT-LLM v1.0's MoE rows"
    )
    args = parser.parse_args(argv)
    rows = _rows(args.model)
    if args.without_v10_moe:
        rows = [r for r in rows if not is_v10_moe(r)]
    results = validate_rows(rows)
    errors = np.array([r.error for r in results if r.error is not None])
    missing = sum(r.error is None for r in results)
    print(
        f"{errors.size} rows ({missing} not predicted): bias {np.median(errors):+.1%}, "
        f"median {np.median(abs(errors)):.1%}, p90 {np.percentile(abs(errors), 90):.1%}"
    )
    for name in args.by or sorted(set(KEYS) - {"case", "tp_osl"}):
        print()
        print(breakdown(results, KEYS[name], name))
    print()
    print(worst(results, args.worst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
