"""The ``roofline`` command's terminal tables."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from inferplan.report.experts import expert_rank_table


def roofline_tables(result: dict[str, Any]) -> Group:
    title = f"{result['model']} on {result['gpu']} (tp={result['tensor_parallel_size']})"
    prefill = Table(title=f"prefill, one prompt per step: {title}", title_justify="left")
    for col in ("input len", "step ms", "tokens/s", "bound"):
        prefill.add_column(col, justify="right")
    for row in result["prefill"]:
        prefill.add_row(
            f"{row['input_len']:,}",
            f"{row['step_time_s'] * 1e3:,.2f}",
            f"{row['tokens_per_s']:,.0f}",
            row["bound"],
        )
    decode = Table(title="decode, one step", title_justify="left")
    for col in ("batch", "context", "TPOT ms", "tokens/s", "bound"):
        decode.add_column(col, justify="right")
    for row in result["decode"]:
        decode.add_row(
            f"{row['batch_size']:,}",
            f"{row['context_len']:,}",
            f"{row['step_time_s'] * 1e3:,.2f}",
            f"{row['tokens_per_s']:,.0f}",
            row["bound"],
        )
    size = result["compute_bound_batch_size"]
    turning = Table(show_header=False)
    turning.add_column("what")
    turning.add_column("value", justify="right")
    turning.add_row(
        "decode batch at which the weight GEMMs turn compute-bound",
        f"{size:,}" if size else "never (<= 65,536)",
    )
    experts = result.get("expert_parallel")
    if experts:
        return Group(prefill, decode, turning, expert_rank_table(experts))
    return Group(prefill, decode, turning)
