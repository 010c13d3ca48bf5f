"""Reading a user's text file (trace, benchmark result) with one-line errors that name it."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from inferplan.errors import InferplanError


def read_user_text(path: Path, what: str, *, gunzip: bool = False, hint: str = "") -> str:
    """The file's text, UTF-8 with or without a byte-order mark (a spreadsheet's export may
    start with one); ``gunzip`` also takes gzip-compressed files. A missing, unreadable,
    damaged or non-UTF-8 file is one line naming it as ``what`` (``hint`` follows the UTF-8
    error)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InferplanError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise InferplanError(f"{path}: is a folder, not a {what} file") from None
    except OSError as err:
        raise InferplanError(f"{path}: cannot read the {what} file ({err.strerror})") from None
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
