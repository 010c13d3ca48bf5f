"""The ``kv_tiers`` section of a ``simulate`` summary as rows of its terminal table."""

from __future__ import annotations

from typing import Any


def kv_tier_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows: bytes moved per tier, recompute avoided, backpressure, link use."""
    section = summary.get("kv_tiers")
    if not section:
        return []
    rows = [
        (
            f"KV tier {t['name']} written / read (GB)",
            f"{t['written_bytes'] / 1e9:,.1f} / {t['read_bytes'] / 1e9:,.1f}",
        )
        for t in section["tiers"]
    ]
    per_gb = section["recompute_avoided_tokens_per_gb"]
    per_gb_text = "-" if per_gb is None else f"{per_gb:,.0f}"
    rows.append(
        (
            "KV offloaded / recompute cheaper / no room",
            f"{section['num_offloaded']:,} / {section['num_not_offloaded_recompute_cheaper']:,}"
            f" / {section['num_not_offloaded']:,}",
        )
    )
    rows.append(
        (
            "recompute avoided (tokens, per GB moved)",
            f"{section['recompute_avoided_tokens']:,}, {per_gb_text}",
        )
    )
    if section["num_prefix_entries_offloaded"]:
        rows.append(
            (
                "prefix entries offloaded / reloaded",
                f"{section['num_prefix_entries_offloaded']:,}"
                f" / {section['num_prefix_entries_reloaded']:,}",
            )
        )
    rows.append(("admission held by backpressure (s)", f"{section['backpressure_s']:,.2f}"))
    write, read = section["write_link_utilization"], section["read_link_utilization"]
    rows.append(("KV tier link utilization write / read", f"{write or 0:.1%} / {read or 0:.1%}"))
    return rows
