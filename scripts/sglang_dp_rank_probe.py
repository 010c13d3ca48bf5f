"""Probe: SGLang's per-rank admission under DP attention, for uniform ``random`` runs.

SGLang 0.5 with ``--enable-dp-attention --dp-size N`` hands requests to its N attention ranks
round-robin (``data_parallel_controller.py`` ``round_robin_scheduler``, the default
``load_balance_method``), and each rank's scheduler admits against its own KV pool. The
simulator pools the ranks (``engine/session.py``): one scheduler over N pools' blocks. Where
every request has the same length, the difference is a whole-request rounding per rank: a
rank holds ``floor(per-rank pool / request tokens)`` requests, the pooled scheduler
``floor(N x per-rank pool / request tokens)``. This probe rounds the pooled pool down to N
ranks' whole requests (input + output tokens of the row) and runs ``validate`` on the rows
of ``--case`` with that workload; it is not SGLang for mixed lengths (ShareGPT), where the
ranks fill unevenly.

Run from the repository root (about 10 s CPU):

    .venv/bin/python scripts/sglang_dp_rank_probe.py > /tmp/probe.json
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import sys
import tempfile
from pathlib import Path

import inferplan.engine.session as session
from inferplan.cli import main as cli_main
from inferplan.memory.blockpool import PoolLayout
from inferplan.memory.plan import MemoryPlan

PUBLISHED = Path(__file__).resolve().parent.parent / "src/inferplan/plan/data/published.csv"


def _rows(case: str, input_len: str) -> tuple[str, int]:
    """The csv text of ``case``'s rows with ``input_len``, and their request's tokens."""
    reader = csv.DictReader(PUBLISHED.open(newline=""))
    rows = [r for r in reader if case in r["case_id"] and r["input_len"] == input_len]
    if not rows:
        raise SystemExit(f"no rows of {case!r} with input_len {input_len}")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue(), int(rows[0]["input_len"]) + int(rows[0]["output_len"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="gpustack-deepseek-v3.2-h200-sglang-bfe38f")
    parser.add_argument("--input-len", default="32000")
    args = parser.parse_args()
    text, request_tokens = _rows(args.case, args.input_len)
    pooled = session.pool_layout

    def per_rank(plan: MemoryPlan) -> PoolLayout:
        layout = pooled(plan)
        ranks = plan.parallelism.attention_dp
        whole = -(-request_tokens // plan.config.block_size)  # blocks of one request
        rank_blocks = layout.num_blocks // ranks // whole * whole
        print(f"per-rank blocks {layout.num_blocks // ranks} -> {rank_blocks}", file=sys.stderr)
        return dataclasses.replace(layout, num_blocks=rank_blocks * ranks)

    session.pool_layout = per_rank
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
        f.write(text)
        f.flush()
        return cli_main(["validate", "--data", f.name, "--json"])


if __name__ == "__main__":
    raise SystemExit(main())
