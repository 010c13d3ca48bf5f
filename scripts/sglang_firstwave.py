"""SGLang's first wave: when the measured runs hand out their first tokens, against the simulation.

GPUStack's SGLang ShareGPT and ``128/4`` runs send 1,000 requests at t = 0 (docs/validation.md,
``sglang5``). For each such run this prints, measured against simulated with the committed
constants (``validate``'s run: the bundled workload, the tokenizer stage, the chat stream):

- TTFT mean, median and p99 in seconds, and median / p99: about 0.5 where the first tokens come
  at an even pace over the whole span (every request in one wave), lower where a fast first
  wave is followed by a slow tail of later admissions;
- the simulated first wave (requests with a first token before the first request finishes);
- the run's length (requests x output mean / output throughput);
- the prompt tokens a second over the TTFT span (input mean x requests / TTFT p99), the rate
  the first wave is handed out at where every request is in it;
- signed errors (predicted / measured - 1, %) of TTFT median and p99, TPOT mean, ITL median
  and p99, output throughput.

``--decode-between-prefills`` is a probe, not SGLang: the scheduler runs one decode step of the
running requests after every prefill step that leaves some of them decoding (SGLang 0.5 runs a
prefill whenever one can be formed: ``engine/sglang.py``). It shows what the rows ask of the
first wave's pace and what it costs the ``128/4`` runs.

Run from the repository root (about a minute):

    .venv/bin/python scripts/sglang_firstwave.py
    .venv/bin/python scripts/sglang_firstwave.py --decode-between-prefills
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from inferplan.engine import sglang
from inferplan.engine.schedulers import SCHEDULERS, StepDecision
from inferplan.plan.chat_stream import empty_chunks
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    group_runs,
    metric_values,
    row_frontend,
    served_summary,
    simulate_run,
)

ERRORS = ("ttft_median", "ttft_p99", "tpot_mean", "itl_median", "itl_p99", "output_throughput")


class DecodeBetweenPrefills(sglang.SglangScheduler):
    """The probe: a decode step after each prefill step that leaves rows decoding (only when
    no request is mid-chunk, so a chunked prompt is never split by it)."""

    after_prefill = False

    def schedule(self, now: float) -> StepDecision:
        run = self.running
        decoding = (run.num_tokens - run.num_computed == 1) & (run.num_generated > 0)
        if self.after_prefill and len(run) and bool(decoding.all()):
            self.after_prefill = False
            self.scheduled = True
            decision = self._decode_step()
            self.batch_size_seen = len(run)
            return decision
        decision = super().schedule(now)
        self.after_prefill = decision.prefill_only
        return decision


def probed_runs() -> list[list[PublishedRow]]:
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    runs = [run for run in group_runs(rows).values() if not run[0].max_concurrency]
    return [run for run in runs if run[0].dataset == "sharegpt" or run[0].input_len == 128]


def cells(ttft_s: np.ndarray, length_s: float, run: list[PublishedRow]) -> str:
    """TTFT mean, median and p99 (median / p99), the run's length, and the prompt tokens a
    second over the TTFT span; ``ttft_s``: mean, median, p99."""
    first = run[0]
    mean, med, p99 = (float(x) for x in ttft_s)
    in_mean = first.input_len_mean or float(first.input_len or 0)
    rate_k = in_mean * (first.num_requests or 0) / p99 / 1e3
    return f"{mean:6.1f} {med:6.1f} {p99:6.1f} ({med / p99:.2f}) {length_s:6.1f} {rate_k:5.1f}k"


def probe(run: list[PublishedRow]) -> str:
    first = run[0]
    measured = {row.metric: row.value for row in run}
    out_mean = first.output_len_mean or float(first.output_len or 0)
    measured_s = np.array([measured[m] for m in ("ttft_mean", "ttft_median", "ttft_p99")]) / 1e3
    measured_length_s = (first.num_requests or 0) * out_mean / measured["output_throughput"]
    fe = row_frontend(first)
    result = simulate_run(run, None, False, fe)
    rec = result.records
    ttft = rec.first_token_s - rec.arrival_s
    wave = int(np.count_nonzero(rec.first_token_s < np.nanmin(rec.finish_s)))
    simulated_s = np.array([ttft.mean(), np.median(ttft), np.quantile(ttft, 0.99)])
    values = metric_values(run, served_summary(result, fe, empty_chunks(first)))
    errors = []
    for metric in ERRORS:
        predicted = values.get(metric)
        if predicted is None or metric not in measured:
            errors.append("    -")
            continue
        errors.append(f"{(predicted / measured[metric] - 1) * 100:+5.0f}")
    shape = "sharegpt" if first.dataset == "sharegpt" else f"{first.input_len}/{first.output_len}"
    name = first.case_id.removeprefix("gpustack-")
    return (
        f"{name:34s} {shape:8s} {cells(measured_s, measured_length_s, run)} | "
        f"{cells(simulated_s, result.duration_s, run)} {wave:5d} | " + " ".join(errors)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--decode-between-prefills",
        action="store_true",
        help="probe: one decode step after every prefill step (not SGLang's scheduler)",
    )
    args = parser.parse_args()
    if args.decode_between_prefills:
        SCHEDULERS["sglang"] = DecodeBetweenPrefills
    print(
        "run, shape | measured: TTFT mean median p99 s (median/p99), run s, prompt tok/s over "
        "the TTFT span | simulated: the same, first wave | signed %: " + " ".join(ERRORS)
    )
    for run in probed_runs():
        print(probe(run), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
