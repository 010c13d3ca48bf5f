"""Where each SGLang `random` run's measured ITL p99 falls in its simulated ITL distribution.

For the published SGLang runs with 2,000-, 4,000- and 32,000-token prompts, simulates each run
on the committed constants and prints: simulated gaps per request, the share of gaps above three
times the median gap (the wave stalls) and their count per request, the simulated quantile at
which the measured ITL p99 lies, the simulated p99 and the decode step (the median gap).
Used by docs/validation.md's section on SGLang's ITL p99 (sglang8, session 14).

    .venv/bin/python scripts/sglang_itl_quantiles.py
"""

from __future__ import annotations

import numpy as np

from inferplan.plan import published_runs
from inferplan.plan.published import bundled_published

PROMPT_LENGTHS = (2000, 4000, 32000)
GRID = np.linspace(0.95, 0.9999, 4000)


def main() -> None:
    rows = [
        row
        for row in bundled_published()
        if row.engine == "sglang" and row.dataset == "random" and row.input_len in PROMPT_LENGTHS
    ]
    for key, run_rows in published_runs.group_runs(rows).items():
        result = published_runs.simulate_run(run_rows, None, False)
        itl = result.itl
        measured = {row.metric: row.value for row in run_rows}
        median = itl.quantile(0.5)
        quantiles = itl.quantiles(GRID)
        stall_share = (
            1 - GRID[np.searchsorted(quantiles, 3 * median)] if quantiles[-1] > 3 * median else 0.0
        )
        p99_s = (measured.get("itl_p99") or 0.0) / 1e3
        at = GRID[min(int(np.searchsorted(quantiles, p99_s)), len(GRID) - 1)]
        requests = run_rows[0].num_requests
        if not requests:  # every GPUStack run states its request count
            continue
        gaps = itl.total_weight / requests
        print(
            f"{key[0]:45s} {key[3]:>5}/{key[4]:<4} requests {requests:4d} gaps/request {gaps:5.1f}"
            f" stalls {100 * stall_share:5.2f} % ({stall_share * gaps:4.2f}/request)"
            f" measured p99 {p99_s * 1e3:6.0f} ms = simulated q {at:.4f}"
            f" simulated p99 {itl.quantile(0.99) * 1e3:6.0f} ms decode {median * 1e3:3.0f} ms"
        )


if __name__ == "__main__":
    main()
