"""Why SGLang's ShareGPT runs are predicted too fast: one line per run, three probes.

GPUStack's ShareGPT runs (1,000 chat requests sent at t = 0) are the SGLang latency rows
predicted furthest off (docs/validation.md, ``sglang3``). For each such run (and, for the
intake comparison, each ``128/4`` run, which pins SGLang's tokenizer-stage cost) this prints,
with the committed constants:

- the simulated run: requests that got their first token before the first one finished (the
  first wave the KV pool admits), retractions, and one full 8,192-token prefill chunk of
  217-token prompts as the step model times it (the stall that chunk puts between two tokens);
- signed errors (predicted / measured - 1) of TTFT median and p99, TPOT mean and p99, ITL p99
  and output throughput with the tokenizer stage at ``--intake`` milliseconds a request
  (SGLang's fitted 6 ms first).

Run from the repository root (about 2 minutes):

    .venv/bin/python scripts/sglang_sharegpt.py
    .venv/bin/python scripts/sglang_sharegpt.py --intake 6,12,18
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.plan.chat_stream import empty_chunks
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import (
    group_runs,
    memory_plan,
    metric_values,
    row_frontend,
    run_setup,
    run_step_model,
    served_summary,
    simulate_run,
)

METRICS = ("ttft_median", "ttft_p99", "tpot_mean", "tpot_p99", "itl_p99", "output_throughput")
CHUNK_TOKENS, PROMPT_TOKENS = 8192, 217  # SGLang's chunk on 80-141 GB GPUs; ShareGPT's mean


def probed_runs() -> list[list[PublishedRow]]:
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    runs = [run for run in group_runs(rows).values() if not run[0].max_concurrency]
    return [run for run in runs if run[0].dataset == "sharegpt" or run[0].input_len == 128]


def chunk_ms(run: list[PublishedRow]) -> float:
    """One full prefill chunk of ``PROMPT_TOKENS``-token prompts, as the run's step model
    times it (milliseconds)."""
    setup = run_setup(run[0])
    plan = memory_plan(setup)
    step = run_step_model(run[0], setup, plan, None)
    num = CHUNK_TOKENS // PROMPT_TOKENS
    batch = StepBatch(
        prefill_tokens=num * PROMPT_TOKENS,
        prefill_attention_pairs=num * chunk_attention_pairs(PROMPT_TOKENS, 0),
        num_prefill_seqs=num,
    )
    return step.step_time(batch).total_s * 1e3


def probe(run: list[PublishedRow], intakes_ms: list[float]) -> str:
    base = row_frontend(run[0])
    cells = []
    for i, intake_ms in enumerate(intakes_ms):
        fe = replace(base, per_request_s=intake_ms * 1e-3)
        result = simulate_run(run, None, False, fe)
        if i == 0:
            rec = result.records
            first_finish = np.nanmin(rec.finish_s)
            wave = int(np.count_nonzero(rec.first_token_s < first_finish))
            retracted = int(np.count_nonzero(rec.num_preemptions))
            cells.append(f"wave {wave:4d} retracted {retracted:3d} chunk {chunk_ms(run):5.0f} ms")
        values = metric_values(run, served_summary(result, fe, empty_chunks(run[0])))
        measured = {row.metric: row.value for row in run}
        errors = []
        for metric in METRICS:
            predicted = values.get(metric)
            if predicted and metric in measured:
                errors.append(f"{(predicted / measured[metric] - 1) * 100:+4.0f}")
            else:
                errors.append("   -")
        cells.append(f"{intake_ms:g} ms: " + " ".join(errors))
    first = run[0]
    shape = "sharegpt" if first.dataset == "sharegpt" else f"{first.input_len}/{first.output_len}"
    return f"{first.case_id.removeprefix('gpustack-'):40s} {shape:8s} " + " | ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intake", default="6,12,18", help="tokenizer-stage ms a request")
    args = parser.parse_args()
    intakes = [float(x) for x in args.intake.split(",")]
    print("signed errors, %: " + " ".join(METRICS))
    for run in probed_runs():
        print(probe(run, intakes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
