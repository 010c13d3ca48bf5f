"""Colocated chunked prefill vs prefill/decode ratios on the same GPUs, as a markdown table.

Runs ``inferplan simulate`` (the installed command line, so every number is reproducible by
hand) for each workload and deployment and prints one row per run. Usage::

    .venv/bin/python scripts/disagg_ratios.py [--model M] [--gpu G] [--tp N] [--gpus N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

WORKLOADS = {  # name: (input tokens, output tokens, request rates to try)
    "prefill-heavy 8000/200": (8000, 200, (6.0, 15.0)),
    "balanced 2000/1000": (2000, 1000, (6.0, 15.0)),
    "decode-heavy 200/4000": (200, 4000, (6.0, 15.0)),
}


def run(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt-oss-120b")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--num-prompts", type=int, default=600)
    args = parser.parse_args()
    instances = args.gpus // args.tp
    base = [sys.executable, "-m", "inferplan", "simulate", "--model", args.model]
    base += ["--gpu", args.gpu, "-tp", str(args.tp), "--num-prompts", str(args.num_prompts)]
    shapes = {f"colocated x{instances}": ["-dp", str(instances)]}
    for p in range(1, instances):
        shapes[f"{p}P:{instances - p}D"] = [
            "--disaggregate",
            "--prefill-dp",
            str(p),
            "--decode-dp",
            str(instances - p),
        ]
    print(
        "| workload | req/s | deployment | TTFT mean / p99 ms | TPOT mean / p99 ms "
        "| output tok/s | KV transfer mean / p99 ms | link util |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (isl, osl, rates) in WORKLOADS.items():
        for rate in rates:
            for label, extra in shapes.items():
                argv = [*base, "--random-input-len", str(isl), "--random-output-len", str(osl)]
                data = run([*argv, "--request-rate", str(rate), *extra, "--json"])
                kv = data.get("kv_transfer") or {}
                transfer = (
                    f"{kv['mean_transfer_ms']:.2f} / {kv['p99_transfer_ms']:.2f}" if kv else "-"
                )
                util = f"{kv['link_utilization']:.2%}" if kv else "-"
                print(
                    f"| {name} | {rate:g} | {label} "
                    f"| {data['mean_ttft_ms']:.0f} / {data['p99_ttft_ms']:.0f} "
                    f"| {data['mean_tpot_ms']:.1f} / {data['p99_tpot_ms']:.1f} "
                    f"| {data['output_throughput']:.0f} | {transfer} | {util} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
