"""The summary of one simulated run, key for key comparable with ``vllm bench serve --save-result``.

``summarize`` owns the layout of the result dict. It has two parts:

1. vLLM's keys (``vllm-0.11.0:vllm/benchmarks/serve.py``):
   ``duration``, ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
   ``request_throughput``, ``request_goodput``, ``output_throughput``, ``total_token_throughput``,
   ``max_output_tokens_per_s``, ``max_concurrent_requests``, then per metric in
   ``percentile_metrics`` the ``mean_/median_/std_/p<NN>_<metric>_ms`` keys. Token totals and
   latency statistics cover completed requests only, like vLLM's successful ones.
2. inferplan's own keys: request outcome counts and rates, SLO attainment, queueing delay,
   per-request worst ITL, client-side wait, preemption and swap totals, KV usage over time, and
   the same counts and latency spreads per output-length bucket and per workload class.

Definitions and formulas for every key are in ``docs/metrics.md``. Differences from vLLM: a
statistic of no samples is ``None`` (vLLM writes 0), and ``max_output_tokens_per_s`` is an
approximation (see ``inferplan.metrics.peaks``). The output holds only dicts, lists, str, int,
float and ``None``; its key order is fixed by the code and the inputs, never by hashing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from inferplan.errors import InferplanError
from inferplan.metrics.buckets import (
    check_bucket_edges,
    groups_by_bucket,
    groups_by_class,
    summarize_groups,
)
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.latency import (
    BoolArray,
    RequestLatencies,
    check_slo,
    good_mask,
    request_latencies,
)
from inferplan.metrics.peaks import peak_concurrent_requests, peak_output_tokens_per_s
from inferplan.metrics.records import FloatArray, RequestRecords, RequestStatus
from inferplan.metrics.stats import MS_PER_S, histogram_stats, json_number, ratio, vllm_stats
from inferplan.metrics.steptrace import KvUsageSummary, StepTrace

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_OUTPUT_BUCKETS = (256, 1024, 4096, 16384)


def summarize(
    records: RequestRecords,
    itl: ItlHistogram | None,
    *,
    duration_s: float,
    percentiles: Sequence[float] = (99,),
    goodput_slo_ms: Mapping[str, float] | None = None,
    output_buckets: Sequence[int] = DEFAULT_OUTPUT_BUCKETS,
    percentile_metrics: Sequence[str] = PERCENTILE_METRICS,
    kv_usage: StepTrace | KvUsageSummary | None = None,
) -> dict[str, Any]:
    """Summarise a run as a JSON-ready dict (see the module docstring and ``docs/metrics.md``).

    ``duration_s`` is the benchmark's wall time (from the first dispatch to the last finish, as
    vLLM measures it); throughputs are ``None`` when it is 0. ``percentiles`` are the
    ``--metric-percentiles`` (0..100), ``goodput_slo_ms`` the ``--goodput`` pairs (any of ttft,
    tpot, e2el in ms). ``itl`` may be ``None`` when the run kept no ITL histogram.
    """
    records.check()
    if not duration_s >= 0.0:
        raise ValueError(f"duration_s must be >= 0, got {duration_s}")
    checked_percentiles = _check_percentiles(percentiles)
    metrics = _check_metrics(percentile_metrics)
    slo_ms = check_slo(goodput_slo_ms)
    edges = check_bucket_edges(output_buckets)
    latencies = request_latencies(records)
    is_good = None if slo_ms is None else good_mask(latencies, slo_ms)
    summary = _vllm_keys(records, latencies, is_good, itl, duration_s)
    summary.update(_latency_keys(latencies, itl, metrics, checked_percentiles))
    summary.update(_outcome_keys(records, latencies, is_good, slo_ms))
    summary.update(_own_latency_keys(latencies, itl, checked_percentiles))
    summary.update(_resource_keys(records, kv_usage))
    summary["output_buckets"] = summarize_groups(
        groups_by_bucket(records, edges), records, latencies, is_good, duration_s
    )
    summary["classes"] = summarize_groups(
        groups_by_class(records), records, latencies, is_good, duration_s
    )
    return summary


def _check_percentiles(percentiles: Sequence[float]) -> tuple[float, ...]:
    checked = tuple(float(p) for p in percentiles)
    if any(not 0.0 <= p <= 100.0 for p in checked):
        raise InferplanError(f"metric percentiles must lie in [0, 100], got {list(percentiles)}")
    return checked


def _check_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    unknown = [m for m in metrics if m not in PERCENTILE_METRICS]
    if unknown:
        raise InferplanError(
            f"percentile metrics: unknown {unknown}; valid: {', '.join(PERCENTILE_METRICS)}"
        )
    return tuple(metrics)


def _finite(values_s: FloatArray, mask: BoolArray) -> FloatArray:
    selected = values_s[mask]
    return selected[np.isfinite(selected)]


def _vllm_keys(
    records: RequestRecords,
    latencies: RequestLatencies,
    is_good: BoolArray | None,
    itl: ItlHistogram | None,
    duration_s: float,
) -> dict[str, Any]:
    """vLLM's run-level counts, throughputs and 1-second peaks."""
    done = latencies.is_completed
    num_completed = int(np.count_nonzero(done))
    total_input = int(np.sum(records.input_tokens[done]))
    total_output = int(np.sum(records.output_tokens[done]))
    return {
        "duration": json_number(duration_s),
        "completed": num_completed,
        "failed": records.num_requests - num_completed,  # newer vLLM releases write it
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": ratio(num_completed, duration_s),
        "request_goodput": None if is_good is None else ratio(int(is_good.sum()), duration_s),
        "output_throughput": ratio(total_output, duration_s),
        "total_token_throughput": ratio(total_input + total_output, duration_s),
        "max_output_tokens_per_s": peak_output_tokens_per_s(
            records.arrival_s[done],
            records.first_token_s[done],
            records.finish_s[done],
            records.output_tokens[done],
        ),
        "max_concurrent_requests": peak_concurrent_requests(
            records.arrival_s[done], records.finish_s[done]
        ),
    }


