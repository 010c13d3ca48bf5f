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
    parts = [prefill, decode, turning]
    experts = result.get("expert_parallel")
    if experts:
        parts.append(expert_rank_table(experts))
    if "speculative" in result:
        parts.extend(speculative_tables(result["speculative"]))
    return Group(*parts)


def speculative_tables(spec: dict[str, Any]) -> list[Table]:
    """Decode with and without speculation, and where it stops paying."""
    title = (
        f"speculative decode ({spec['method']}, k={spec['num_speculative_tokens']}, "
        f"acceptance {spec['acceptance_rate']:.3f}, {spec['accept_length']:.2f} tokens/step)"
    )
    table = Table(title=title, title_justify="left")
    for col in ("batch", "context", "plain ms", "plain tok/s", "draft ms", "verify ms"):
        table.add_column(col, justify="right")
    for col in ("tok/s", "speedup", "verify bound"):
        table.add_column(col, justify="right")
    for row in spec["decode"]:
        table.add_row(
            f"{row['batch_size']:,}",
            f"{row['context_len']:,}",
            f"{row['plain_step_time_s'] * 1e3:,.2f}",
            f"{row['plain_tokens_per_s']:,.0f}",
            f"{row['draft_time_s'] * 1e3:,.2f}",
            f"{row['verify_time_s'] * 1e3:,.2f}",
            f"{row['tokens_per_s']:,.0f}",
            f"{row['speedup']:.2f}x",
            row["verify_bound"],
        )
    where = Table(show_header=False)
    where.add_column("what")
    where.add_column("value", justify="right")
    size = spec["verify_compute_bound_batch_size"]
    where.add_row(
        "decode batch at which the verify's GEMMs turn compute-bound",
        f"{size:,}" if size else "never (<= 65,536)",
    )
    for row in spec["break_even"]:
        size = row["break_even_batch_size"]
        where.add_row(
            f"batch from which speculation stops paying, context {row['context_len']:,}",
            f"{size:,}" if size else f"never (<= {row['max_batch_size']:,}, the KV's limit)",
        )
    return [table, where]
