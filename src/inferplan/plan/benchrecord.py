"""One load level of a user's own benchmark: how it was run and what it measured.

Both readers produce these records, ``benchresult.py`` from a ``vllm bench serve
--save-result`` JSON file and ``benchcsv.py`` from one row of a CSV table, so everything after
parsing (the re-simulated workload, the validation runs) is one code path. The measurement names
are vllm bench's own keys, which are also the CSV's column names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferplan.limits import MAX_SPAN_S, span_years
from inferplan.textfile import read_user_text

# vllm bench's key -> (inferplan's metric, factor to its unit).
MEASUREMENTS = {
    "output_throughput": ("output_throughput_tok_s", 1.0),
    "mean_ttft_ms": ("ttft_mean_s", 1e-3),
    "mean_tpot_ms": ("tpot_mean_s", 1e-3),
}


@dataclass(frozen=True)
class BenchSettings:
    num_requests: int
    input_tokens: int
    output_tokens: int
    request_rate: float
    burstiness: float
    max_concurrency: int | None


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark run: ``run_id`` says where it came from (``file`` or ``file:line``)."""

    run_id: str
    settings: BenchSettings
    measured: dict[str, float]  # inferplan metric -> value in its unit


def span_problem(num_requests: int, request_rate: float) -> str | None:
    """Why ``num_requests`` sent at ``request_rate`` is not a benchmark to re-simulate (their
    arrivals would span more than MAX_SPAN_S), or None."""
    span_s = num_requests / request_rate
    if span_s <= MAX_SPAN_S:
        return None
    return (
        f"{num_requests} requests at {request_rate!r} req/s span {span_years(span_s)}; "
        f"at most {span_years(MAX_SPAN_S)} (MAX_SPAN_S)"
    )


def read_result_text(path: Path) -> str:
    """The text of a result file; a missing or unreadable file is one line naming it."""
    return read_user_text(path, "result")
