"""Reading a request trace file (CSV or JSONL, optionally gzipped) into a ``Workload``.

Owns ``load_trace``: read the bytes, recognise the format from content (``trace_formats.py``),
parse every row (``fields.py``) and build the columns. Modelling choices:

- Rows out of arrival order are sorted with a stable sort (ties keep their file order) and the
  ``Workload`` notes say how many moved; that is not an error.
- Datetime arrivals (Azure) become seconds after the earliest request, which is the first row in
  a sorted file. Numeric arrivals are kept as given (Mooncake's ms become s).
- Formats without arrival times put every request at 0 s (``request_rate=inf`` in vLLM's terms);
  ``synthetic.re_time`` gives them arrivals.
- Blank lines are skipped. Every other problem (missing column, non-numeric or non-positive
  token count, empty file, unknown format) is an ``InferplanError`` naming ``file:line``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from inferplan.errors import InferplanError
from inferplan.limits import MAX_SPAN_S, span_years
from inferplan.textfile import parse_json, read_user_text
from inferplan.workload import fields
from inferplan.workload.prefixes import HASH_BLOCK_TOKENS, session_hashes
from inferplan.workload.request import Workload
from inferplan.workload.trace_formats import (
    TRACE_FORMATS,
    TraceFormat,
    TraceKind,
    accepted_formats,
    detect_format,
)

Record = dict[str, object]  # one row, keys lower-cased


def load_trace(path: str | Path, *, trace_format: str | None = None) -> Workload:
    """Read a trace file; its format is detected from the header or keys unless given by name."""
    path = Path(path)
    text = _read_text(path)
    kind = _sniff_kind(path, text)
    header_line, keys, records = (
        _csv_records(path, text) if kind == "csv" else _jsonl_records(path, text)
    )
    fmt = _choose_format(path, kind, header_line, keys, trace_format)
    if kind == "csv":
        _check_columns(path, header_line, keys, fmt)
    columns = _Columns(fmt, path)
    for line, record in records:
        columns.add(line, record)
    if not columns.lines:
        raise fields.row_error(path, header_line, "no requests in the file (only a header)")
    return columns.to_workload()


def _read_text(path: Path) -> str:
    return read_user_text(path, "trace", gunzip=True, hint="; a trace is CSV or JSON lines")


def _sniff_kind(path: Path, text: str) -> TraceKind:
    stripped = text.lstrip()
    if not stripped:
        raise fields.row_error(
            path, 1, f"the file is empty; accepted formats: {accepted_formats()}"
        )
    line = text[: len(text) - len(stripped)].count("\n") + 1
    if stripped[0] == "[":
        raise fields.row_error(path, line, "a JSON array; write one JSON object per line (JSONL)")
    return "jsonl" if stripped[0] == "{" else "csv"


def _csv_records(path: Path, text: str) -> tuple[int, list[str], Iterator[tuple[int, Record]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] = []
    try:
        while not header:
            header = [name.strip() for name in next(reader)]
            header = header if any(header) else []
    except csv.Error as err:
        raise fields.row_error(path, reader.line_num, f"not valid CSV ({err})") from None
    except StopIteration:
        raise fields.row_error(path, 1, "no CSV header (only empty fields)") from None
    header_line = reader.line_num
    if len(set(header)) != len(header):
        twice = next(name for name in header if header.count(name) > 1)
        raise fields.row_error(path, header_line, f"column {twice!r} is given twice")
    lowered = list(_lowered(path, header_line, dict.fromkeys(header)))

    def rows() -> Iterator[tuple[int, Record]]:
        try:
            for row in reader:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != len(header):
                    message = (
                        f"{len(row)} fields, but the header on line {header_line} has {len(header)}"
                    )
                    raise fields.row_error(path, reader.line_num, message)
                yield reader.line_num, dict(zip(lowered, row, strict=True))
        except csv.Error as err:
            raise fields.row_error(path, reader.line_num, f"not valid CSV ({err})") from None

    return header_line, header, rows()


def _jsonl_records(path: Path, text: str) -> tuple[int, list[str], Iterator[tuple[int, Record]]]:
    lines = text.split("\n")
    first = next(i for i, raw in enumerate(lines, start=1) if raw.strip())

    def parse(line: int, raw: str) -> Record:
        value = parse_json(raw, str(path), first_line=line)
        if not isinstance(value, dict):
            raise fields.row_error(path, line, "expected one JSON object per line")
        return _lowered(path, line, value)

    def rows() -> Iterator[tuple[int, Record]]:
        for line, raw in enumerate(lines, start=1):
            if raw.strip():
                yield line, parse(line, raw)

    return first, list(parse(first, lines[first - 1])), rows()


def _lowered(path: Path, line: int, record: dict[str, object]) -> Record:
    """The record with lower-cased keys; two keys that differ only in case are refused
    (which one a format would read is ambiguous)."""
    out: Record = {}
    for key, value in record.items():
        name = str(key).lower()
        if name in out:
            raise fields.row_error(path, line, f"{key!r} is given twice (names ignore case)")
        out[name] = value
    return out


def _choose_format(
    path: Path, kind: TraceKind, line: int, keys: list[str], name: str | None
) -> TraceFormat:
    if name is not None:
        fmt = TRACE_FORMATS.get(name)
        if fmt is None:
            raise InferplanError(
                f"unknown trace format {name!r}; one of: {', '.join(TRACE_FORMATS)}"
            )
        if fmt.kind != kind:
            raise fields.row_error(
                path, line, f"the {name} format is {fmt.kind.upper()}, this file is not"
            )
        return fmt
    fmt = detect_format(kind, keys)
    if fmt is None:
        what = "header" if kind == "csv" else "keys"
        shown = fields.shown_text(",".join(keys)) if keys else "(none)"
        message = f"unknown trace format ({what}: {shown}); accepted formats: {accepted_formats()}"
        raise fields.row_error(path, line, message)
    return fmt


def _check_columns(path: Path, line: int, header: list[str], fmt: TraceFormat) -> None:
    present = {name.lower() for name in header}
    for key in fmt.required_keys:
        if key.lower() not in present:
            message = (
                f"missing column {key!r} for the {fmt.name} format, which needs "
                f"{','.join(fmt.required_keys)} (header: {fields.shown_text(','.join(header))})"
            )
            raise fields.row_error(path, line, message)


class _Columns:
    """Accumulates parsed rows of one trace file, then builds the sorted ``Workload``."""

    def __init__(self, fmt: TraceFormat, path: Path) -> None:
        self.fmt = fmt
        self.path = path
        self.lines: list[int] = []
        self.arrivals_s: list[float] = []
        self.arrival_ticks_ns: list[int] = []  # datetime arrivals, exact
        self.input_tokens: list[int] = []
        self.output_tokens: list[int] = []
        self.class_names: list[str] = []
        self.priorities: list[int] = []  # 0 where a row has none, vLLM's default
        self.has_priorities = False
        self.prefix_hashes: list[tuple[int, ...]] = []
        self.session_ids: list[str | None] = []  # None: a row without a session

    def add(self, line: int, record: Record) -> None:
        fmt, path = self.fmt, self.path
        raw_input = self._get(line, record, fmt.input_key)
        self.input_tokens.append(fields.parse_tokens(raw_input, fmt.input_key, path, line))
        raw_output = self._get(line, record, fmt.output_key)
        self.output_tokens.append(fields.parse_tokens(raw_output, fmt.output_key, path, line))
        if fmt.arrival_key is not None:
            self._add_arrival(line, self._get(line, record, fmt.arrival_key))
        if fmt.class_key is not None:
            raw = record.get(fmt.class_key.lower(), "default")
            self.class_names.append(fields.parse_class(raw, fmt.class_key, path, line))
        if fmt.priority_key is not None:
            raw = record.get(fmt.priority_key.lower())
            self.has_priorities |= raw is not None
            priority = (
                0 if raw is None else fields.parse_priority(raw, fmt.priority_key, path, line)
            )
            self.priorities.append(priority)
        if fmt.prefix_hash_key is not None:
            self._add_hashes(line, record, fmt.prefix_hash_key)
        if fmt.session_key is not None:
            raw = record.get(fmt.session_key.lower())
            self.session_ids.append(None if raw is None or str(raw) == "" else str(raw))
        self.lines.append(line)

    def _get(self, line: int, record: Record, key: str) -> object:
        if key.lower() not in record:
            needs = ",".join(self.fmt.required_keys)
            message = f"missing key {key!r} for the {self.fmt.name} format, which needs {needs}"
            raise fields.row_error(self.path, line, message)
        return record[key.lower()]

    def _add_arrival(self, line: int, raw: object) -> None:
        key = self.fmt.arrival_key
        assert key is not None
        if self.fmt.is_arrival_datetime:
            self.arrival_ticks_ns.append(fields.parse_datetime_ns(raw, key, self.path, line))
        else:
            units_per_s = self.fmt.arrival_units_per_s
            self.arrivals_s.append(fields.parse_seconds(raw, key, units_per_s, self.path, line))

    def _add_hashes(self, line: int, record: Record, key: str) -> None:
        has_hashes = key.lower() in record
        if self.lines and has_hashes != bool(self.prefix_hashes):
            first = self.lines[0]
            if has_hashes:
                message = f"has {key!r} but line {first} does not; give it on every line or none"
            else:
                message = f"lacks {key!r}, which line {first} has; give it on every line or none"
            raise fields.row_error(self.path, line, message)
        if has_hashes:
            self.prefix_hashes.append(
                fields.parse_hashes(record[key.lower()], key, self.path, line)
            )

    def _arrival_s(self) -> tuple[np.ndarray, tuple[str, ...]]:
        num_requests = len(self.lines)
        if self.fmt.arrival_key is None:
            note = "no arrival times in the trace: every request arrives at 0 s"
            return np.zeros(num_requests), (note,)
        if not self.fmt.is_arrival_datetime:
            return np.asarray(self.arrivals_s, dtype=np.float64), ()
        earliest_ns = min(self.arrival_ticks_ns)  # Python ints: absolute ns overflow int64
        relative_ns = np.asarray([t - earliest_ns for t in self.arrival_ticks_ns], dtype=np.int64)
        note = f"arrival_s counts from the earliest {self.fmt.arrival_key} in the file"
        return relative_ns / 1e9, (note,)

    def _check_span(self, arrival_s: np.ndarray) -> None:
        """Arrivals may be large (Unix-epoch seconds) but must span at most MAX_SPAN_S."""
        first, last = int(np.argmin(arrival_s)), int(np.argmax(arrival_s))
        span_s = float(arrival_s[last] - arrival_s[first])
        if span_s > MAX_SPAN_S:
            message = (
                f"arrivals span {span_years(span_s)} (line {self.lines[first]} at "
                f"{arrival_s[first]:g} s, line {self.lines[last]} at {arrival_s[last]:g} s); "
                f"a trace may span at most {span_years(MAX_SPAN_S)} (MAX_SPAN_S)"
            )
            raise fields.row_error(self.path, self.lines[last], message)

    def to_workload(self) -> Workload:
        arrival_s, notes = self._arrival_s()
        self._check_span(arrival_s)
        order = np.argsort(arrival_s, kind="stable")
        num_moved = int(np.count_nonzero(order != np.arange(len(order))))
        if num_moved:
            notes += (f"{num_moved} rows were out of arrival order; sorted (stable)",)
        names = tuple(dict.fromkeys(self.class_names)) or ("default",)
        index = {name: i for i, name in enumerate(names)}
        class_ids = np.asarray([index[name] for name in self.class_names], dtype=np.int64)
        if not self.class_names:
            class_ids = np.zeros(len(order), dtype=np.int64)
        priorities = (
            np.asarray(self.priorities, dtype=np.int64)[order] if self.has_priorities else None
        )
        hashes = tuple(self.prefix_hashes[i] for i in order) if self.prefix_hashes else None
        input_tokens = np.asarray(self.input_tokens, dtype=np.int64)[order]
        output_tokens = np.asarray(self.output_tokens, dtype=np.int64)[order]
        block_tokens = self.fmt.prefix_block_tokens
        has_sessions = any(s is not None for s in self.session_ids)
        if has_sessions:
            sessions = [self.session_ids[i] for i in order]
            hashes = session_hashes(sessions, input_tokens, output_tokens)
            block_tokens = HASH_BLOCK_TOKENS
            notes += (f"{len(set(sessions) - {None})} sessions: turns share their prefixes",)
        return Workload(
            arrival_s=arrival_s[order],
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            class_ids=class_ids[order],
            class_names=names,
            priorities=priorities,
            prefix_hashes=hashes,
            prefix_block_tokens=block_tokens if hashes is not None else None,
            source=self.path.name,
            notes=(f"format {self.fmt.name}", *notes),
            prefix_hashes_cover_output=has_sessions,
        )
