"""SGLang's ShareGPT runs: the full-batch decode rate, and what a slower first wave would do.

Three probes of GPUStack's 13 SGLang ShareGPT runs (1,000 requests at t = 0), used by
docs/validation.md's ``sgl15`` section (session 15). Signed errors are predicted / measured - 1.

- ``--peaks``: ``vllm bench serve``'s "Peak output token throughput" (the most output tokens the
  client received in one 1-second bucket), as each GPUStack page prints it beside the rows of
  ``published.csv`` (not a row there), against the simulated ``max_output_tokens_per_s``
  (``metrics/peaks.py``; tokens spread evenly over each request's decode). With 1,000 requests
  decoding, the peak is the full-batch decode rate: it tells the big batch's step from the
  first wave and the tail.
- ``--prefill-scale K``: every prefill-only step K times longer (the step model wrapped); the
  per-metric signed errors. K = 1 is the committed model.
- ``--tail``: the run's last request (its longest output): its simulated decode pace (ms a token
  from its first token to its finish) against the measured bounds, the run's length over its
  tokens (a first token at t = 0) and from the measured TTFT p99 on (a first token at the end of
  the first wave); the run's length is ``num_requests x output mean / output throughput``.
- ``--intake-s S [--intake-stream-s T]``: SGLang's intake per request (``FrontEnd.per_request_s``,
  committed 6 ms) and the streams' share of the intake process (``intake_stream_s``, 0).

    .venv/bin/python scripts/sglang_sharegpt_probes.py --peaks
    .venv/bin/python scripts/sglang_sharegpt_probes.py --tail
    .venv/bin/python scripts/sglang_sharegpt_probes.py --prefill-scale 1.6
    .venv/bin/python scripts/sglang_sharegpt_probes.py --intake-s 0.012

About 5 s of CPU each.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import numpy as np

from inferplan.engine.frontend import FrontEnd
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.plan import published_runs
from inferplan.plan.chat_stream import empty_chunks
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason

# "Peak output token throughput (tok/s)" of each SGLang ShareGPT run, read from the GPUStack page
# and block each run's rows cite (github gpustack/gpustack @ 47277d79,
# docs/performance-lab/<model>/<gpu>.md, the SGLang block at the line in the rows' note).
MEASURED_PEAK_TOK_S = {
    "deepseek-r1-h200-sglang-f4139a": 9699.0,
    "deepseek-v3.2-h200-sglang-5ab407": 7949.0,
    "glm-4.5-air-a100-sglang-43a1c3": 11709.0,
    "glm-4.5-air-h100-sglang-43a1c3": 12110.0,
    "glm-4.x-h100-sglang-d9742d": 5614.0,
    "glm-4.x-h200-sglang-e156f5": 7570.0,
    "gpt-oss-120b-a100-sglang-5a31af": 1865.0,
    "gpt-oss-20b-h100-sglang-cc4233": 13804.0,
    "qwen3-14b-a100-sglang-0ae51e": 6721.0,
    "qwen3-14b-h100-sglang-0ae51e": 12059.0,
    "qwen3-235b-a22b-a100-sglang-bbfb7a": 4926.0,
    "qwen3-235b-a22b-h100-sglang-bbfb7a": 8791.0,
    "qwen3-32b-h100-sglang-455ac5": 1329.0,
}
METRICS = (
    "ttft_mean",
    "ttft_median",
    "ttft_p99",
    "tpot_mean",
    "tpot_median",
    "tpot_p99",
    "itl_mean",
    "itl_median",
    "itl_p99",
    "output_throughput",
)


class SlowPrefill:
    """A step model whose prefill-only steps take ``scale`` times as long (a probe)."""

    def __init__(self, inner: Any, scale: float) -> None:
        self.inner, self.scale = inner, scale

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _is_prefill(self, batch: StepBatch) -> bool:
        return bool(batch.prefill_tokens) and not batch.num_decode_seqs

    def step_time(self, batch: StepBatch) -> StepTime:
        step = self.inner.step_time(batch)
        if not self._is_prefill(batch):
            return step
        bounds = {k: v * self.scale for k, v in step.by_bound_s.items()}
        return StepTime(step.total_s * self.scale, bounds, step.by_operator_s)

    def batch_line(self, batch: StepBatch) -> tuple[float, float, float]:
        a, b, limit = self.inner.batch_line(batch)
        k = self.scale if self._is_prefill(batch) else 1.0
        return a * k, b * k, limit


def sharegpt_runs() -> list[list[PublishedRow]]:
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    runs = published_runs.group_runs(rows).values()
    return [run for run in runs if run[0].dataset == "sharegpt" and not run[0].max_concurrency]


def name_of(run: list[PublishedRow]) -> str:
    return run[0].case_id.removeprefix("gpustack-")


def peaks() -> None:
    print("run | peak output tok/s: measured, simulated, simulated / measured")
    ratios = []
    for run in sharegpt_runs():
        measured = MEASURED_PEAK_TOK_S.get(name_of(run))
        if measured is None:
            continue
        fe = published_runs.row_frontend(run[0])
        result = published_runs.simulate_run(run, None, False, fe)
        summary = published_runs.served_summary(result, fe, empty_chunks(run[0]))
        simulated = float(summary["max_output_tokens_per_s"])  # type: ignore[arg-type]
        ratios.append(simulated / measured)
        print(f"{name_of(run):36s} {measured:8.0f} {simulated:8.0f} {ratios[-1]:5.2f}", flush=True)
    print(f"median ratio {np.median(ratios):.2f}")


def tail() -> None:
    print("run | last request: output tokens, simulated ms a token | measured: at most, at least")
    for run in sharegpt_runs():
        first = run[0]
        measured = {row.metric: row.value for row in run}
        if "output_throughput" not in measured or "ttft_p99" not in measured:
            continue  # the measured pace needs the run's throughput and its wave's end
        result = published_runs.simulate_run(run, None, False)
        rec = result.records
        last = int(np.argmax(rec.finish_s))
        gaps = max(int(rec.output_tokens[last]) - 1, 1)
        simulated_ms = (rec.finish_s[last] - rec.first_token_s[last]) / gaps * 1e3
        out_mean = first.output_len_mean or float(first.output_len or 0)
        run_s = (first.num_requests or 0) * out_mean / measured["output_throughput"]
        wave_end_s = measured["ttft_p99"] / 1e3
        most, least = run_s / gaps * 1e3, (run_s - wave_end_s) / gaps * 1e3
        print(f"{name_of(run):36s} {gaps + 1:5d} {simulated_ms:6.1f} | {most:6.1f} {least:6.1f}")


def errors(frontend_of: Any) -> None:
    print("run | signed %: " + " ".join(METRICS))
    signed: dict[str, list[float]] = {m: [] for m in METRICS}
    for run in sharegpt_runs():
        values = published_runs.predict_run(run, None, False, frontend_of(run[0]))
        measured = {row.metric: row.value for row in run}
        cells = []
        for metric in METRICS:
            value = values.get(metric)
            if value is None or metric not in measured:
                cells.append("     -")
                continue
            signed[metric].append(value / measured[metric] - 1)
            cells.append(f"{signed[metric][-1] * 100:+6.0f}")
        print(f"{name_of(run):36s}" + "".join(cells), flush=True)
    latency = np.abs(np.concatenate([signed[m] for m in METRICS if m != "output_throughput"]))
    print(
        "median signed %: " + " ".join(f"{m} {np.median(v) * 100:+.0f}" for m, v in signed.items())
    )
    print(
        "median |error| %: "
        + " ".join(f"{m} {np.median(np.abs(v)) * 100:.0f}" for m, v in signed.items())
    )
    print(f"latency rows: median |error| {np.median(latency) * 100:.1f} %")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--peaks", action="store_true", help="peak output tok/s, measured and simulated"
    )
    parser.add_argument("--tail", action="store_true", help="the last request's decode pace")
    parser.add_argument("--prefill-scale", type=float, default=1.0, help="prefill-only steps x K")
    parser.add_argument("--intake-s", type=float, default=None, help="SGLang's per_request_s")
    parser.add_argument("--intake-stream-s", type=float, default=0.0, help="intake_stream_s")
    args = parser.parse_args()
    changed = args.prefill_scale != 1.0 or args.intake_s is not None or args.intake_stream_s
    if (args.peaks or args.tail) and changed:
        parser.error("--peaks and --tail run the committed model: no --prefill-scale/--intake-s")
    if args.peaks:
        peaks()
        return 0
    if args.tail:
        tail()
        return 0
    if args.prefill_scale <= 0:
        parser.error("--prefill-scale must be above 0")
    if args.prefill_scale != 1.0:
        build = published_runs.run_step_model
        published_runs.run_step_model = lambda *a, **k: SlowPrefill(
            build(*a, **k), args.prefill_scale
        )

    def frontend_of(row: PublishedRow) -> FrontEnd:
        fe = published_runs.row_frontend(row)
        if args.intake_s is None:
            return fe
        return replace(fe, per_request_s=args.intake_s, intake_stream_s=args.intake_stream_s)

    errors(frontend_of)
    return 0


if __name__ == "__main__":
    sys.exit(main())
