"""Peak one-second concurrency and output-token rate, as ``vllm bench serve`` reports them.

vLLM (``vllm-0.11.0:vllm/benchmarks/serve.py``, ``calculate_metrics``) cuts the run into 1-second
buckets starting at the earliest successful request's send time ``t0``, with
``int(ceil(last_end - t0)) + 1`` buckets, and over successful requests only:

- ``max_concurrent_requests``: a request counts in every bucket from ``int(start - t0)`` to
  ``int(end - t0)`` inclusive; the maximum over buckets. Reproduced exactly here.
- ``max_output_tokens_per_s``: every token counts in bucket ``int(token_time - t0)``; the maximum.
  The simulator keeps no per-token times, so this is an *approximation*: a request's first token
  sits at ``first_token_s`` and its other ``output_tokens - 1`` are spread uniformly over
  ``(first_token_s, finish_s]``. Bucket counts are then differences of a piecewise-linear
  cumulative count, evaluated at bucket edges from sorted breakpoints.

Both are computed from the requests' events, not from an array of every second: time and
memory are O(N log N) and O(N) in the number of requests N, whatever the run's span (a trace
spanning months, or a request rate of one a day, costs no more than a dense one).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from inferplan.metrics.records import FloatArray, IntArray


def _buckets(start_s: FloatArray, end_s: FloatArray) -> tuple[FloatArray, FloatArray, float]:
    """Each request's first and last 1-s bucket (as floats: exact below 2**53, never an int64
    overflow) and the last bucket vLLM counts, ``ceil(last_end - t0)``."""
    origin_s = float(np.min(start_s))
    last_bucket = float(np.ceil(float(np.max(end_s)) - origin_s))
    first = np.floor(start_s - origin_s)
    last = np.minimum(np.floor(end_s - origin_s), last_bucket)
    return first, last, last_bucket


def peak_concurrent_requests(start_s: FloatArray, end_s: FloatArray) -> int:
    """Max over 1-s buckets of the requests active in any part of the bucket (0 if none).

    Only buckets where a request starts can hold the maximum (the count rises only there), so
    the count is taken at those: O(N log N) time and O(N) memory, whatever the run's span."""
    if len(start_s) == 0:
        return 0
    first, last, _ = _buckets(start_s, end_s)
    candidates = np.unique(first)
    started = np.searchsorted(np.sort(first), candidates, side="right")
    ended = np.searchsorted(np.sort(last), candidates, side="left")
    return int(np.max(started - ended))


def peak_output_tokens_per_s(
    start_s: FloatArray, first_token_s: FloatArray, finish_s: FloatArray, output_tokens: IntArray
) -> float:
    """Approximate max over 1-s buckets of output tokens emitted (0.0 if no requests).

    The cumulative token count is piecewise linear between the kinks (each stream's start and
    end), so a bucket without a kink in it or in the bucket before emits what the bucket after
    the previous kink emits; the maximum is therefore taken over the buckets holding a kink or
    a point mass and the bucket after each kink: O(N log N) time and O(N) memory."""
    if len(start_s) == 0:
        return 0.0
    origin_s = float(np.min(start_s))
    _, _, last_bucket = _buckets(start_s, finish_s)
    first_rel_s = first_token_s - origin_s
    span_s = finish_s - first_token_s
    rest_tokens = np.maximum(output_tokens - 1, 0).astype(np.float64)
    is_spread = span_s > 0.0
    # Point masses: the first token, plus all tokens of a request whose stream took no time.
    point_tokens = np.where(is_spread, np.minimum(output_tokens, 1), output_tokens)
    point_bucket = np.minimum(np.floor(first_rel_s), last_bucket)
    rate = rest_tokens[is_spread] / span_s[is_spread]
    starts_s, ends_s = first_rel_s[is_spread], first_rel_s[is_spread] + span_s[is_spread]
    kink_buckets = np.floor(np.concatenate((starts_s, ends_s)))
    candidates = np.unique(np.concatenate((point_bucket, kink_buckets, kink_buckets + 1.0)))
    candidates = candidates[(candidates >= 0) & (candidates <= last_bucket)]
    slot = np.searchsorted(candidates, point_bucket)
    tokens = np.bincount(
        slot, weights=point_tokens.astype(np.float64), minlength=len(candidates)
    ).astype(np.float64)
    edges_s = np.concatenate((candidates, candidates + 1.0))
    cumulative = _ramp_sum(edges_s, starts_s, rate) - _ramp_sum(edges_s, ends_s, rate)
    tokens += cumulative[len(candidates) :] - cumulative[: len(candidates)]
    return float(np.max(tokens))


def _ramp_sum(
    at_s: npt.NDArray[np.float64], kink_s: FloatArray, rate: FloatArray
) -> npt.NDArray[np.float64]:
    """``sum_k rate_k * max(t - kink_k, 0)`` for every ``t`` in ``at_s``."""
    order = np.argsort(kink_s, kind="stable")
    kinks = kink_s[order]
    rates = rate[order]
    rate_below = np.concatenate(([0.0], np.cumsum(rates)))
    weighted_below = np.concatenate(([0.0], np.cumsum(rates * kinks)))
    count = np.searchsorted(kinks, at_s, side="right")
    return rate_below[count] * at_s - weighted_below[count]
