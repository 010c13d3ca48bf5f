"""1-second peaks computed from events: equal to vLLM's dense per-second buckets, and sized by
the number of requests, not by the run's span (issue 9, class 5)."""

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.metrics.peaks import peak_concurrent_requests, peak_output_tokens_per_s


def dense_concurrency(start_s: np.ndarray, end_s: np.ndarray) -> int:
    """vLLM's rule, one counter per second (the reference)."""
    origin = float(np.min(start_s))
    num_buckets = int(np.ceil(float(np.max(end_s)) - origin)) + 1
    counts = np.zeros(num_buckets, dtype=np.int64)
    for start, end in zip(start_s, end_s, strict=True):
        first = int(start - origin)
        last = min(int(end - origin), num_buckets - 1)
        counts[first : last + 1] += 1
    return int(counts.max())


def dense_tokens(
    start_s: np.ndarray, first_token_s: np.ndarray, finish_s: np.ndarray, output_tokens: np.ndarray
) -> float:
    """Tokens per second bucket with the remaining tokens spread uniformly (the reference)."""
    origin = float(np.min(start_s))
    num_buckets = int(np.ceil(float(np.max(finish_s)) - origin)) + 1
    tokens = np.zeros(num_buckets)
    for first_s, end_s, count in zip(first_token_s, finish_s, output_tokens, strict=True):
        first_rel, end_rel = first_s - origin, end_s - origin
        if end_rel > first_rel:
            tokens[min(int(first_rel), num_buckets - 1)] += min(count, 1)
            rate = max(count - 1, 0) / (end_rel - first_rel)
            for b in range(num_buckets):
                overlap = max(0.0, min(b + 1, end_rel) - max(b, first_rel))
                tokens[b] += rate * overlap
        else:
            tokens[min(int(first_rel), num_buckets - 1)] += count
    return float(tokens.max())


Run = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@st.composite
def runs(draw: st.DrawFn) -> Run:
    n = draw(st.integers(1, 12))
    times = st.floats(0, 40, allow_nan=False)
    starts = np.array(draw(st.lists(times, min_size=n, max_size=n)))
    waits = np.array(draw(st.lists(st.floats(0, 5), min_size=n, max_size=n)))
    streams = np.array(
        draw(st.lists(st.sampled_from([0.0, 0.3, 1.0, 7.5]), min_size=n, max_size=n))
    )
    counts = np.array(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)), dtype=np.int64)
    first = starts + waits
    return starts, first, first + streams, counts


@settings(max_examples=150, deadline=None)
@given(runs())
def test_event_peaks_equal_the_dense_per_second_reference(run: Run) -> None:
    start_s, first_s, finish_s, counts = run
    assert peak_concurrent_requests(start_s, finish_s) == dense_concurrency(start_s, finish_s)
    expected = dense_tokens(start_s, first_s, finish_s, counts)
    got = peak_output_tokens_per_s(start_s, first_s, finish_s, counts)
    assert abs(got - expected) <= 1e-9 * max(1.0, expected)


def test_a_trace_spanning_decades_costs_memory_by_requests_not_seconds() -> None:
    # Rows at 0 and at Unix-epoch 1.7e9 s: the dense array of every second was 12 GB.
    start_s = np.array([0.0, 1.7e9])
    first_s = start_s + 0.5
    finish_s = start_s + 2.0
    tracemalloc.start()
    concurrent = peak_concurrent_requests(start_s, finish_s)
    tokens = peak_output_tokens_per_s(start_s, first_s, finish_s, np.array([4, 4]))
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert concurrent == 1
    # First token at 0.5 s, 3 more at 2 tok/s over (0.5, 2]: bucket 0 gets 1 + 1, bucket 1 gets 2.
    assert tokens == 2.0
    assert peak_bytes < 1_000_000
