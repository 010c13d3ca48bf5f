"""The ``plan`` command: ``inferplan plan REQUEST`` and ``inferplan plan diff OLD NEW``.

Thin, like the rest of the CLI: read the request (or a plan file's request), run the search
(``plan.search``) on local processes or Ray with the SQLite cache, print the answer (tables, or
``--json``), and optionally write the plan file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from inferplan.errors import InferplanError
from inferplan.plan.cache import EvaluationCache
from inferplan.plan.executor import make_executor
from inferplan.plan.planfile import (
    diff_plans,
    is_plan_document,
    plan_document,
    read_plan,
    write_plan,
)
from inferplan.plan.request import PlanRequest, check_names, load_request, parse_request
from inferplan.plan.result import build_output
from inferplan.plan.search import run_search
from inferplan.report.console import console
from inferplan.report.plan import diff_tables, plan_tables, search_progress
from inferplan.textfile import read_user_text

DEFAULT_CACHE = ".inferplan-cache/plan.sqlite"


class _DefaultToRun(click.Group):
    """``plan FILE`` runs the search; ``plan diff OLD NEW`` is the one subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_any_request(path: Path) -> PlanRequest:
    """A request file, or a plan file (re-run its request)."""
    text = read_user_text(path, "plan request")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if is_plan_document(data):
        read_plan(path)
        request = parse_request(data["request"], f"{path}: request")
        check_names(request, f"{path}: request")
        return request
    request = load_request(path)
    check_names(request, str(path), text)
    return request


@click.group(cls=_DefaultToRun, invoke_without_command=False)
def plan() -> None:
    """Find the cheapest deployment that meets every class's SLOs; compare it with an API.

    `inferplan plan REQUEST.yaml` searches; `inferplan plan diff OLD NEW` compares two plan
    files. See docs/planning.md for the request file.
    """


@plan.command(name="run", hidden=True)
@click.argument("request_file", metavar="REQUEST", type=click.Path(path_type=Path))
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Local worker processes (default: the CPU count)",
)
@click.option(
    "--ray-address",
    default=None,
    help="Run evaluations on Ray ('local' starts one here); needs pip install 'inferplan[ray]'",
)
@click.option("--cache", "cache_path", default=DEFAULT_CACHE, show_default=True)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the evaluation cache")
@click.option("--output", "-o", default=None, help="Write the plan file (YAML) here")
@click.option("--max-search-time-s", type=float, default=None, help="Override the file's limit")
@click.option("--json", "json_out", is_flag=True, help="Machine-readable output on stdout")
def run(
    request_file: Path,
    workers: int | None,
    ray_address: str | None,
    cache_path: str,
    no_cache: bool,
    output: str | None,
    max_search_time_s: float | None,
    json_out: bool,
) -> None:
    """Search REQUEST (a plan request file, or a plan file to re-run)."""
    request = read_any_request(request_file)
    if max_search_time_s is not None:
        if not max_search_time_s > 0:
            raise InferplanError(f"--max-search-time-s: must be > 0, got {max_search_time_s}")
        request = request.model_copy(update={"max_search_time_s": max_search_time_s})
    num_workers = workers if workers is not None else (os.cpu_count() or 1)
    if num_workers < 1:
        raise InferplanError(f"--workers: must be >= 1, got {num_workers}")
    cache = EvaluationCache(None if no_cache else Path(cache_path))
    with cache, search_progress(enabled=not json_out) as progress:
        result = run_search(
            request,
            lambda ctx: make_executor(ctx, num_workers, ray_address),
            cache,
            progress,
        )
    data = build_output(result)
    if output is not None:
        write_plan(Path(output), plan_document(request, data))
    if json_out:
        _print_json(data)
    else:
        console().print(plan_tables(data))
    if data["best"] is None:
        raise InferplanError("no deployment in the search space meets every SLO", exit_code=1)


@plan.command()
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--json", "json_out", is_flag=True, help="Machine-readable output on stdout")
def diff(old: Path, new: Path, json_out: bool) -> None:
    """What changed between two plan files, and why."""
    result = diff_plans(read_plan(old), read_plan(new))
    if json_out:
        _print_json(result)
    else:
        console().print(diff_tables(result))
