"""The fragmentation table of docs/pools.md: one shared pool vs class pools, with and without
dynamic re-partitioning, on the same fleet and the same requests.

Fleet: Llama-3.1-8B on 8x H200, DP8 (TP1, vLLM defaults), router ``least_outstanding``.
Workload: ``--dataset-name mixed`` (30 % reasoning, 70 % chat), Poisson arrivals at 20 req/s,
12,000 requests (600 s of arrivals). Every row replays the same requests (same seed); only
the pools differ. Prints a markdown table per seed.

Usage::

    .venv/bin/python scripts/classpools_table.py [SEED ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

BASE = [
    sys.executable,
    "-m",
    "inferplan",
    "simulate",
    "--model",
    "Llama-3.1-8B",
    "--gpu",
    "h200",
    "-dp",
    "8",
    "--router",
    "least_outstanding",
    "--dataset-name",
    "mixed",
    "--reasoning-share",
    "0.3",
    "--num-prompts",
    "12000",
    "--request-rate",
    "20",
    "--json",
]
SPLIT = ["--pools", "reasoning=3,chat=5"]
SETUPS: dict[str, list[str]] = {
    "shared pool (DP8)": [],
    "static split 3/5": SPLIT,
    "split + repartition queue:64 (5 s, 60 s)": [*SPLIT, "--repartition", "queue:64"],
    "split + repartition queue:4 (5 s, 30 s)": [
        *SPLIT,
        *("--repartition", "queue:4", "--repartition-cooldown-s", "30"),
    ],
    "split + repartition ttft:0.5 (5 s, 30 s)": [
        *SPLIT,
        *("--repartition", "ttft:0.5", "--repartition-cooldown-s", "30"),
    ],
}
HEADER = (
    "| setup | duration s | output tok/s | req/s | TTFT p99 chat / reasoning s "
    "| TPOT p50 chat / reasoning ms | E2E p99 reasoning s | preemptions | moves "
    "| drained replica-s | reasoning replicas end |"
)


def run(flags: list[str], seed: int) -> dict[str, Any]:
    out = subprocess.run(
        [*BASE, "--seed", str(seed), *flags], check=True, capture_output=True, text=True
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def row(name: str, d: dict[str, Any]) -> str:
    chat, reasoning = d["classes"]["chat"], d["classes"]["reasoning"]
    pools = d.get("class_pools")
    moves = "-" if pools is None else str(pools["num_moves"])
    drained = "-" if pools is None else f"{pools['drain_replica_s']:.1f}"
    end = "-" if pools is None else str(pools["pools"]["reasoning"]["replicas_final"])
    return (
        f"| {name} | {d['duration']:.0f} | {d['output_throughput']:,.0f} "
        f"| {d['request_throughput']:.2f} "
        f"| {chat['ttft_s']['p99']:.2f} / {reasoning['ttft_s']['p99']:.2f} "
        f"| {chat['tpot_s']['p50'] * 1e3:.1f} / {reasoning['tpot_s']['p50'] * 1e3:.1f} "
        f"| {reasoning['e2el_s']['p99']:.0f} | {d['num_preemptions']:,} | {moves} | {drained} "
        f"| {end} |"
    )


def main(seeds: list[int]) -> None:
    for seed in seeds:
        print(f"\nseed {seed}\n\n{HEADER}\n|{'---|' * 11}")
        for name, flags in SETUPS.items():
            print(row(name, run(flags, seed)), flush=True)


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0])
