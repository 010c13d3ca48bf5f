"""Predicted side of the check against dstack's SGLang prefill/decode-ratio runs (markdown table).

The measured side is dstack's benchmark of SGLang P/D disaggregation, gpt-oss-120b on 8x H200
(github dstackai/benchmarks, comparison/pd_ratio @ 06c957ab51572ca18db9c1f4bb254a9eb86df4d7):
xPyD of TP2 instances (3P1D, 2P2D, 1P3D), ``vllm bench serve`` random dataset, 500 prompts,
closed loop at ``--max-concurrency`` 32 and 128, no ``--ignore-eos``. docs/disaggregation.md
quotes those figures; this script only runs the simulator.

Assumptions (why the inputs below are what they are):

- ``simulate --disaggregate`` refuses a client concurrency cap, so each closed-loop cell is
  replaced by open-loop Poisson arrivals at that cell's measured request throughput, averaged
  over the three ratios (Little's law: the rate the closed loop sustained). All three ratios
  get the same offered rate, so their differences come from the model alone.
- Outputs stopped at EOS in the measured runs (no ``--ignore-eos``): the output length here is
  the measured mean generated tokens per request of the workload (64, 644, 745), not the
  requested 128 / 2048.
- A second run per workload and ratio sends all 500 requests at once (rate inf), to compare the
  capacity ranking with the measured concurrency-128 throughput ranking.

Usage::

    .venv/bin/python scripts/disagg_sglang_check.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# name: (input tokens, mean generated tokens measured, {concurrency label: mean measured req/s})
WORKLOADS = {
    "prefill-heavy 2048/128": (2048, 64, {"c32": 41.1, "c128": 33.7}),
    "decode-heavy 128/2048": (128, 644, {"c32": 5.9, "c128": 11.3}),
    "balanced 2048/2048": (2048, 745, {"c32": 5.0, "c128": 10.1}),
}
RATIOS = ((3, 1), (2, 2), (1, 3))
BASE = [sys.executable, "-m", "inferplan", "simulate", "--model", "gpt-oss-120b", "--gpu"]
BASE += ["h200", "-tp", "2", "--num-prompts", "500", "--disaggregate"]


def run(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def row(name: str, cell: str, rate: str, prefill: int, decode: int, isl: int, osl: int) -> str:
    argv = [*BASE, "--prefill-dp", str(prefill), "--decode-dp", str(decode)]
    argv += ["--random-input-len", str(isl), "--random-output-len", str(osl)]
    data = run([*argv, "--request-rate", rate, "--json"])
    return (
        f"| {name} | {cell} | {rate} | {prefill}P{decode}D "
        f"| {data['mean_ttft_ms']:.0f} / {data['p99_ttft_ms']:.0f} "
        f"| {data['mean_tpot_ms']:.1f} / {data['p99_tpot_ms']:.1f} "
        f"| {data['output_throughput']:.0f} |"
    )


def main() -> int:
    print(
        "| workload | cell | req/s | ratio | TTFT mean / p99 ms | TPOT mean / p99 ms | out tok/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (isl, osl, cells) in WORKLOADS.items():
        for cell, rate in [*cells.items(), ("burst", float("inf"))]:
            for prefill, decode in RATIOS:
                print(row(name, cell, f"{rate:g}", prefill, decode, isl, osl), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
