"""The ``plan`` command's terminal output (tables from the JSON it prints with ``--json``), its
progress bar, and the ``plan diff`` table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, Group
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _shape(plan: dict[str, Any]) -> str:
    ep = " ep" if plan["enable_expert_parallel"] else ""
    return (
        f"{plan['data_parallel_size']} x {plan['gpu']} tp{plan['tensor_parallel_size']} "
        f"pp{plan['pipeline_parallel_size']}{ep}"
    )


def _best_table(best: dict[str, Any]) -> Table:
    table = Table(title="cheapest plan meeting every SLO", title_justify="left")
    table.add_column("")
    table.add_column("value")
    mem, comp = best["memory"], best["compute"]
    rows = [
        ("deployment", f"{_shape(best)} = {best['num_gpus']} GPUs, engine {best['engine']}"),
        ("weights / KV", f"{best['quantization']} / {best['kv_cache_dtype']}"),
        (
            "batching",
            f"max_num_seqs {best['max_num_seqs']}, "
            f"max_num_batched_tokens {best['max_num_batched_tokens']}",
        ),
        ("cost", f"{_usd(best['cost_per_hour_usd'])}/h, {_usd(best['cost_per_day_usd'])}/day"),
        (
            "$/M tokens",
            f"output {_usd(best['cost_per_million_output_tokens_usd'])}, "
            f"input {_usd(best['cost_per_million_input_tokens_usd'])}, "
            f"all {_usd(best['cost_per_million_tokens_usd'])}",
        ),
        (
            "memory axis",
            f"weights {mem['weights_gib_per_device']:.1f} GiB + KV "
            f"{mem['kv_gib_per_device']:.1f} GiB per GPU; {mem['kv_capacity_tokens']:,} KV tokens "
            f"= {mem['max_seqs_at_p50_context']} seqs at p50 context, "
            f"{mem['max_seqs_at_p99_context']} at p99",
        ),
        (
            "compute axis",
            f"decode step {comp['decode_step_ms']:.1f} ms at batch "
            f"{comp['decode_batch']} ({comp['decode_bound']}-bound); bound "
            f"{comp['max_rate_req_s']:.2f} req/s per replica",
        ),
        (
            "closest to breaking",
            f"{best['closest_to_breaking']} (at {best['worst_slo_ratio']:.0%} of its target)",
        ),
        ("launch (each replica)", best["launch_command"]),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def _slo_table(title: str, slo_met: dict[str, Any]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("class", "target", "limit", "predicted", "met"):
        table.add_column(col, justify="right" if col in ("limit", "predicted") else "left")
    for name, cls in slo_met.items():
        for key, t in cls["targets"].items():
            if "target_ms" in t:
                limit, predicted = f"{t['target_ms']:,.0f} ms", f"{_ms(t['predicted_ms'])} ms"
            else:
                limit, predicted = f"{t['target_fraction']:.1%}", f"{t['predicted_fraction']:.1%}"
            table.add_row(name, key, limit, predicted, "yes" if t["met"] else "NO")
    return table


def _pareto_table(plans: list[dict[str, Any]]) -> Table:
    table = Table(title="Pareto front: cost vs p99 TPOT", title_justify="left")
    for col in (
        "deployment",
        "weights",
        "seqs",
        "$/h",
        "$/M out",
        "p99 TTFT ms",
        "p99 TPOT ms",
        "tok/s/GPU",
        "tok/s/user",
    ):
        table.add_column(col, justify="left" if col in ("deployment", "weights") else "right")
    for p in plans:
        table.add_row(
            _shape(p),
            f"{p['quantization']}/{p['kv_cache_dtype']}",
            str(p["max_num_seqs"]),
            _usd(p["cost_per_hour_usd"]),
            _usd(p["cost_per_million_output_tokens_usd"]),
            _ms(p["p99_ttft_ms"]),
            _ms(p["p99_tpot_ms"]),
            f"{p['output_tok_s_per_gpu']:,.0f}",
            "-" if p["tok_s_per_user"] is None else f"{p['tok_s_per_user']:,.1f}",
        )
    return table


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{why.replace('_', ' ')} {n}" for why, n in counts.items()) or "none"


def _cost_lines(data: dict[str, Any]) -> Text:
    lines = [
        f"search: {data['candidates']:,} deployments ({data['replica_configs']} replica "
        f"configurations): {data['evaluated']} simulated ({data['confirmed']} fleets confirmed), "
        f"{data['pruned']} pruned ({_reasons(data['pruned_by'])}), "
        f"{data['infeasible']} infeasible"
        + ("" if data["complete"] else " (stopped at max_search_time_s)"),
    ]
    api, hyb = data["api"], data["hybrid"]
    if api:
        lines.append(
            f"API for the same traffic: {_usd(api['cost_per_hour_usd'])}/h on average, "
            f"{_usd(api['cost_per_day_usd'])}/day"
        )
    if hyb:
        lines.append(
            f"hybrid: {hyb['base_replicas']} base replicas ({hyb['base_gpus']} GPUs) "
            f"self-host {hyb['self_hosted_token_share']:.0%} of the tokens, the API the "
            f"rest: {_usd(hyb['cost_per_day_usd'])}/day ({hyb['split']})"
        )
    stress = data.get("stress")
    if stress:
        top = stress["ratios"][0] if stress["ratios"] else None
        what = f"{stress['breaks_first']} breaks first" if stress["breaks_first"] else ""
        if top and top["ratio"] is not None:
            what += (
                f" (at {top['ratio']:.0%} of its limit)"
                if what
                else (
                    f"every SLO still met; closest: {top['slo']} at {top['ratio']:.0%} of its limit"
                )
            )
        lines.append(f"at {stress['traffic_factor']}x the traffic: {what}")
    lines.append(f"verdict: {data['verdict']}")
    return Text("\n".join(lines))


def plan_tables(data: dict[str, Any]) -> Group:
    parts: list[Any] = []
    if data["best"] is None:
        parts.append(Text("no deployment in the search space meets every SLO", style="bold"))
    else:
        parts += [_best_table(data["best"]), _slo_table("predicted SLOs", data["best"]["slo_met"])]
        parts.append(_pareto_table(data["pareto"]))
    parts.append(_cost_lines(data))
    return Group(*parts)


def diff_tables(diff: dict[str, Any]) -> Group:
    why = Text("why: " + "; ".join(diff["why"]))
    inputs = Table(title="inputs that changed", title_justify="left")
    for col in ("key", "old", "new"):
        inputs.add_column(col)
    for c in diff["inputs"]:
        inputs.add_row(c["key"], str(c["old"]), str(c["new"]))
    best = Table(title="best plan", title_justify="left")
    for col in ("key", "old", "new"):
        best.add_column(col)
    for c in diff["best"]:
        best.add_row(c["key"], str(c["old"]), str(c["new"]))
    cost = diff["cost_per_hour_usd"]
    change = cost["relative_change"]
    tail = "" if change is None else f" ({change:+.1%})"
    lines = Text(
        f"cost per hour: {_usd(cost['old'])} -> {_usd(cost['new'])}{tail}\n"
        f"verdict: {diff['verdict']['old']} -> {diff['verdict']['new']}"
    )
    return Group(why, inputs, best, lines)


@contextmanager
def search_progress(*, enabled: bool) -> Iterator[Callable[[dict[str, int]], None]]:
    """A bar of evaluated + pruned over all replica configurations, on stderr."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda _: None
        return
    columns = (
        TextColumn("planning"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("plan", total=None, detail="")

        def update(counts: dict[str, int]) -> None:
            detail = (
                f"evaluated {counts['evaluated']}, pruned {counts['pruned']}, "
                f"remaining {counts['remaining']}"
            )
            done = counts["evaluated"] + counts["pruned"]
            bar.update(task, total=counts["total"], completed=done, detail=detail)

        yield update
