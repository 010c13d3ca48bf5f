"""Every engine's ShareGPT runs: the first wave and the run's length, measured against simulated.

``wave19`` (docs/validation.md). GPUStack's ShareGPT runs send 1,000 requests at t = 0 (``vllm
bench serve`` at rate ``inf``). For each such run of every engine (vLLM, SGLang,
``trtllm-serve``; the ``--max-concurrency`` runs are left out) this prints, measured /
simulated with the committed constants (``validate``'s run: the bundled workload, the tokenizer
stage, the chat stream):

- TTFT median and p99 in seconds, their ratio measured / simulated, and the shift
  ``measured - simulated`` of each (a constant stall before the first tokens moves both by the
  same seconds; a slower wave moves the p99 about twice as far as the median);
- the run's length ``num_requests / request_throughput`` in seconds;
- the KV pool as planned against what 1,000 requests reserve at SGLang's first ratio
  (``num x (input mean + 0.7 x output mean)``): below 1 the first wave is the pool's, not the
  GPU's;
- signed errors (predicted / measured - 1, %) of TPOT median and output throughput.

``--data F`` reads another file in ``published.csv``'s schema (e.g. runs copied from the
GPUStack pages that the bundle leaves out).

    .venv/bin/python scripts/sharegpt_waves.py
    .venv/bin/python scripts/sharegpt_waves.py --engine sglang --data mine.csv

About 8 s of CPU.
"""

from __future__ import annotations

import argparse
import sys

from inferplan.errors import InferplanError
from inferplan.plan import published_runs, published_workload
from inferplan.plan.published import PublishedRow, bundled_published, read_published, skip_reason

FIRST_RATIO = 0.7  # SGLang's initial new-token ratio (SGLANG_INIT_NEW_TOKEN_RATIO)


def sharegpt_runs(rows: list[PublishedRow], engine: str | None) -> list[list[PublishedRow]]:
    """The ShareGPT runs at rate ``inf`` of ``rows`` (of ``engine`` only, when given)."""
    keep = [
        r
        for r in rows
        if r.dataset == "sharegpt"
        and not r.max_concurrency
        and skip_reason(r) is None
        and (engine is None or r.engine == engine)
    ]
    return list(published_runs.group_runs(keep).values())


def pool_share(first: PublishedRow) -> float:
    """The planned KV pool over the tokens the burst reserves at SGLang's first ratio."""
    plan = published_runs.memory_plan(published_runs.run_setup(first))
    num = published_workload.requests_of(first)
    need = num * ((first.input_len_mean or 0.0) + FIRST_RATIO * (first.output_len_mean or 0.0))
    return plan.kv_capacity_tokens / need if need > 0 else float("inf")


# The measured metrics each line reads (a run of the user's may lack some).
NEEDED = ("ttft_median", "ttft_p99", "request_throughput", "tpot_median", "output_throughput")


def line(run: list[PublishedRow]) -> str:
    """The run's line; InferplanError where it lacks a metric the line reads (before it is
    simulated)."""
    first = run[0]
    measured = {row.metric: row.value for row in run}
    missing = [metric for metric in NEEDED if metric not in measured]
    if missing:
        raise InferplanError(
            f"no measured {', '.join(missing)} (the line reads {', '.join(NEEDED)})"
        )
    predicted = published_runs.predict_run(run, None, False)
    num = published_workload.requests_of(first)
    cells = []
    for metric in ("ttft_median", "ttft_p99"):
        m, p = measured[metric] / 1e3, (predicted[metric] or 0.0) / 1e3
        ratio = f"x{m / p:4.2f}" if p > 0 else "  n/a"  # nothing simulated: no ratio
        cells.append(f"{m:6.2f} {p:6.2f} {ratio} {m - p:+6.2f}")
    length = [num / measured["request_throughput"], num / (predicted["request_throughput"] or 1)]
    errors = [
        f"{((predicted[m] or 0.0) / measured[m] - 1) * 100:+4.0f}"
        for m in ("tpot_median", "output_throughput")
    ]
    name = first.case_id.removeprefix("gpustack-")
    return (
        f"{name:44s} {first.gpu[:4]} tp{first.tp} | "
        + " | ".join(cells)
        + f" | {length[0]:6.1f} {length[1]:6.1f} | {pool_share(first):5.2f} | "
        + " ".join(errors)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="a CSV in published.csv's schema")
    parser.add_argument("--engine", default=None, choices=("vllm", "sglang", "tensorrt-llm"))
    args = parser.parse_args(argv)
    try:
        rows = read_published(args.data) if args.data else list(bundled_published())
    except InferplanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        "run, gpu, tp | TTFT median s: measured simulated ratio shift | TTFT p99 likewise |"
        " run s: measured simulated | pool / reserved | signed %: tpot_median output_throughput"
    )
    for run in sharegpt_runs(rows, args.engine):
        try:
            print(line(run), flush=True)
        except InferplanError as err:
            print(f"{run[0].case_id}: {err}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
