"""Peak one-second concurrency and output-token rate, as ``vllm bench serve`` reports them.

vLLM (``vllm-0.11.0:vllm/benchmarks/serve.py``, ``calculate_metrics``) cuts the run into 1-second
buckets starting at the earliest successful request's send time ``t0``, with
``int(ceil(last_end - t0)) + 1`` buckets, and over successful requests only:

- ``max_concurrent_requests``: a request counts in every bucket from ``int(start - t0)`` to
  ``int(end - t0)`` inclusive; the maximum over buckets. Reproduced exactly here with a
  difference array (O(requests + buckets)).
- ``max_output_tokens_per_s``: every token counts in bucket ``int(token_time - t0)``; the maximum.
  The simulator keeps no per-token times, so this is an *approximation*: a request's first token
  sits at ``first_token_s`` and its other ``output_tokens - 1`` are spread uniformly over
  ``(first_token_s, finish_s]``. Bucket counts are then differences of a piecewise-linear
  cumulative count, evaluated at bucket edges from sorted breakpoints in O((N + B) log N).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from inferplan.metrics.records import FloatArray, IntArray


def _num_buckets(start_s: FloatArray, end_s: FloatArray) -> tuple[float, int]:
    origin_s = float(np.min(start_s))
    return origin_s, int(np.ceil(float(np.max(end_s)) - origin_s)) + 1


def peak_concurrent_requests(start_s: FloatArray, end_s: FloatArray) -> int:
    """Max over 1-s buckets of the requests active in any part of the bucket (0 if none)."""
    if len(start_s) == 0:
        return 0
    origin_s, num_buckets = _num_buckets(start_s, end_s)
    first = (start_s - origin_s).astype(np.int64)
    last = np.minimum((end_s - origin_s).astype(np.int64), num_buckets - 1)
    delta = np.zeros(num_buckets + 1, dtype=np.int64)
    np.add.at(delta, first, 1)
    np.add.at(delta, last + 1, -1)
    return int(np.max(np.cumsum(delta[:-1])))


def peak_output_tokens_per_s(
    start_s: FloatArray, first_token_s: FloatArray, finish_s: FloatArray, output_tokens: IntArray
) -> float:
    """Approximate max over 1-s buckets of output tokens emitted (0.0 if no requests)."""
    if len(start_s) == 0:
        return 0.0
    origin_s, num_buckets = _num_buckets(start_s, finish_s)
    first_rel_s = first_token_s - origin_s
    span_s = finish_s - first_token_s
    rest_tokens = np.maximum(output_tokens - 1, 0).astype(np.float64)
    is_spread = span_s > 0.0
    # Point masses: the first token, plus all tokens of a request whose stream took no time.
    point_tokens = np.where(is_spread, np.minimum(output_tokens, 1), output_tokens)
    point_bucket = np.minimum(first_rel_s.astype(np.int64), num_buckets - 1)
    tokens = np.bincount(
        point_bucket, weights=point_tokens.astype(np.float64), minlength=num_buckets
    ).astype(np.float64)
    rate = rest_tokens[is_spread] / span_s[is_spread]
    edges_s = np.arange(num_buckets + 1, dtype=np.float64)
    cumulative = _ramp_sum(edges_s, first_rel_s[is_spread], rate) - _ramp_sum(
        edges_s, first_rel_s[is_spread] + span_s[is_spread], rate
    )
    tokens += np.diff(cumulative)
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
