"""The console's admission section of ``simulate`` (shown only when the summary has one)."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def admission_table(adm: dict[str, Any]) -> Table:
    """Policy, headroom use and early ends, then the per-bucket rates."""
    knobs = [f"on exhaustion {adm['on_exhaustion']}"] if adm["on_exhaustion"] else []
    if adm["quantile"] is not None:
        knobs.insert(0, f"q {adm['quantile']:g}")
    title = (
        f"admission: {adm['policy'] or 'engine default'} ({', '.join(knobs) or 'spf only'}); "
        f"predictor {adm['predictor']['name']}; headroom {adm['headroom_blocks']:,} blocks, "
        f"peak use {adm['headroom_peak_blocks']:,}; rejected {adm['rejected']['total']:,}, "
        f"truncated {adm['truncated']['total']:,}, queued {adm['queued']['total']:,}"
    )
    table = Table(title=title, title_justify="left")
    columns = ("bucket", "complete", "rejected", "truncated", "preempted", "max preempt")
    for col in columns:
        table.add_column(col, justify="right")
    for label, row in adm["by_bucket"].items():
        table.add_row(
            label,
            _rate(row["completion_rate"]),
            _rate(row["rejection_rate"]),
            _rate(row["truncation_rate"]),
            _rate(row["preemption_rate"]),
            "-" if row["max_preemptions"] is None else f"{row['max_preemptions']:,}",
        )
    return table
