"""A user's own load-test table: a CSV with one row per load level, each row one benchmark run.

The columns carry the names ``vllm bench serve`` gives the same numbers in its result files.
A header row comes first; names match case-insensitively and surrounding whitespace is ignored.

- ``request_rate`` (required): requests per second, > 0, or ``inf`` to send every request at
  once (vllm bench's default).
- ``input_len``, ``output_len`` (required): tokens per request, >= 1. The row is re-simulated
  with every request at these lengths; a mean with decimals is rounded to the nearest token.
- ``num_prompts`` (required): the number of requests sent, a whole number >= 1.
- ``max_concurrency`` (optional): the client's limit on requests in flight, a whole number
  >= 1; an empty cell means no limit.
- ``burstiness`` (optional): the shape of vllm bench's gamma arrivals, >= 0.01
  (``limits.MIN_BURSTINESS``); an empty cell means 1.0 (Poisson arrivals).
- Counts are at most ``limits.MAX_NUM_REQUESTS`` and ``num_prompts / request_rate`` at most
  ``limits.MAX_SPAN_S`` (ten years).
- ``mean_ttft_ms``, ``mean_tpot_ms`` (ms) and ``output_throughput`` (output tok/s): the
  measurements. Each column is optional and an empty cell means "not measured", but every row
  needs at least one. A measurement must be > 0: a 0 is refused rather than read as "not
  measured", so a failed load level is not mistaken for a measured one.

Choices: an unknown column is an error that lists the valid ones, since ignoring it would let
a typo (``mean_tpot``) drop a measurement silently; a column given twice is an error; only
``request_rate`` accepts ``inf``, and no column accepts NaN. Blank lines and rows of only empty
cells (a spreadsheet's trailing rows) are skipped. Every other problem is one ``InferplanError``
``file:line: column ...`` that says what the column accepts. Each row's run is named
``file:line``.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from inferplan.errors import InferplanError
from inferplan.limits import MAX_NUM_REQUESTS, MIN_BURSTINESS
from inferplan.plan.benchrecord import (
    MEASUREMENTS,
    BenchRecord,
    BenchSettings,
    read_result_text,
    span_problem,
)
from inferplan.workload.fields import MAX_TOKENS, row_error, shown_text

REQUIRED = ("request_rate", "input_len", "output_len", "num_prompts")

Row = tuple[int, list[str]]  # (line number, the row's cells)


def _is_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _is_token_length(value: float) -> bool:
    return math.isfinite(value) and 1 <= value <= MAX_TOKENS


def _is_count(value: float) -> bool:
    return math.isfinite(value) and 1 <= value <= MAX_NUM_REQUESTS and value == int(value)


def _is_burstiness(value: float) -> bool:
    return MIN_BURSTINESS <= value < math.inf


# Every column: what it accepts (for the message) and the check. NaN fails every check.
COLUMNS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "request_rate": ("requests per second > 0, or inf", lambda value: value > 0),
    "input_len": (f"tokens per request, from 1 to {MAX_TOKENS:,}", _is_token_length),
    "output_len": (f"tokens per request, from 1 to {MAX_TOKENS:,}", _is_token_length),
    "num_prompts": (f"a whole number from 1 to {MAX_NUM_REQUESTS:,}", _is_count),
    "max_concurrency": (
        f"a whole number from 1 to {MAX_NUM_REQUESTS:,}, or empty for no limit",
        _is_count,
    ),
    "burstiness": (
        f"a number >= {MIN_BURSTINESS}, or empty for 1.0 (Poisson arrivals)",
        _is_burstiness,
    ),
    **{key: ("a number > 0, or empty if not measured", _is_positive) for key in MEASUREMENTS},
}


def read_bench_csv(path: Path) -> list[BenchRecord]:
    """One record per row of a load-test table; errors name the file, line and column."""
    rows = _rows(path, read_result_text(path))
    header_line, header = next(rows, (1, []))
    if not header:
        raise row_error(path, 1, f"the file is empty; expected a header of {_valid_columns()}")
    columns = _columns(path, header_line, header)
    records = []
    for line, cells in rows:
        if len(cells) != len(columns):
            raise _field_count_error(path, line, header_line, columns, len(cells))
        records.append(_record(path, line, dict(zip(columns, cells, strict=True))))
    if not records:
        raise row_error(path, header_line, "no rows after the header; give one row per load level")
    return records


def _rows(path: Path, text: str) -> Iterator[Row]:
    """Non-blank rows with their cells stripped; a CSV syntax error names its line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for cells in reader:
            stripped = [cell.strip() for cell in cells]
            if any(stripped):
                yield reader.line_num, stripped
    except csv.Error as err:
        raise row_error(path, reader.line_num, f"not valid CSV ({err})") from None


