"""Admission policies side by side on a reasoning workload, as the markdown tables of
``docs/reasoning.md``.

Runs ``inferplan simulate`` (the installed command line, so every row can be rerun by hand:
the script prints each row's exact command) once per policy at one load, and prints an
overall table and a per-output-bucket table. Usage::

    .venv/bin/python scripts/reasoning_tables.py --model Llama-3.1-8B --rate 0.8
    .venv/bin/python scripts/reasoning_tables.py --model Qwen3-32B --rate 0.2
    .venv/bin/python scripts/reasoning_tables.py --model Llama-3.1-8B --rate 0.6 \
        --dataset reasoning-burst --policies burst
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

# Quantile 0.5 of a noisy predictor biased to a quarter of the true length: under-reserves.
UNDER_PREDICTING = (
    *("--admission", "quantile", "--admission-quantile", "0.5"),
    *("--length-predictor", "noisy", "--predictor-bias", "0.25"),
)
POLICY_SETS: dict[str, dict[str, list[str]]] = {
    "main": {
        "reserve-none (vLLM default)": [],
        "reserve-max 32k": ["--admission", "reserve-max", "--admission-max-tokens", "32768"],
        "quantile 0.9 + 10% headroom, oracle": ["--admission", "quantile"],
        "quantile 0.9 + 10%, class": ["--admission", "quantile", "--length-predictor", "class"],
        "quantile 0.9 + 10%, noisy 0.5 (over-reserves)": [
            *("--admission", "quantile", "--length-predictor", "noisy"),
        ],
        "quantile 0.5, noisy bias 0.25 (under), no headroom, preempt": [
            *UNDER_PREDICTING,
            *("--admission-headroom", "0"),
        ],
        "same, 10% headroom, preempt": [
            *UNDER_PREDICTING,
        ],
        "same, no headroom, truncate": [
            *UNDER_PREDICTING,
            *("--admission-headroom", "0", "--on-exhaustion", "truncate"),
        ],
        "same, no headroom, reject": [
            *UNDER_PREDICTING,
            *("--admission-headroom", "0", "--on-exhaustion", "reject"),
        ],
        "same, no headroom, queue": [
            *UNDER_PREDICTING,
            *("--admission-headroom", "0", "--on-exhaustion", "queue"),
        ],
        "token-budget q0.5 oracle (pool tokens)": [
            *("--admission", "token-budget", "--admission-quantile", "0.5"),
        ],
        "reserve-none + spf (oracle)": ["--scheduling-policy", "spf"],
        "reserve-none + spf, aging 600 s": [
            *("--scheduling-policy", "spf", "--spf-aging-s", "600"),
        ],
    },
    "burst": {
        "reserve-none (vLLM default)": [],
        "reserve-max 32k": ["--admission", "reserve-max", "--admission-max-tokens", "32768"],
        "quantile 0.9 + 10%, class": ["--admission", "quantile", "--length-predictor", "class"],
        "quantile 0.5 + 10%, class": [
            *("--admission", "quantile", "--admission-quantile", "0.5"),
            *("--length-predictor", "class"),
        ],
    },
}
BUCKET_POLICIES = ("reserve-none (vLLM default)", "reserve-max 32k")


def run(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _f(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def overall_row(name: str, s: dict[str, Any]) -> str:
    adm = s.get("admission") or {}
    truncated = adm.get("truncated", {}).get("total", 0)
    peak = adm.get("headroom_peak_blocks", "-")
    return (
        f"| {name} | {_f(s['output_throughput'], digits=0)} | {_f(s['p99_ttft_ms'], 1e-3)} | "
        f"{_f(s['p99_tpot_ms'])} | {_f(s['p99_e2el_ms'], 1e-3)} | {s['num_preemptions']:,} | "
        f"{s['rejected']:,} | {truncated:,} | {_f(s['kv_usage']['mean'], 100, 0)}% | {peak} |"
    )


def bucket_rows(name: str, s: dict[str, Any]) -> list[str]:
    rows = []
    for label, b in s["output_buckets"].items():
        rows.append(
            f"| {name} | {label} | {b['num_requests']:,} | {_f(b['completion_rate'], 100)}% | "
            f"{_f(b['ttft_s']['p99'])} | {_f(b['tpot_s']['p99'], 1e3)} | "
            f"{_f(b['e2el_s']['p99'])} | {b['num_preemptions']:,} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--rate", type=float, default=0.8)
    parser.add_argument("--num-prompts", type=int, default=2000)
    parser.add_argument("--dataset", default="reasoning")
    parser.add_argument("--policies", choices=tuple(POLICY_SETS), default="main")
    args = parser.parse_args()
    base = [
        *(".venv/bin/inferplan", "simulate", "--model", args.model, "--gpu", args.gpu),
        *("--dataset-name", args.dataset, "--num-prompts", str(args.num_prompts)),
        *("--request-rate", str(args.rate), "--json"),
    ]
    summaries: dict[str, dict[str, Any]] = {}
    for name, flags in POLICY_SETS[args.policies].items():
        print(f"# {name}: {' '.join(base + flags)}", file=sys.stderr)
        summaries[name] = run(base + flags)
    print(
        "| policy | output tok/s | p99 TTFT s | p99 TPOT ms | p99 E2E s | preemptions | "
        "rejected | truncated | mean KV use | headroom peak blocks |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in summaries.items():
        print(overall_row(name, s))
    print()
    print(
        "| policy | bucket | requests | completed | p99 TTFT s | p99 TPOT ms | p99 E2E s |", end=""
    )
    print(" preemptions |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    shown = [*BUCKET_POLICIES, *(n for n in summaries if n.startswith("same, 10%"))]
    shown = shown[:3] if len(shown) > 2 else [*shown, next(n for n in summaries if "quantile" in n)]
    for name in shown:
        print("\n".join(bucket_rows(name, summaries[name])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
