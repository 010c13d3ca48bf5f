"""Running the CLI in-process for tests: exit code and captured output, and the error contract
(one ``error:`` line, no traceback) that ``docs/errors.md`` promises."""

from __future__ import annotations

import pytest

from inferplan.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``inferplan ARGV``: its exit code, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str) -> str:
    """``err`` is exactly one ``error:`` line with no traceback; returns it."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]
