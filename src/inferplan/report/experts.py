"""Terminal table of the per-rank expert-parallel report (``perf/moe_report.py``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from inferplan.specs.hardware import GIB


def expert_rank_table(report: dict[str, Any]) -> Table:
    """One row per EP rank: what it holds, what it carries, how long its experts take."""
    title = (
        f"expert parallelism: {report['routing']} routing, {report['placement']} placement, "
        f"{report['num_redundant_experts']} redundant; busiest rank {report['max_load_share']:.1%}"
        f" of picks vs mean {report['mean_load_share']:.1%} (imbalance "
        f"{report['imbalance_ratio']:.2f}); step of {report['reference_step_tokens']:,.0f} tokens"
    )
    table = Table(title=title, title_justify="left")
    for col in ("rank", "node", "experts", "expert GiB", "KV GiB", "load", "experts ms", "bound"):
        table.add_column(col, justify="right")
    for rank in report["ranks"]:
        table.add_row(
            str(rank["rank"]),
            str(rank["node"]),
            str(rank["experts_hosted"]),
            f"{rank['expert_weight_bytes'] / GIB:,.1f}",
            f"{rank['kv_bytes'] / GIB:,.1f}",
            f"{rank['load_share']:.1%}",
            f"{rank['experts_time_s'] * 1e3:,.1f}",
            rank["bound"],
        )
    return table
