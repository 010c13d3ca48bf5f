"""Speed benchmarks (STYLE: speed is measured here, not asserted in tests).

Each ``bench_*.py`` module has ``main() -> dict[str, float]`` returning named measurements (units
in the names, e.g. ``_us``); ``python -m benchmarks.run_all`` runs them all and prints a table.
"""
