"""The one reader of a user's files: text, JSON and YAML, each with one-line errors that name it.

Every file a user hands inferplan (model ``config.json``, GPU YAML, ``--calibration`` YAML,
``--operator-table`` CSV, traces, ServeGen folders, benchmark results) is read here, so every
one of them gets the same answers to the same mistakes: a missing path, an empty path, a folder,
an unreadable or oversized file, bytes that are not UTF-8 (a UTF-8 byte-order mark, which a
spreadsheet's export may start with, is accepted), JSON or YAML that is malformed, nested deeper
than Python's parser can recurse, holds an integer too long to convert (Python refuses more
than 4,300 digits) or gives one key twice in an object. Each is an ``InferplanError`` naming
``file:line`` where the line is known, else the file.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any

import yaml

from inferplan.errors import InferplanError
from inferplan.limits import MAX_USER_FILE_BYTES

_LONG_DIGITS = re.compile(r"\d{4300,}")
# libyaml's scanner when PyYAML has it: it refuses nesting deeper than 1,000 at once, where the
# pure-Python scanner's work grows with the square of the depth (5,000 brackets: 1 s, or 2.5 s
# under hypothesis's raised recursion limit) before a RecursionError. Same constructor either way.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def path_exists(path: Path) -> bool:
    """``path.exists()``, False where the name cannot be a path (too long, a NUL byte)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def path_is_dir(path: Path) -> bool:
    """``path.is_dir()``, False where the name cannot be a path (too long, a NUL byte)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def read_user_bytes(path: Path, what: str) -> bytes:
    """The file's bytes; a missing, empty, folder, unreadable or oversized path is one line."""
    if not str(path).strip():
        raise InferplanError(f"an empty path was given for the {what} file")
    try:
        if path.is_dir():
            raise InferplanError(f"{path}: is a folder, not a {what} file")
        size = path.stat().st_size
        if size > MAX_USER_FILE_BYTES:
            raise InferplanError(
                f"{path}: {size:,} bytes; a {what} file may hold at most "
                f"{MAX_USER_FILE_BYTES:,} (MAX_USER_FILE_BYTES)"
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise InferplanError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise InferplanError(f"{path}: is a folder, not a {what} file") from None
    except OSError as err:
        raise InferplanError(f"{path}: cannot read the {what} file ({err.strerror})") from None
    except ValueError:  # a NUL byte in the path
        raise InferplanError(f"{path!r}: not a valid path for the {what} file") from None


def read_user_text(path: Path, what: str, *, gunzip: bool = False, hint: str = "") -> str:
    """The file's text, UTF-8 with or without a byte-order mark; ``gunzip`` also takes
    gzip-compressed files. A missing, unreadable, damaged or non-UTF-8 file is one line naming
    it as ``what`` (``hint`` follows the UTF-8 error)."""
    data = read_user_bytes(path, what)
    if gunzip and data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            raise InferplanError(f"{path}: a damaged gzip file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InferplanError(f"{path}:{line}: not UTF-8 text{hint}") from None


def shown_text(text: str, max_chars: int = 120) -> str:
    """User text for a one-line message: control characters escaped, long text cut."""
    escaped = repr(text)[1:-1]
    return escaped if len(escaped) <= max_chars else escaped[: max_chars - 3] + "..."


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _line_of(text: str, pattern: re.Pattern[str] | str, nth: int = 1) -> int:
    """1-based line of the ``nth`` match of ``pattern`` in ``text`` (1 when absent)."""
    matches = re.finditer(pattern, text)
    for count, match in enumerate(matches, start=1):
        if count == nth:
            return text.count("\n", 0, match.start()) + 1
    return 1


def parse_json(text: str, where: str, *, first_line: int = 1, expected: str = "") -> Any:
    """``text`` as JSON; errors start ``where:line:`` (``first_line`` is the text's first line
    in its file, for one line of a JSONL file). ``expected`` follows the syntax error."""
    suffix = f"; expected {expected}" if expected else ""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        line = first_line + err.lineno - 1
        raise InferplanError(f"{where}:{line}: not valid JSON ({err.msg}){suffix}") from None
    except _DuplicateKeyError as dup:
        line = first_line - 1 + _line_of(text, re.escape(json.dumps(dup.key)), nth=2)
        raise InferplanError(f"{where}:{line}: key {dup.key!r} is given twice") from None
    except RecursionError:
        raise InferplanError(f"{where}:{first_line}: JSON nested too deeply") from None
    except ValueError:  # an integer of more than 4,300 digits
        line = first_line - 1 + _line_of(text, _LONG_DIGITS)
        raise InferplanError(f"{where}:{line}: a number with more than 4,300 digits") from None


def read_user_json(path: Path, what: str, *, expected: str = "") -> Any:
    """A JSON file's value, read by ``read_user_text`` and ``parse_json``."""
    return parse_json(read_user_text(path, what), str(path), expected=expected)


def read_user_yaml(path: Path, what: str) -> Any:
    """A YAML file's value (``yaml.safe_load``), with the same one-line errors."""
    text = read_user_text(path, what)
    try:
        return yaml.load(text, Loader=_YAML_LOADER)  # a safe loader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None)
        detail = f" ({problem})" if problem else ""
        raise InferplanError(f"{where}: not valid YAML{detail}") from None
    except RecursionError:
        raise InferplanError(f"{path}: YAML nested too deeply") from None
    except ValueError:  # an integer of more than 4,300 digits
        number_line = _line_of(text, _LONG_DIGITS)
        message = f"{path}:{number_line}: a number with more than 4,300 digits"
        raise InferplanError(message) from None
