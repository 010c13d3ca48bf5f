"""Workloads: the requests a simulation replays, from real traces or synthetic generators.

Everything here returns a ``Workload`` (``request.py``): columnar arrays sorted by arrival.

- ``build_workload``: the front door, shaped like ``vllm bench serve --dataset-name``.
- ``load_trace``: Azure 2023, Mooncake, Vidur and plain CSV/JSONL traces, detected by content.
- ``bundled_trace``: small real traces shipped in ``data/`` (sources in ``data/README.md``).
- ``sample_servegen``: lengths from ServeGen's pooled DeepSeek-R1 reasoning distribution.
- ``synthetic``: vLLM's arrival process and random lengths, lognormal and reasoning-mix lengths,
  and ``re_time`` to give a trace new arrivals.
"""

from inferplan.workload.bundled import BUNDLED_TRACES, bundled_trace
from inferplan.workload.dataset import DATASETS, build_workload, first_requests
from inferplan.workload.request import Workload
from inferplan.workload.servegen import (
    ServegenDistribution,
    build_servegen_distribution,
    bundled_servegen,
    load_servegen,
    sample_servegen,
)
from inferplan.workload.synthetic import (
    arrival_times_s,
    lognormal_lengths,
    make_rng,
    random_lengths,
    re_time,
    reasoning_mix_lengths,
)
from inferplan.workload.trace_formats import TRACE_FORMATS
from inferplan.workload.traces import load_trace

__all__ = [
    "BUNDLED_TRACES",
    "DATASETS",
    "TRACE_FORMATS",
    "ServegenDistribution",
    "Workload",
    "arrival_times_s",
    "build_servegen_distribution",
    "build_workload",
    "bundled_servegen",
    "bundled_trace",
    "first_requests",
    "load_servegen",
    "load_trace",
    "lognormal_lengths",
    "make_rng",
    "random_lengths",
    "re_time",
    "reasoning_mix_lengths",
    "sample_servegen",
]
