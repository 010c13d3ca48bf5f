"""Metrics: per-request records and step gauges from a run -> summaries, buckets, goodput.

The engine fills ``RequestRecords`` (one row per request), an ``ItlHistogram`` (inter-token
latencies) and optionally a ``StepTrace`` (KV usage over time); ``summarize`` turns them into a
JSON-ready dict whose first keys match ``vllm bench serve --save-result``. Formulas and sources:
``docs/metrics.md``.
"""

from inferplan.metrics.histogram import BIN_RELATIVE_WIDTH, ItlHistogram
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.metrics.steptrace import KvUsageSummary, StepTrace
from inferplan.metrics.summary import summarize

__all__ = [
    "BIN_RELATIVE_WIDTH",
    "ItlHistogram",
    "KvUsageSummary",
    "RequestRecords",
    "RequestStatus",
    "StepTrace",
    "summarize",
]
