"""A user's own measurements as validation runs: vllm bench JSON files and CSV tables.

A RESULT path ending in ``.csv`` (any case) is a table of load levels, one run per row
(``benchcsv.py``); any other path is a ``vllm bench serve --save-result`` JSON file, one run.
Both become ``BenchRecord``s and from there take one path: each is re-simulated with its own
settings and compared on each of its measurements.

A JSON result records the run's settings (``num_prompts``, ``request_rate``, ``burstiness``,
``max_concurrency``) and totals (``completed``, ``total_input_tokens``, ``total_output_tokens``)
but not each request's lengths, so the run is re-simulated with every request at the mean
input and output length (exact for ``--dataset-name random`` with ``--random-range-ratio 0``,
vLLM's default). The measurements taken from it are ``output_throughput``, ``mean_ttft_ms`` and
``mean_tpot_ms``, each when present and positive (vllm bench writes 0 for what it did not
measure).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from inferplan.errors import InferplanError
from inferplan.limits import MAX_NUM_REQUESTS, MAX_TOKENS, MIN_BURSTINESS
from inferplan.plan.benchcsv import read_bench_csv
from inferplan.plan.benchrecord import (
    MEASUREMENTS,
    BenchRecord,
    BenchSettings,
    read_result_text,
    span_problem,
)
from inferplan.plan.validation import Deployment, Run
from inferplan.textfile import parse_json, shown_text
from inferplan.workload import synthetic
from inferplan.workload.request import Workload


def _number(data: dict[str, Any], key: str, path: Path) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InferplanError(
            f"{path}: key {key!r} must be a finite number, got {shown_text(repr(value), 40)}"
        )
    return float(value)


def _in_range(data: dict[str, Any], key: str, path: Path, low: float, high: float) -> float:
    value = _number(data, key, path)
    if not low <= value <= high:
        raise InferplanError(f"{path}: key {key!r} is {value:g}; expected {low:g} to {high:,g}")
    return value


def _whole(data: dict[str, Any], key: str, path: Path) -> int:
    value = _number(data, key, path)
    if value != int(value) or not 1 <= value <= MAX_NUM_REQUESTS:
        raise InferplanError(
            f"{path}: key {key!r} is {value:g}; expected a whole number from 1 to "
            f"{MAX_NUM_REQUESTS:,} (MAX_NUM_REQUESTS)"
        )
    return int(value)


def _mean_tokens(data: dict[str, Any], key: str, path: Path, completed: int) -> int:
    """A per-request mean length from a total, rounded; 1 to MAX_TOKENS tokens."""
    mean = round(_number(data, key, path) / completed)
    if not 1 <= mean <= MAX_TOKENS:
        raise InferplanError(
            f"{path}: key {key!r} gives {mean:,} tokens per request over {completed} completed; "
            f"expected 1 to {MAX_TOKENS:,}"
        )
    return mean


def _settings(data: dict[str, Any], path: Path) -> BenchSettings:
    """How the run was sent; every value checked here and named by its key, so nothing later
    blames a flag the user never typed."""
    completed = _whole(data, "completed", path)
    rate = data.get("request_rate", "inf")
    request_rate = math.inf
    if rate not in ("inf", None):
        request_rate = _in_range(data, "request_rate", path, 0, math.inf)
        if request_rate == 0:
            raise InferplanError(f"{path}: key 'request_rate' is 0; expected > 0 req/s or \"inf\"")
        problem = span_problem(completed, request_rate)
        if problem is not None:
            raise InferplanError(f"{path}: keys 'completed' and 'request_rate': {problem}")
    burstiness = 1.0
    if data.get("burstiness") is not None:
        burstiness = _in_range(data, "burstiness", path, MIN_BURSTINESS, math.inf)
    concurrency = data.get("max_concurrency")
    return BenchSettings(
        num_requests=completed,
        input_tokens=_mean_tokens(data, "total_input_tokens", path, completed),
        output_tokens=_mean_tokens(data, "total_output_tokens", path, completed),
        request_rate=request_rate,
        burstiness=burstiness,
        max_concurrency=None if concurrency is None else _whole(data, "max_concurrency", path),
    )


def read_bench_result(path: Path) -> BenchRecord:
    """Settings and measurements of one result file; errors name the file and the key."""
    data = parse_json(read_result_text(path), str(path))
    if not isinstance(data, dict):
        raise InferplanError(f"{path}: expected a JSON object (a vllm bench serve result)")
    settings = _settings(data, path)
    measured = {}
    for key, (metric, scale) in MEASUREMENTS.items():
        if key in data and data[key] is not None and _number(data, key, path) > 0:
            measured[metric] = _number(data, key, path) * scale
    if not measured:
        raise InferplanError(f"{path}: none of {', '.join(MEASUREMENTS)} is present")
    return BenchRecord(str(path), settings, measured)


def read_bench_records(path: Path) -> list[BenchRecord]:
    """The runs in one RESULT path: every row of a ``.csv`` table, or the one JSON result."""
    if path.suffix.lower() == ".csv":
        return read_bench_csv(path)
    return [read_bench_result(path)]


def bench_workload(settings: BenchSettings, seed: int = 0) -> Workload:
    """Every request at the mean lengths, arrivals as ``vllm bench serve`` sends them."""
    n = settings.num_requests
    rng = np.random.default_rng(seed)
    return Workload(
        arrival_s=synthetic.arrival_times_s(n, settings.request_rate, settings.burstiness, rng),
        input_tokens=np.full(n, settings.input_tokens, dtype=np.int64),
        output_tokens=np.full(n, settings.output_tokens, dtype=np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
        source="vllm-bench-result",
    )


def record_runs(record: BenchRecord, deployment: Deployment) -> list[Run]:
    """One validation run per measurement of the record, all on the record's workload."""
    settings = record.settings
    assumptions = (
        f"every request at the mean lengths ({settings.input_tokens} in, "
        f"{settings.output_tokens} out)",
    )
    workload = partial(bench_workload, settings)
    return [
        Run(
            record.run_id,
            metric,
            metric,
            value,
            deployment,
            workload,
            assumptions,
            settings.max_concurrency,
        )
        for metric, value in record.measured.items()
    ]


def bench_runs(path: Path, deployment: Deployment) -> list[Run]:
    """One validation run per measurement in the file (per row and measurement for a CSV)."""
    return [run for record in read_bench_records(path) for run in record_runs(record, deployment)]
