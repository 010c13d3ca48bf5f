"""How long ``inferplan validate`` takes over the whole bundled published table.

Issue 11's target: the bundle (2,558 rows; 612 closed-form ``trtllm-bench`` rows and 134
simulated served runs) in at most 2 minutes, ``--quick`` less for CI. Each measurement runs in
a fresh subprocess (imports and the table's parsing included, as a user runs it); reported: the
median wall and CPU seconds over ``REPEATS`` runs of each mode.

Run alone with ``python -m benchmarks.bench_validate`` (``--repeats R``).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

REPEATS = 3


def _one(quick: bool) -> tuple[float, float]:
    """(wall s, CPU s) of one ``inferplan validate --json`` in a fresh process."""
    args = [sys.executable, "-m", "inferplan", "validate", "--json"] + (
        ["--quick"] if quick else []
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(repeats: int = REPEATS) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, quick in (("full", False), ("quick", True)):
        runs = [_one(quick) for _ in range(repeats)]
        out[f"validate_{name}_wall_s"] = statistics.median(r[0] for r in runs)
        out[f"validate_{name}_cpu_s"] = statistics.median(r[1] for r in runs)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    for key, value in main(parser.parse_args().repeats).items():
        print(f"{key}: {value:.1f}")
