"""The request file's traffic classes as workloads: one mixed stream at any scale.

Owns ``mixed_workload``: every class's requests, each class with its own lengths (lognormal
``{mean, sigma, max}``, the ``reasoning`` or ``servegen`` generator, or a trace's rows drawn
with replacement) and its own arrival process (Gamma gaps, ``burstiness`` 1 = Poisson, vLLM's
rule), merged by arrival time, with the class names kept so SLOs are checked per class.

Common random numbers: for a class, lengths and unit-rate arrivals come from streams fixed by
(seed, class index), and a scale only divides the arrival times. So the same requests arrive
faster or slower as a search changes the load, and a comparison between two loads, or two
deployments, is never decided by sampling noise alone.

Counts: a one-replica probe covers ``search.window_s`` seconds of arrivals (300 s), the fleet's
confirmation ``fleet_window_s`` (600 s): longer than a long reasoning request, so a queue that
grows shows it in the tail latencies. Each class gets
at least ``min_class_requests`` requests (its p99 rests on that many) and at most
``max_requests`` in all; see ``class_counts``. Lengths are drawn as a prefix of one stream, so a
longer window adds requests and keeps the earlier ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from inferplan.plan.request import PlanRequest, TrafficClass
from inferplan.workload import (
    build_workload,
    bundled_servegen,
    load_trace,
    sample_servegen,
    synthetic,
)
from inferplan.workload.bundled import resolve_trace_path
from inferplan.workload.request import IntArray, Workload

STATS_SAMPLES = 4000
# ``build_workload('reasoning')`` defaults: inputs 100 +/- 50 %, outputs capped at 32,768.
REASONING_MAX_INPUT = 150
REASONING_MAX_OUTPUT = 32768


@dataclass(frozen=True)
class LengthStats:
    """Token lengths of one class (from ``STATS_SAMPLES`` draws): means and quantiles."""

    mean_input: float
    mean_output: float
    p50_context: float
    p99_context: float
    p99_input: float
    max_context: int
    kv_token_steps: float  # mean over requests of (input + output / 2) x output
    inputs: IntArray  # the samples, for other quantiles
    outputs: IntArray


def _streams(seed: int, index: int) -> tuple[np.random.Generator, np.random.Generator]:
    root = np.random.SeedSequence([seed, index])
    lengths, arrivals = root.spawn(2)
    return np.random.default_rng(lengths), np.random.default_rng(arrivals)


@cache
def _trace_lengths(path: str) -> tuple[IntArray, IntArray]:
    trace = load_trace(resolve_trace_path(path))
    return trace.input_tokens, trace.output_tokens


def class_lengths(cls: TrafficClass, num: int, seed: int, index: int) -> tuple[IntArray, IntArray]:
    """(input, output) tokens of ``num`` requests of class ``cls`` (the class's own stream)."""
    rng, _ = _streams(seed, index)
    if cls.dataset == "reasoning":
        workload = build_workload("reasoning", num_prompts=num, seed=int(rng.integers(2**31)))
        return workload.input_tokens, workload.output_tokens
    if cls.dataset == "servegen":
        return sample_servegen(num, rng)
    if cls.dataset == "trace":
        assert cls.dataset_path is not None
        inputs, outputs = _trace_lengths(cls.dataset_path)
        rows = rng.integers(0, len(inputs), size=num)
        return inputs[rows], outputs[rows]
    assert cls.input_len is not None and cls.output_len is not None
    inp, out = cls.input_len, cls.output_len
    return (
        synthetic.lognormal_lengths(num, inp.mean, inp.sigma, inp.max, rng),
        synthetic.lognormal_lengths(num, out.mean, out.sigma, out.max, rng),
    )


def length_stats(request: PlanRequest) -> list[LengthStats]:
    """Per class: the figures the memory and compute bounds use."""
    out = []
    for i, cls in enumerate(request.traffic):
        inputs, outputs = class_lengths(cls, STATS_SAMPLES, request.search.seed, i)
        context = inputs + outputs
        out.append(
            LengthStats(
                mean_input=float(inputs.mean()),
                mean_output=float(outputs.mean()),
                p50_context=float(np.percentile(context, 50)),
                p99_context=float(np.percentile(context, 99)),
                p99_input=float(np.percentile(inputs, 99)),
                max_context=max(int(context.max()), _declared_max(cls)),
                kv_token_steps=float(np.mean((inputs + outputs / 2) * outputs)),
                inputs=inputs,
                outputs=outputs,
            )
        )
    return out


def _declared_max(cls: TrafficClass) -> int:
    """The longest prompt + output the class can ever send: its caps, the reasoning generator's
    (inputs up to 150 tokens, outputs capped at 32,768), the ServeGen pool's largest values, or
    the trace's longest row."""
    if cls.dataset == "reasoning":
        return REASONING_MAX_INPUT + REASONING_MAX_OUTPUT
    if cls.dataset == "servegen":
        pool = bundled_servegen()
        return int(np.rint(pool.input_tokens.values.max() + pool.output_tokens.values.max()))
    if cls.dataset == "trace":
        assert cls.dataset_path is not None
        inputs, outputs = _trace_lengths(cls.dataset_path)
        return int((inputs + outputs).max())
    assert cls.input_len is not None and cls.output_len is not None
    return cls.input_len.max + cls.output_len.max


def class_counts(request: PlanRequest, scale: float, window_s: float) -> list[int]:
    """Requests per class for ``window_s`` seconds of arrivals at ``scale`` x the rates: each
    class at least ``min_class_requests``, all together at most ``max_requests``."""
    settings = request.search
    rates = [c.request_rate * scale for c in request.traffic]
    window_s = min(window_s, settings.max_requests / sum(rates))
    return [
        min(pool_size(request), max(settings.min_class_requests, math.ceil(r * window_s)))
        for r in rates
    ]


def pool_size(request: PlanRequest) -> int:
    """Requests drawn per class in every simulation; a simulation uses the first ones."""
    return max(request.search.max_requests, request.search.min_class_requests)


def mixed_workload(request: PlanRequest, scale: float, counts: list[int]) -> Workload:
    """The first ``counts[k]`` requests of every class ``k``, at ``scale`` x its request rate,
    merged by arrival time. Gaps are Gamma(burstiness) with mean 1 / rate (vLLM's law; not
    rescaled to end at N / rate, so that fewer requests are a prefix of more)."""
    seed, size = request.search.seed, pool_size(request)
    arrivals, inputs, outputs, classes = [], [], [], []
    for i, (cls, num) in enumerate(zip(request.traffic, counts, strict=True)):
        inp, out = class_lengths(cls, size, seed, i)
        _, arrival_rng = _streams(seed, i)
        shape = cls.burstiness
        gaps = arrival_rng.gamma(shape, 1.0 / (cls.request_rate * shape), size=size)
        arrivals.append(np.cumsum(gaps)[:num] / scale)
        inputs.append(inp[:num])
        outputs.append(out[:num])
        classes.append(np.full(num, i, dtype=np.int64))
    arrival_s = np.concatenate(arrivals)
    order = np.argsort(arrival_s, kind="stable")
    return Workload(
        arrival_s=arrival_s[order],
        input_tokens=np.concatenate(inputs)[order].astype(np.int64),
        output_tokens=np.concatenate(outputs)[order].astype(np.int64),
        class_ids=np.concatenate(classes)[order],
        class_names=tuple(c.name for c in request.traffic),
        source="plan",
        notes=(f"plan traffic at {scale:.4g} x the request file's rates",),
    )


def prefix(workload: Workload, fraction: float) -> Workload:
    """The first ``fraction`` of the requests (the early-stop probe)."""
    num = max(1, math.ceil(workload.num_requests * fraction))
    return Workload(
        arrival_s=workload.arrival_s[:num],
        input_tokens=workload.input_tokens[:num],
        output_tokens=workload.output_tokens[:num],
        class_ids=workload.class_ids[:num],
        class_names=workload.class_names,
        source=workload.source,
        notes=workload.notes,
    )
