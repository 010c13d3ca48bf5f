"""Run every benchmark in this package and print one table of their results.

A benchmark is any module named ``bench_*.py`` here with a ``main()`` that returns a flat
``{measurement name: number}`` dict (units in the names). Modules are found by that name
pattern, so a new benchmark needs no registration; a ``bench_*`` module without ``main()`` is
a tool run by hand (``bench_instructions``: Valgrind's instruction counts), named on stderr and
not run. ``python -m benchmarks.run_all`` runs them
all; names given as arguments (``step_time`` or ``bench_step_time``) run only those, ``--json``
prints the results as JSON instead of a table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path
from typing import Any

PREFIX = "bench_"


def discover() -> list[str]:
    """Names of the benchmark modules in this package, sorted."""
    here = [str(Path(__file__).parent)]
    return sorted(m.name for m in pkgutil.iter_modules(here) if m.name.startswith(PREFIX))


def _module(name: str) -> Any:
    return importlib.import_module(f"{__package__ or 'benchmarks'}.{name}")


def run(name: str) -> tuple[dict[str, Any], float]:
    module = _module(name)
    start = time.perf_counter()
    results = module.main()
    if not isinstance(results, dict):
        raise TypeError(f"{name}.main() must return a dict, got {type(results).__name__}")
    return results, time.perf_counter() - start


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def table(rows: list[tuple[str, str, Any]]) -> str:
    """A plain fixed-width table: benchmark, measurement, value."""
    header = ("benchmark", "measurement", "value")
    body = [(module, key, _format(value)) for module, key, value in rows]
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(3)]
    rule = ("-" * widths[0], "-" * widths[1], "-" * widths[2])
    return "\n".join(
        f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:>{widths[2]}}" for a, b, c in [header, rule, *body]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_all", description=__doc__)
    parser.add_argument("only", nargs="*", help="benchmark names to run (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    names = discover()
    wanted = {n if n.startswith(PREFIX) else PREFIX + n for n in args.only}
    unknown = wanted - set(names)
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; have {', '.join(names)}")
    rows: list[tuple[str, str, Any]] = []
    report: dict[str, dict[str, Any]] = {}
    for name in names:
        if wanted and name not in wanted:
            continue
        if not callable(getattr(_module(name), "main", None)):
            print(
                f"skipped {name}: no main() (a tool run by hand, see its docstring)",
                file=sys.stderr,
            )
            continue
        results, elapsed = run(name)
        report[name] = results
        rows.extend((name, key, value) for key, value in results.items())
        print(f"ran {name} in {elapsed:.1f} s", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
