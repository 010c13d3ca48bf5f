"""Why SGLang's ITL p99 rows are predicted as a decode step: one line per ``random`` run.

A ``random`` run's requests are identical (fixed lengths, sent at t = 0), so the simulated
SGLang serves them in lockstep waves (prefill-first: a wave fills the pool, is prefilled while
its early requests wait, decodes and finishes on one step). For each run this prints the
distinct finish times (the waves), the simulated inter-token gaps at the 98th, 99th and 99.5th
percentiles (the chat stream's empty chunks counted, as ``validate`` counts them) and the
measured ITL p99, TPOT median and mean; with ``--early-stops`` the runs whose published output
mean is below the requested length get that deficit as requests stopping at half length,
spread evenly through the run (a probe of what desynchronises the waves, not the bundled
workload). docs/validation.md, ``sglat``. Run from the repository root (a minute or two):

    .venv/bin/python scripts/sglang_stalls.py
    .venv/bin/python scripts/sglang_stalls.py --early-stops
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from inferplan.plan import published_runs, published_workload
from inferplan.plan.chat_stream import empty_chunks, with_empty_chunks
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason
from inferplan.plan.published_runs import group_runs, metric_values, served_summary, simulate_run

QUANTILES = (0.98, 0.99, 0.995)
_bundled_lengths = published_workload._lengths


def _early_stop_lengths(
    row: PublishedRow, num: int, rng: np.random.Generator
) -> tuple[np.ndarray, ...]:
    inputs, outputs = _bundled_lengths(row, num, rng)
    mean, asked = row.output_len_mean, row.output_len
    if row.dataset != "random" or not mean or not asked or mean >= asked:
        return inputs, outputs
    outputs = np.full(num, asked, dtype=np.int64)
    deficit = round((asked - mean) * num)
    count = max(1, deficit // (asked // 2))
    where = np.linspace(0, num - 1, count + 2)[1:-1].astype(int)
    outputs[where] = asked - deficit // count
    return inputs, outputs


def probe(run: list[PublishedRow]) -> str:
    first = run[0]
    result = simulate_run(run, None, False)
    records = result.records
    done = int(np.count_nonzero(records.status == 0))
    itl = with_empty_chunks(result.itl, done, empty_chunks(first))
    gaps = itl.quantiles(np.asarray(QUANTILES)) * 1e3
    waves = len(np.unique(np.round(records.finish_s, 6)))
    fe = published_runs.row_frontend(first)
    predicted = metric_values(run, served_summary(result, fe, empty_chunks(first)))
    measured = {r.metric: r.value for r in run}
    cells = [f"{m} {measured[m]:.0f}/{predicted[m] or 0:.0f}" for m in METRICS if m in measured]
    name = first.case_id.removeprefix("gpustack-")
    shape = f"{first.input_len}/{first.output_len}"
    quantiles = " / ".join(f"{g:,.0f}" for g in gaps)
    return f"{name:38s} {shape:9s} waves {waves:3d}  ITL q98/q99/q99.5 {quantiles}  " + "  ".join(
        cells
    )


METRICS = ("itl_p99", "itl_median", "tpot_median", "tpot_mean", "output_throughput")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--early-stops", action="store_true", help="the deficit as early stops")
    args = parser.parse_args(argv)
    if args.early_stops:
        published_workload._lengths = _early_stop_lengths
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    print("run, shape, distinct finish times, simulated ITL quantiles (ms), measured/predicted")
    for run in group_runs(rows).values():
        if run[0].dataset == "random" and (run[0].output_len or 0) in (100, 200):
            print(probe(run), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
