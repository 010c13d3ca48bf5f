"""Per-request latencies and SLO goodness, with vLLM's definitions.

Owns the formulas (``vllm-0.11.0:vllm/benchmarks/serve.py``):

- TTFT = ``first_token_s - arrival_s`` (vLLM starts the clock when it sends the request, after any
  ``--max-concurrency`` wait, which for us is ``arrival_s``, not ``dispatch_s``);
- E2EL = ``finish_s - arrival_s``;
- TPOT = ``(E2EL - TTFT) / (output_tokens - 1)``, defined only when ``output_tokens > 1``;
- queueing delay = ``first_scheduled_s - arrival_s``;
- client wait = ``arrival_s - dispatch_s`` (time held back by the client's concurrency limit).

Only completed requests have latencies; the others hold ``nan``, so every column stays aligned
with the records and can be split by any mask. A request is *good* when it completed and every
metric named in the SLO is within it (vLLM ``--goodput``), TPOT counting as 0 when it generated
at most one token; like vLLM, the SLO is divided by 1000 and compared in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError
from inferplan.metrics.records import FloatArray, RequestRecords, RequestStatus

BoolArray = npt.NDArray[np.bool_]
SLO_METRICS = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class RequestLatencies:
    """Latency columns aligned with the records; ``nan`` where undefined."""

    is_completed: BoolArray
    ttft_s: FloatArray
    tpot_s: FloatArray
    e2el_s: FloatArray
    queue_s: FloatArray
    client_wait_s: FloatArray
    max_itl_s: FloatArray


def request_latencies(records: RequestRecords) -> RequestLatencies:
    """Compute every per-request latency; ``nan`` for requests that did not complete."""
    is_completed = np.asarray(records.status == RequestStatus.COMPLETED)

    def when_completed(values: FloatArray) -> FloatArray:
        return np.where(is_completed, values, np.nan)

    ttft_s = when_completed(records.first_token_s - records.arrival_s)
    e2el_s = when_completed(records.finish_s - records.arrival_s)
    num_gaps = records.output_tokens - 1
    has_tpot = is_completed & (num_gaps > 0)
    tpot_s = np.full(records.num_requests, np.nan)
    tpot_s[has_tpot] = (e2el_s[has_tpot] - ttft_s[has_tpot]) / num_gaps[has_tpot]
    return RequestLatencies(
        is_completed=is_completed,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        e2el_s=e2el_s,
        queue_s=when_completed(records.first_scheduled_s - records.arrival_s),
        client_wait_s=np.asarray(records.arrival_s - records.dispatch_s, dtype=np.float64),
        max_itl_s=when_completed(np.asarray(records.max_itl_s, dtype=np.float64)),
    )


def check_slo(goodput_slo_ms: Mapping[str, float] | None) -> dict[str, float] | None:
    """Validate ``{"ttft": ms, "tpot": ms, "e2el": ms}`` (any subset); sorted by metric name."""
    if goodput_slo_ms is None:
        return None
    checked: dict[str, float] = {}
    for metric in sorted(goodput_slo_ms):
        if metric not in SLO_METRICS:
            raise InferplanError(
                f"goodput SLO: unknown metric {metric!r}; valid: {', '.join(SLO_METRICS)}"
            )
        value_ms = float(goodput_slo_ms[metric])
        if not value_ms >= 0.0:
            raise InferplanError(
                f"goodput SLO: {metric} must be a number of ms >= 0, got {value_ms}"
            )
        checked[metric] = value_ms
    return checked


def good_mask(latencies: RequestLatencies, slo_ms: Mapping[str, float]) -> BoolArray:
    """Requests that completed within every given SLO (vLLM ``--goodput`` semantics)."""
    is_good = latencies.is_completed.copy()
    columns = {
        "ttft": latencies.ttft_s,
        # vLLM: "if output_len <= 1, we regard tpot as 0 for goodput".
        "tpot": np.where(np.isnan(latencies.tpot_s), 0.0, latencies.tpot_s),
        "e2el": latencies.e2el_s,
    }
    for metric, limit_ms in slo_ms.items():
        with np.errstate(invalid="ignore"):
            is_good &= limit_ms / 1000.0 >= columns[metric]
    return is_good
