"""The ``simulate`` command's summary: a terminal table, and the JSON it extends."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from inferplan.report.admission import admission_table
from inferplan.report.classpools import class_pools_tables
from inferplan.report.experts import expert_rank_table
from inferplan.report.kvtiers import kv_tier_rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def simulate_tables(summary: dict[str, Any]) -> Group:
    head = Table(title="simulated serving run (vllm bench serve keys)", title_justify="left")
    head.add_column("metric")
    head.add_column("value", justify="right")
    rows = [
        ("completed / requests", f"{summary['completed']:,} / {summary['num_requests']:,}"),
        ("rejected", f"{summary['rejected']:,}"),
        ("duration (s)", f"{summary['duration']:,.2f}"),
        ("request throughput (req/s)", f"{summary['request_throughput'] or 0:,.2f}"),
        ("output throughput (tok/s)", f"{summary['output_throughput'] or 0:,.1f}"),
        ("total token throughput (tok/s)", f"{summary['total_token_throughput'] or 0:,.1f}"),
        ("preemptions", f"{summary['num_preemptions']:,}"),
        ("recomputed tokens", f"{summary['recomputed_tokens']:,}"),
        ("swapped bytes", f"{summary['swapped_bytes']:,}"),
    ]
    if summary.get("prefix_cache_hit_rate") is not None:
        rows.append(("prefix cache hit rate", f"{summary['prefix_cache_hit_rate']:.1%}"))
    kv = summary.get("kv_usage")
    if kv:
        rows.append(("KV usage mean / max", f"{kv['mean']:.1%} / {kv['max']:.1%}"))
    kvt = summary.get("kv_transfer")
    if kvt and kvt["num_transfers"]:
        rows.append(
            (
                "KV transfer mean / p99 (ms)",
                f"{kvt['mean_transfer_ms']:.2f} / {kvt['p99_transfer_ms']:.2f}",
            )
        )
        rows.append(("KV link utilization", f"{kvt['link_utilization'] or 0:.1%}"))
    rows.extend(kv_tier_rows(summary))
    rows.extend(_speculative_rows(summary.get("speculative")))
    for label, value in rows:
        head.add_row(label, value)
    lat = Table(title="latency (ms)", title_justify="left")
    for col in ("metric", "mean", "median", "p99"):
        lat.add_column(col, justify="right")
    for metric in ("ttft", "tpot", "itl", "e2el", "queue"):
        lat.add_row(
            metric,
            _ms(summary.get(f"mean_{metric}_ms")),
            _ms(summary.get(f"median_{metric}_ms")),
            _ms(summary.get(f"p99_{metric}_ms")),
        )
    buckets = Table(title="by requested output length", title_justify="left")
    for col in ("bucket", "requests", "completed", "TTFT p50 s", "TPOT p50 ms", "E2E p99 s"):
        buckets.add_column(col, justify="right")
    for label, row in summary["output_buckets"].items():
        buckets.add_row(
            label,
            f"{row['num_requests']:,}",
            f"{row['completion_rate']:.1%}" if row["completion_rate"] is not None else "-",
            _s(row["ttft_s"].get("p50")),
            _ms(None if row["tpot_s"].get("p50") is None else row["tpot_s"]["p50"] * 1e3),
            _s(row["e2el_s"].get("p99")),
        )
    pooled = [class_pools_tables(summary["class_pools"])] if "class_pools" in summary else []
    extra = [admission_table(summary["admission"])] if "admission" in summary else []
    experts = summary.get("expert_parallel")
    if experts:
        return Group(head, lat, buckets, *extra, expert_rank_table(experts), *pooled)
    return Group(head, lat, buckets, *extra, *pooled)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _speculative_rows(spec: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Speculative decoding's counters (``engine/speculation.py``), when it ran."""
    if not spec or not spec["num_drafts"]:
        return []
    k = spec["num_speculative_tokens"]
    return [
        (f"speculative ({spec['method']}, k={k})", f"a = {spec['acceptance_rate']:.3g}"),
        (
            "mean acceptance length (expected)",
            f"{spec['mean_acceptance_length']:.3f} ({spec['expected_acceptance_length']:.3f})",
        ),
        ("draft acceptance rate", f"{spec['draft_acceptance_rate']:.1%}"),
    ]