def _field_count_error(
    path: Path, line: int, header_line: int, columns: list[str], num_cells: int
) -> InferplanError:
    if num_cells < len(columns):
        missing = f"no cell for {', '.join(columns[num_cells:])}"
    else:
        missing = f"{num_cells - len(columns)} cells after {columns[-1]}"
    message = (
        f"{num_cells} fields, but the header on line {header_line} has {len(columns)} ({missing})"
    )
    return row_error(path, line, message)


def _valid_columns() -> str:
    return ", ".join(COLUMNS)


def _columns(path: Path, line: int, header: list[str]) -> list[str]:
    """The header's names, lower-cased; each must be known and the required ones present."""
    names = [name.lower() for name in header]
    for number, name in enumerate(names, start=1):
        if not name:
            raise row_error(path, line, f"column {number} of the header has no name")
        if name not in COLUMNS:
            close = difflib.get_close_matches(name, COLUMNS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            message = f"unknown column '{shown_text(name)}'{hint}; valid: {_valid_columns()}"
            raise row_error(path, line, message)
        if names.index(name) != number - 1:
            raise row_error(path, line, f"column {name!r} appears twice")
    for name in REQUIRED:
        if name not in names:
            message = f"missing column {name!r}; required: {', '.join(REQUIRED)}"
            raise row_error(path, line, message)
    if not any(name in MEASUREMENTS for name in names):
        message = f"no measurement column; give at least one of {', '.join(MEASUREMENTS)}"
        raise row_error(path, line, message)
    return names


def _value(path: Path, line: int, column: str, cell: str) -> float | None:
    """The cell's number, or None for an empty cell of an optional column."""
    expected, is_valid = COLUMNS[column]
    if not cell:
        if column in REQUIRED:
            raise row_error(path, line, f"{column} is empty; expected {expected}")
        return None
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not is_valid(value):
        raise row_error(path, line, f"{column} is '{shown_text(cell, 40)}'; expected {expected}")
    return value


def _record(path: Path, line: int, cells: dict[str, str]) -> BenchRecord:
    values = {column: _value(path, line, column, cell) for column, cell in cells.items()}
    measured = {
        metric: value * scale
        for key, (metric, scale) in MEASUREMENTS.items()
        if (value := values.get(key)) is not None
    }
    if not measured:
        empty = ", ".join(column for column in cells if column in MEASUREMENTS)
        message = f"no measurement ({empty} empty); each row needs at least one of them"
        raise row_error(path, line, message)
    concurrency = values.get("max_concurrency")
    burstiness = values.get("burstiness")
    problem = span_problem(int(_required(values, "num_prompts")), _required(values, "request_rate"))
    if problem is not None:
        raise row_error(path, line, f"num_prompts and request_rate: {problem}")
    settings = BenchSettings(
        num_requests=int(_required(values, "num_prompts")),
        input_tokens=round(_required(values, "input_len")),
        output_tokens=round(_required(values, "output_len")),
        request_rate=_required(values, "request_rate"),
        burstiness=1.0 if burstiness is None else burstiness,
        max_concurrency=None if concurrency is None else int(concurrency),
    )
    return BenchRecord(f"{path}:{line}", settings, measured)


def _required(values: dict[str, float | None], column: str) -> float:
    value = values[column]
    assert value is not None, column  # _value refuses an empty required cell
    return value
