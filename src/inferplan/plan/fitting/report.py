"""What the fit prints (error tables by GPU, engine, model family, parallelism, metric, release)
and the files it writes (the family files, the release classes' host costs)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from inferplan.perf.efficiency import Efficiency
from inferplan.plan.fitting.served_fit import served_engine
from inferplan.plan.published import PublishedRow
from inferplan.plan.published_runs import RowResult, errors_by


def engine_label(row: PublishedRow) -> str:
    """The served engine as the report names it, with the row's family."""
    return f"{served_engine(row)} {row.family}"


def model_family(row: PublishedRow) -> str:
    name = row.model.split("/")[-1].lower()
    for prefix in ("llama-4", "llama-3", "mixtral", "mistral", "qwen3", "deepseek", "gpt-oss"):
        if name.startswith(prefix) or prefix in name:
            return prefix
    return name


def parallelism(row: PublishedRow) -> str:
    """As ``scripts/residuals_published.py --by parallel`` spells it."""
    return f"tp{row.tp} pp{row.pp} ep{row.ep or 1}{' adp' if row.attention_dp else ''}"


def engine_version(row: PublishedRow) -> str:
    """The row's engine and release as the table states it (the main revision shortened)."""
    return f"{row.engine} {row.engine_version.split(' ')[0]}"


def table(results: list[RowResult], key: Callable[[PublishedRow], str], title: str) -> str:
    lines = [f"| {title} | n | median | p90 | max |", "|---|---:|---:|---:|---:|"]
    for name, signed in errors_by(results, key).items():
        e = np.abs(signed)
        lines.append(
            f"| {name} | {e.size} | {np.median(e):.1%} | {np.percentile(e, 90):.1%} "
            f"| {e.max():.1%} |"
        )
    return "\n".join(lines)


def report(results: list[RowResult], label: str) -> str:
    parts = [f"### {label}"]
    errors = [abs(r.error) for r in results if r.error is not None]
    if errors:
        parts.append(
            f"throughput rows {len(errors)}: median {statistics.median(errors):.1%}, "
            f"p90 {np.percentile(errors, 90):.1%}, max {max(errors):.1%}"
        )
    parts.append(table(results, lambda r: r.gpu, "GPU"))
    parts.append(table(results, lambda r: r.engine, "engine"))
    parts.append(table(results, model_family, "model family"))
    parts.append(table(results, parallelism, "parallelism"))
    parts.append(table(results, lambda r: r.metric, "metric"))
    parts.append(table(results, engine_version, "engine release"))
    return "\n\n".join(parts)


def served_report(results: list[RowResult], label: str) -> str:
    return f"### {label}\n\n" + table(results, engine_label, "served engine, family")


def family_yaml(
    family: str,
    eff: Efficiency,
    results: list[RowResult],
    fitted_keys: list[str],
    served: int = 0,
) -> str:
    errors = [abs(r.error) for r in results if r.error is not None]
    rows = f"# to the {len(errors)} closed-form throughput rows of the bundled published table"
    if served:
        rows = f"# --served to the {len(errors)} closed-form and {served} served rows of the table"
    head = [
        f"# Efficiency constants for the {family} family, fitted by scripts/fit_published.py",
        rows,
        "# (plan/data/published.csv) of this family, with the engine releases' host costs",
        f"# (plan/data/published_cpu_costs.yaml). Fitted: {', '.join(fitted_keys)}; the others",
        "# keep their previous values. docs/validation.md has the cross-validated errors.",
        f"# In-sample median |error| {statistics.median(errors):.4f} over {len(errors)} rows",
    ]
    body = [f"{name}: {float(f'{value:.4g}')}" for name, value in eff.to_dict().items()]
    return "\n".join(head + body) + "\n"


def costs_yaml(costs: dict[str, dict[str, float]], served: bool = False) -> str:
    lines = [
        "# Host-side costs per engine release, fitted by scripts/fit_published.py to the",
        "# closed-form throughput rows of the bundled published table, jointly with each GPU",
        "# family's fractions: TensorRT-LLM's C++ engine flow (0.14, 0.17) and its PyTorch",
        "# backend (0.19 on). They replace the family's step_overhead_s and per_seq_overhead_s.",
        "# routing_skew: the Zipf exponent of expert popularity where a run states no routing",
        "# (perf/moe.py default_routing), fitted on the same rows. grace_host (where given):",
        "# the release's host work on a Grace-hosted part (GB200, GB300) against an x86",
        "# server's (perf/overlap.py on_host; --overlap-scheduler, not committed).",
    ]
    if served:
        lines.append("# --served: with the served runs' rows (TensorRT-LLM 0.14 on Triton's here).")
    for release, values in sorted(costs.items()):
        lines.append(f"{release}:")
        lines.extend(f"  {k}: {float(f'{v:.4g}')}" for k, v in values.items())
    return "\n".join(lines) + "\n"
