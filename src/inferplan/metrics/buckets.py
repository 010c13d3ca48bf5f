"""Splitting requests into groups (output-length buckets, workload classes) and summarising each.

Output-length buckets are keyed by the length a request *asked for* (``requested_output_tokens``,
i.e. ``max_tokens``), not what it generated, so a rejected or aborted request lands in the same
bucket it would have finished in. With edges ``(256, 1024, 4096, 16384)`` the buckets are
``<=256``, ``<=1k``, ``<=4k``, ``<=16k`` and ``>16k``: a request with ``n`` requested tokens goes in
the first bucket whose edge is ``>= n`` (``k`` = 1024 tokens, ``M`` = 1024 ** 2).

Each group reports counts and rates over *all* its requests (rejected and aborted included), and
latency spreads ``{"mean", "p50", "p90", "p99"}`` in seconds over its completed requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from inferplan.errors import InferplanError
from inferplan.metrics.latency import BoolArray, RequestLatencies
from inferplan.metrics.records import IntArray, RequestRecords, RequestStatus
from inferplan.metrics.stats import ratio, spread

_KIB = 1024


def tokens_label(num_tokens: int) -> str:
    """Compact token count: 1024 -> "1k", 16384 -> "16k", 1048576 -> "1M", 300 -> "300"."""
    if num_tokens % (_KIB * _KIB) == 0:
        return f"{num_tokens // (_KIB * _KIB)}M"
    if num_tokens % _KIB == 0:
        return f"{num_tokens // _KIB}k"
    return str(num_tokens)


def check_bucket_edges(edges: Sequence[float]) -> tuple[int, ...]:
    """Edges as a tuple of strictly increasing positive ints, or an ``InferplanError``."""
    checked = tuple(int(edge) for edge in edges)
    if any(edge != original for edge, original in zip(checked, edges, strict=True)):
        raise InferplanError(f"output buckets: edges must be whole token counts, got {list(edges)}")
    if any(edge <= 0 for edge in checked) or any(b <= a for a, b in pairwise(checked)):
        raise InferplanError(
            f"output buckets: edges must be positive and strictly increasing, got {list(edges)}"
        )
    return checked


def bucket_labels(edges: Sequence[int]) -> tuple[str, ...]:
    """``("<=256", "<=1k", ..., ">16k")``: one label per edge plus one for longer requests."""
    if not edges:
        return ("all",)
    return (*(f"<={tokens_label(edge)}" for edge in edges), f">{tokens_label(edges[-1])}")


def assign_buckets(requested_tokens: IntArray, edges: Sequence[int]) -> IntArray:
    """Bucket index per request: the first edge ``>= n``, or ``len(edges)`` past the last."""
    return np.searchsorted(np.asarray(edges, dtype=np.int64), requested_tokens, side="left")


def group_summary(
    mask: BoolArray,
    records: RequestRecords,
    latencies: RequestLatencies,
    is_good: BoolArray | None,
    duration_s: float,
) -> dict[str, Any]:
    """Counts, rates, throughput and latency spreads of the requests selected by ``mask``."""
    num_requests = int(np.count_nonzero(mask))
    done = mask & latencies.is_completed
    num_completed = int(np.count_nonzero(done))
    num_rejected = int(np.count_nonzero(mask & (records.status == RequestStatus.REJECTED)))
    num_aborted = int(np.count_nonzero(mask & (records.status == RequestStatus.ABORTED)))
    num_good = None if is_good is None else int(np.count_nonzero(mask & is_good))
    output_tokens = int(np.sum(records.output_tokens[done]))

    def spread_of(values_s: np.ndarray) -> dict[str, float | None]:
        selected = values_s[done]
        return spread(selected[~np.isnan(selected)])

    return {
        "num_requests": num_requests,
        "completed": num_completed,
        "rejected": num_rejected,
        "aborted": num_aborted,
        "completion_rate": ratio(num_completed, num_requests),
        "rejection_rate": ratio(num_rejected, num_requests),
        "abort_rate": ratio(num_aborted, num_requests),
        "good_requests": num_good,
        "slo_attainment": None if num_good is None else ratio(num_good, num_requests),
        "request_throughput_req_s": ratio(num_completed, duration_s),
        "output_throughput_tok_s": ratio(output_tokens, duration_s),
        "ttft_s": spread_of(latencies.ttft_s),
        "tpot_s": spread_of(latencies.tpot_s),
        "e2el_s": spread_of(latencies.e2el_s),
        "queue_s": spread_of(latencies.queue_s),
        "max_itl_s": spread_of(latencies.max_itl_s),
        "num_preemptions": int(np.sum(records.num_preemptions[mask])),
        "recomputed_tokens": int(np.sum(records.recomputed_tokens[mask])),
    }


def groups_by_bucket(records: RequestRecords, edges: Sequence[int]) -> list[tuple[str, BoolArray]]:
    """``(label, mask)`` per output-length bucket, in edge order (empty buckets included)."""
    index = assign_buckets(records.requested_tokens, edges)
    return [(label, index == k) for k, label in enumerate(bucket_labels(edges))]


def groups_by_class(records: RequestRecords) -> list[tuple[str, BoolArray]]:
    """``(name, mask)`` per workload class, in ``class_names`` order."""
    return [(name, records.class_ids == k) for k, name in enumerate(records.class_names)]


def summarize_groups(
    groups: list[tuple[str, BoolArray]],
    records: RequestRecords,
    latencies: RequestLatencies,
    is_good: BoolArray | None,
    duration_s: float,
) -> dict[str, dict[str, Any]]:
    """``group_summary`` for each ``(label, mask)``; labels must be distinct."""
    labels = [label for label, _ in groups]
    if len(set(labels)) != len(labels):
        raise InferplanError(f"group names must be distinct, got {labels}")
    return {
        label: group_summary(mask, records, latencies, is_good, duration_s)
        for label, mask in groups
    }
