"""The ``profile`` command's summary: what was measured, where it went, and whether to trust it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from inferplan.profile.runner import Profile

NOT_FOR_PLANNING = (
    "a CPU or tiny profile tests the pipeline only: its times are not for planning "
    "(profile on the GPU you plan for, without --tiny)"
)


def profile_json(profile: Profile, output: str) -> dict[str, Any]:
    operators: dict[str, dict[str, Any]] = {}
    for op, _, _, time_s in profile.rows:
        entry = operators.setdefault(op, {"points": 0, "min_s": time_s, "max_s": time_s})
        entry["points"] += 1
        entry["min_s"] = min(entry["min_s"], time_s)
        entry["max_s"] = max(entry["max_s"], time_s)
    return {
        "output": output,
        "device": profile.device,
        "tiny": profile.is_tiny,
        "for_planning": profile.is_for_planning,
        "warning": None if profile.is_for_planning else NOT_FOR_PLANNING,
        "num_rows": len(profile.rows),
        "operators": operators,
        "notes": profile.notes,
    }


def profile_tables(result: dict[str, Any]) -> Group:
    table = Table(
        title=f"operator times written to {result['output']} ({result['device']})",
        title_justify="left",
    )
    for col in ("operator", "points", "min µs", "max µs"):
        table.add_column(col, justify="left" if col == "operator" else "right")
    for op, entry in result["operators"].items():
        table.add_row(
            op, str(entry["points"]), f"{entry['min_s'] * 1e6:,.1f}", f"{entry['max_s'] * 1e6:,.1f}"
        )
    parts: list[Table | Text] = [table]
    parts += [Text(f"note: {note}") for note in result["notes"]]
    if result["warning"]:
        parts.append(Text(f"warning: {result['warning']}", style="bold yellow"))
    return Group(*parts)
