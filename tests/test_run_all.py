"""``benchmarks/run_all.py`` (``make bench``): every ``bench_*`` module with a ``main()`` runs;
a tool of that name without one (``bench_instructions``, needs Valgrind) is named and skipped,
not a traceback that stops the rest."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture
def run_all(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.run_all`` imported from the checkout (the package is not installed)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    return importlib.import_module("benchmarks.run_all")


def test_a_bench_module_without_main_is_named_and_skipped(
    run_all: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "bench_instructions" in run_all.discover()
    assert run_all.main(["instructions", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {}
    assert "skipped bench_instructions: no main()" in err


def test_an_unknown_benchmark_is_a_usage_error(
    run_all: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        run_all.main(["no_such_thing"])
    assert stop.value.code == 2
    assert "unknown benchmark(s) bench_no_such_thing" in capsys.readouterr().err