def _latency_keys(
    latencies: RequestLatencies,
    itl: ItlHistogram | None,
    metrics: tuple[str, ...],
    percentiles: tuple[float, ...],
) -> dict[str, Any]:
    """vLLM's ``mean_/median_/std_/p<NN>_<metric>_ms`` keys, in ``metrics`` order."""
    keys: dict[str, Any] = {}
    done = latencies.is_completed
    for metric in metrics:
        if metric == "itl":
            histogram = itl if itl is not None else ItlHistogram()
            keys.update(histogram_stats("itl", histogram, percentiles))
        else:
            values_s = _finite(getattr(latencies, f"{metric}_s"), done)
            keys.update(vllm_stats(metric, values_s, percentiles))
    return keys


def _outcome_keys(
    records: RequestRecords,
    latencies: RequestLatencies,
    is_good: BoolArray | None,
    slo_ms: dict[str, float] | None,
) -> dict[str, Any]:
    num_requests = records.num_requests
    num_completed = int(np.count_nonzero(latencies.is_completed))
    num_rejected = int(np.count_nonzero(records.status == RequestStatus.REJECTED))
    num_aborted = int(np.count_nonzero(records.status == RequestStatus.ABORTED))
    num_good = None if is_good is None else int(np.count_nonzero(is_good))
    return {
        "num_requests": num_requests,
        "rejected": num_rejected,
        "aborted": num_aborted,
        "completion_rate": ratio(num_completed, num_requests),
        "rejection_rate": ratio(num_rejected, num_requests),
        "abort_rate": ratio(num_aborted, num_requests),
        "goodput_slo_ms": slo_ms,
        "good_requests": num_good,
        "slo_attainment": None if num_good is None else ratio(num_good, num_requests),
    }


def _own_latency_keys(
    latencies: RequestLatencies, itl: ItlHistogram | None, percentiles: tuple[float, ...]
) -> dict[str, Any]:
    """Queueing delay and worst-gap statistics (vLLM-style keys), client-side wait."""
    done = latencies.is_completed
    everyone = np.ones_like(done)
    client_wait_s = _finite(latencies.client_wait_s, everyone)
    keys: dict[str, Any] = {}
    keys.update(vllm_stats("queue", _finite(latencies.queue_s, done), percentiles))
    keys.update(vllm_stats("max_itl", _finite(latencies.max_itl_s, done), percentiles))
    worst_s = itl.max_s if itl is not None and itl.total_weight > 0 else None
    keys["worst_itl_ms"] = None if worst_s is None else json_number(worst_s * MS_PER_S)
    has_wait = len(client_wait_s) > 0
    keys["mean_client_wait_ms"] = (
        json_number(np.mean(client_wait_s) * MS_PER_S) if has_wait else None
    )
    keys["max_client_wait_ms"] = json_number(np.max(client_wait_s) * MS_PER_S) if has_wait else None
    return keys


def _resource_keys(
    records: RequestRecords, kv_usage: StepTrace | KvUsageSummary | None
) -> dict[str, Any]:
    """Preemption, recomputation and swap totals over all requests; KV usage over time."""
    usage = kv_usage.summary() if isinstance(kv_usage, StepTrace) else kv_usage
    return {
        "num_preemptions": int(np.sum(records.num_preemptions)),
        "num_preempted_requests": int(np.count_nonzero(records.num_preemptions)),
        "recomputed_tokens": int(np.sum(records.recomputed_tokens)),
        "swapped_bytes": int(np.sum(records.swapped_bytes)),
        "kv_usage": None if usage is None else _kv_usage_json(usage),
        **_prefix_cache_keys(records),
    }


def _prefix_cache_keys(records: RequestRecords) -> dict[str, Any]:
    """Prefix-cache totals (vLLM's hit rate: cached over looked-up tokens), when it ran."""
    if records.cached_tokens is None or records.prefix_queried_tokens is None:
        return {}
    cached, queried = int(records.cached_tokens.sum()), int(records.prefix_queried_tokens.sum())
    return {
        "cached_tokens": cached,
        "prefix_cache_hit_rate": json_number(cached / queried) if queried else None,
    }


def _kv_usage_json(usage: KvUsageSummary) -> dict[str, Any]:
    return {
        "mean": json_number(usage.mean),
        "max": json_number(usage.max),
        "series": {
            "time_s": [json_number(t) for t in usage.series_time_s],
            "mean": [json_number(v) for v in usage.series_mean],
            "max": [json_number(v) for v in usage.series_max],
        },
    }
