"""Parsing one field of one trace row: token counts, times, classes, priorities, prefix hashes.

Owns the rules for what a valid value is, so every reader rejects the same things with the same
words: token counts are whole numbers (``12`` or ``12.0``, as a number or a numeric string) and at
least 1; times are finite and not negative; datetimes are ``YYYY-MM-DD HH:MM:SS[.fraction]``
with up to 9 fractional digits (Azure's traces use 7, which ``datetime.strptime`` cannot read),
kept as integer nanoseconds so that differences are exact. Each parser raises ``InferplanError``
with ``path:line:`` first.
"""

from __future__ import annotations

import math
import re
from datetime import date
from pathlib import Path

from inferplan.errors import InferplanError
from inferplan.limits import MAX_TOKENS
from inferplan.textfile import shown_text as shown_text  # re-exported for the readers

MAX_PRIORITY = 2**53  # exact as a float, inside int64
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def row_error(path: Path, line: int, message: str) -> InferplanError:
    """The one-line error for a bad row: ``path:line: message``."""
    return InferplanError(f"{path}:{line}: {message}")


def _as_number(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            return None
    return None


def _shown(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_tokens(raw: object, column: str, path: Path, line: int) -> int:
    """A token count: a whole number >= 1."""
    value = _as_number(raw)
    if value is None or not math.isfinite(value):
        raise row_error(path, line, f"{column} is {_shown(raw)}, not a number of tokens")
    if value != int(value):
        raise row_error(path, line, f"{column} is {_shown(raw)}, not a whole number of tokens")
    if value < 1:
        raise row_error(path, line, f"{column} is {int(value)}; token counts must be >= 1")
    if value > MAX_TOKENS:
        raise row_error(path, line, f"{column} is {int(value)}; at most {MAX_TOKENS:,} tokens")
    return int(value)


def parse_seconds(raw: object, column: str, units_per_s: float, path: Path, line: int) -> float:
    """A time in seconds from a column in ``1 / units_per_s`` s units: finite and >= 0."""
    value = _as_number(raw)
    if value is None or not math.isfinite(value):
        raise row_error(path, line, f"{column} is {_shown(raw)}, not a finite number")
    if value < 0:
        raise row_error(path, line, f"{column} is {value:g}; arrival times must be >= 0")
    return value / units_per_s  # divide, so 3536999 ms is exactly 3536.999 s


def parse_datetime_ns(raw: object, column: str, path: Path, line: int) -> int:
    """A naive wall-clock datetime as integer nanoseconds since 0001-01-01 (exact)."""
    match = _DATETIME.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if match is not None:
        year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
        try:
            ordinal_day = date(year, month, day).toordinal()
        except ValueError:
            match = None
        else:
            if hour < 24 and minute < 60 and second < 60:
                whole_s = ((ordinal_day * 24 + hour) * 60 + minute) * 60 + second
                return whole_s * 10**9 + int((match.group(7) or "").ljust(9, "0"))
            match = None
    raise row_error(
        path, line, f"{column} is {_shown(raw)}, not a datetime like 2023-11-16 18:17:03.9799600"
    )


def parse_priority(raw: object, column: str, path: Path, line: int) -> int:
    """A priority: any whole number (lower runs first, vLLM's convention); blank means 0."""
    if isinstance(raw, str) and not raw.strip():
        return 0
    value = _as_number(raw)
    if value is None or not math.isfinite(value) or value != int(value):
        raise row_error(path, line, f"{column} is {_shown(raw)}, not a whole number")
    if abs(value) > MAX_PRIORITY:
        raise row_error(path, line, f"{column} is {int(value)}; at most {MAX_PRIORITY:,} in size")
    return int(value)


def parse_class(raw: object, column: str, path: Path, line: int) -> str:
    """A workload class name: a string or number; blank means ``default``."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise row_error(path, line, f"{column} is {_shown(raw)}, not a class name")
    name = str(raw).strip()
    return name or "default"


def parse_hashes(raw: object, column: str, path: Path, line: int) -> tuple[int, ...]:
    """Prefix-block hash ids: a JSON list of whole numbers."""
    is_valid = isinstance(raw, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in raw
    )
    if not is_valid:
        raise row_error(path, line, f"{column} is {_shown(raw)}, not a list of integer block ids")
    assert isinstance(raw, list)
    return tuple(raw)
