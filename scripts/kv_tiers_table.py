"""KV tiers at an overload where vLLM v1 preempts: no tiers vs host vs host + NVMe, as a
markdown table (the measured table of ``docs/kv-tiers.md``).

Runs ``inferplan simulate`` (the installed command line, so every row is reproducible by hand)
once per tier setting on the same workload and prints one row per run. "Extra work" is the
total token throughput (prompt + output tokens of completed requests per second) over the
no-tier run's, minus one. Usage::

    .venv/bin/python scripts/kv_tiers_table.py [--model M] [--gpu G] [--tp N] [--rate R]
        [--num-prompts N] [--dataset-path TRACE]

With ``--dataset-path`` the workload is that trace (``--dataset-name trace``; rate and count
from the trace) instead of the reasoning dataset.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from typing import Any

SETTINGS = {  # label: extra flags
    "no tiers": [],
    "host 512 GiB": ["--kv-tiers", "host:512GiB"],
    "host 8 GiB + NVMe": ["--kv-tiers", "host:8GiB,nvme:3.84TB"],
    "NVMe only": ["--kv-tiers", "nvme:3.84TB"],
    "NVMe, 1 GB/s eviction cap": ["--kv-tiers", "nvme:3.84TB", "--kv-eviction-bandwidth", "1"],
    "NVMe, 0.2 GB/s eviction cap": [
        "--kv-tiers",
        "nvme:3.84TB",
        "--kv-eviction-bandwidth",
        "0.2",
    ],
}


def run(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _gb(value: float) -> str:
    return f"{value / 1e9:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--dataset-path", default=None)
    args = parser.parse_args()
    workload = ["--dataset-name", "reasoning", "--num-prompts", str(args.num_prompts)]
    workload += ["--request-rate", str(args.rate)]
    if args.dataset_path is not None:
        workload = ["--dataset-name", "trace", "--dataset-path", args.dataset_path]
    base = [
        ".venv/bin/inferplan", "simulate", "--model", args.model, "--gpu", args.gpu,
        "-tp", str(args.tp), *workload, "--json",
    ]  # fmt: skip
    print(f"`{' '.join(base[:-1])} [flags]`\n")
    print(
        "| tiers | preemptions | offloaded / recompute cheaper | recomputed tokens | "
        "written GB (per tier) | read GB | recompute avoided tok/GB | backpressure s | "
        "write util | prefix entries down / up | HBM prefix hit rate | mean TTFT s | "
        "mean TPOT ms | total tok/s | extra work |"
    )
    print("|" + "---|" * 15)
    reference = None
    for label, flags in SETTINGS.items():
        s = run(base + flags)
        throughput = s["total_token_throughput"]
        reference = reference or throughput
        t = s.get("kv_tiers")
        written = "-" if t is None else " / ".join(_gb(x["written_bytes"]) for x in t["tiers"])
        read = "-" if t is None else _gb(sum(x["read_bytes"] for x in t["tiers"]))
        per_gb = (
            "-"
            if t is None or t["recompute_avoided_tokens_per_gb"] is None
            else (f"{t['recompute_avoided_tokens_per_gb']:,.0f}")
        )
        pressure = "-" if t is None else f"{t['backpressure_s']:.1f}"
        util = "-" if t is None else f"{t['write_link_utilization']:.3f}"
        moved = (
            "-"
            if t is None
            else (f"{t['num_offloaded']:,} / {t['num_not_offloaded_recompute_cheaper']:,}")
        )
        entries = (
            "-"
            if t is None or "prefix_cache_hit_rate" not in s
            else f"{t['num_prefix_entries_offloaded']:,} / {t['num_prefix_entries_reloaded']:,}"
        )
        hit_rate = s.get("prefix_cache_hit_rate")
        hits = "-" if hit_rate is None else f"{hit_rate:.3f}"
        print(
            f"| {label} | {s['num_preemptions']:,} | {moved} | {s['recomputed_tokens']:,} | "
            f"{written} | {read} | {per_gb} | {pressure} | {util} | {entries} | {hits} | "
            f"{s['mean_ttft_ms'] / 1e3:.1f} | "
            f"{s['mean_tpot_ms']:.1f} | {throughput:,.0f} | {throughput / reference - 1:+.1%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
