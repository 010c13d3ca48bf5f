"""The ``validate`` command's output: per case and metric, measured vs predicted and the error,
the error summary per kind of metric, and what each case assumed where its source was silent."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Group
from rich.table import Table

from inferplan.plan.published_runs import RowResult, error_summary
from inferplan.plan.validation import Result

KINDS = ("throughput", "ttft", "tpot", "e2e")


def _kind(metric: str) -> str:
    return "throughput" if "throughput" in metric else metric.split("_")[0]


def validation_json(results: list[Result]) -> dict[str, Any]:
    rows = [
        {
            "case": r.run.case_id,
            "measurement": r.run.label,
            "metric": r.run.metric,
            "measured": r.run.measured,
            "predicted": r.predicted,
            "error": r.error,
        }
        for r in results
    ]
    summary = {}
    for kind in KINDS:
        errors = [abs(r.error) for r in results if _kind(r.run.metric) == kind]
        if errors:
            summary[kind] = {
                "count": len(errors),
                "median_abs_error": statistics.median(errors),
                "max_abs_error": max(errors),
            }
    assumptions: dict[str, list[str]] = {}
    for r in results:  # every distinct assumption of a case's runs, in order
        listed = assumptions.setdefault(r.run.case_id, [])
        listed.extend(a for a in r.run.assumptions if a not in listed)
    return {"results": rows, "summary": summary, "assumptions": assumptions}


def validation_tables(data: dict[str, Any]) -> Group:
    table = Table(title="predicted vs measured (published cases)", title_justify="left")
    for col in ("case", "measurement", "metric", "measured", "predicted", "error"):
        table.add_column(
            col, justify="left" if col in ("case", "measurement", "metric") else "right"
        )
    for row in data["results"]:
        table.add_row(
            row["case"],
            row["measurement"],
            row["metric"],
            f"{row['measured']:,.4g}",
            f"{row['predicted']:,.4g}",
            f"{row['error']:+.1%}",
        )
    summary = Table(title="absolute error by kind of metric", title_justify="left")
    for col in ("kind", "measurements", "median", "max"):
        summary.add_column(col, justify="right")
    for kind, row in data["summary"].items():
        summary.add_row(
            kind, str(row["count"]), f"{row['median_abs_error']:.1%}", f"{row['max_abs_error']:.1%}"
        )
    assumed = Table(title="assumed where the source was silent", title_justify="left")
    assumed.add_column("case")
    assumed.add_column("assumption")
    for case, items in data["assumptions"].items():
        for item in items:
            assumed.add_row(case, item)
    return Group(table, summary, assumed)


def calibration_table(report: dict[str, Any]) -> Group:
    table = Table(title="calibration: error before and after the fit", title_justify="left")
    for col in ("file", "metric", "measured", "before", "after"):
        table.add_column(col, justify="left" if col in ("file", "metric") else "right")
    for row in report["rows"]:
        table.add_row(
            row["file"],
            row["metric"],
            f"{row['measured']:,.4g}",
            f"{row['error_before']:+.1%}",
            f"{row['error_after']:+.1%}",
        )
    constants = Table(title="fitted constants", title_justify="left")
    constants.add_column("constant")
    constants.add_column("value", justify="right")
    for name, value in report["constants"].items():
        constants.add_row(name, f"{value:.4g}")
    return Group(table, constants)


def published_json(results: list[RowResult]) -> dict[str, Any]:
    """Every published row: measured, predicted and error, or the reason it was not simulated."""
    rows = []
    for r in results:
        rows.append(
            {
                "line": r.row.line,
                "case": r.row.case_id,
                "engine": r.row.engine,
                "gpu": r.row.gpu,
                "model": r.row.model,
                "metric": r.row.metric,
                "family": r.row.family,
                "measured": r.row.value,
                "predicted": r.predicted,
                "error": r.error,
                "skipped": r.reason,
            }
        )
    skipped: dict[str, int] = {}
    for r in results:
        if r.reason is not None:
            skipped[r.reason] = skipped.get(r.reason, 0) + 1
    return {
        "summary": error_summary(results),
        "num_rows": len(results),
        "num_predicted": sum(r.predicted is not None for r in results),
        "skipped_reasons": skipped,
        "rows": rows,
    }


def published_tables(data: dict[str, Any]) -> Group:
    """Per case and metric family the median error; the summary; why rows were skipped."""
    by_case: dict[tuple[str, str], list[float]] = {}
    for row in data["rows"]:
        if row["error"] is not None:
            by_case.setdefault((row["case"], row["family"]), []).append(abs(row["error"]))
    cases = Table(title="median |error| per configuration", title_justify="left")
    for col in ("case", "family", "rows", "median |error|"):
        cases.add_column(col, justify="left" if col in ("case", "family") else "right")
    for (case, family), errors in by_case.items():
        cases.add_row(case, family, str(len(errors)), f"{statistics.median(errors):.1%}")
    summary = Table(title="absolute error by metric family", title_justify="left")
    for col in ("family", "n", "median", "p90", "max"):
        summary.add_column(col, justify="right")
    for family, s in data["summary"].items():
        summary.add_row(
            family,
            str(s["n"]),
            f"{s['median_abs_error']:.1%}",
            f"{s['p90_abs_error']:.1%}",
            f"{s['max_abs_error']:.1%}",
        )
    skipped = Table(title="rows not simulated, and why", title_justify="left")
    skipped.add_column("reason")
    skipped.add_column("rows", justify="right")
    for reason, count in data["skipped_reasons"].items():
        skipped.add_row(reason, str(count))
    return Group(cases, summary, skipped)
