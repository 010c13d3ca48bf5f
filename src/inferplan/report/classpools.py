"""The ``simulate --pools`` console section: one row per class pool, then the moves."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

MAX_MOVE_ROWS = 20  # the JSON has every move


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _ms(value_s: float | None) -> str:
    return "-" if value_s is None else f"{value_s * 1e3:,.1f}"


def class_pools_tables(section: dict[str, Any]) -> Group:
    pools = Table(title="class pools", title_justify="left")
    columns = ("pool", "classes", "replicas", "requests", "completed", "TTFT p50 / p99 s")
    for col in (*columns, "TPOT p50 / p99 ms", "E2E p99 s", "queue peak"):
        pools.add_column(col, justify="right")
    for name, row in section["pools"].items():
        pools.add_row(
            name + (" (default)" if name == section["default_pool"] else ""),
            ", ".join(row["classes"]) or "-",
            f"{row['replicas_initial']} -> {row['replicas_final']}",
            f"{row['num_requests']:,}",
            f"{row['completed']:,}",
            f"{_s(row['ttft_s'].get('p50'))} / {_s(row['ttft_s'].get('p99'))}",
            f"{_ms(row['tpot_s'].get('p50'))} / {_ms(row['tpot_s'].get('p99'))}",
            _s(row["e2el_s"].get("p99")),
            f"{row['queue_peak']:,}",
        )
    if section["repartition"] is None:
        return Group(pools)
    moves = Table(
        title=f"replica moves: {section['num_moves']}, drained {section['drain_replica_s']:,.1f} "
        "replica-s",
        title_justify="left",
    )
    for col in ("replica", "from", "to", "start s", "joined s", "drain s", "signal"):
        moves.add_column(col, justify="right")
    for move in section["moves"][:MAX_MOVE_ROWS]:
        moves.add_row(
            str(move["replica"]),
            move["from"],
            move["to"],
            _s(move["start_s"]),
            _s(move["joined_s"]),
            _s(move["drain_s"]),
            f"{move['signal']:,.2f}",
        )
    return Group(pools, moves)
