"""Synthetic generators: vLLM's arrival and random-length rules, lognormal and reasoning lengths."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.errors import InferplanError
from inferplan.workload import (
    arrival_times_s,
    load_trace,
    lognormal_lengths,
    make_rng,
    random_lengths,
    re_time,
    reasoning_mix_lengths,
)
from inferplan.workload.bundled import bundled_trace
from inferplan.workload.request import FloatArray
from inferplan.workload.synthetic import truncated_lognormal_lengths, uniform_lengths


def vllm_get_request_delays(
    num_requests: int, request_rate: float, burstiness: float, rng: np.random.Generator
) -> FloatArray:
    """vLLM 0.11 ``get_request``'s delay rule, written out loop by loop as the reference."""
    delays = []
    for _ in range(num_requests):
        theta = 1.0 / (request_rate * burstiness)
        delays.append(rng.gamma(shape=burstiness, scale=theta))
    for i in range(1, len(delays)):
        delays[i] += delays[i - 1]
    if delays[-1] != 0:
        factor = (num_requests / request_rate) / delays[-1]
        delays = [delay * factor for delay in delays]
    return np.array(delays)


def gaps(times_s: FloatArray) -> FloatArray:
    return np.diff(np.concatenate([[0.0], times_s]))


@pytest.mark.parametrize(
    ("num_requests", "request_rate", "burstiness"),
    [(1, 1.0, 1.0), (7, 0.3, 1.0), (1000, 10.0, 0.25), (2500, 123.4, 4.0)],
)
def test_last_arrival_is_exactly_n_over_rate(
    num_requests: int, request_rate: float, burstiness: float
) -> None:
    times_s = arrival_times_s(num_requests, request_rate, burstiness, 3)
    assert times_s[-1] == num_requests / request_rate
    assert np.all(np.diff(times_s) >= 0)
    assert times_s[0] > 0  # the first request waits one gap, as in vLLM


def test_arrivals_follow_vllm_rule_draw_for_draw() -> None:
    ours = arrival_times_s(500, 8.0, 0.5, np.random.default_rng(11))
    reference = vllm_get_request_delays(500, 8.0, 0.5, np.random.default_rng(11))
    np.testing.assert_allclose(ours, reference, rtol=1e-12)


def test_poisson_interarrival_cv_is_one() -> None:
    inter_s = gaps(arrival_times_s(20_000, 10.0, 1.0, 0))
    assert inter_s.std() / inter_s.mean() == pytest.approx(1.0, abs=0.03)
    assert inter_s.mean() == pytest.approx(0.1, rel=1e-9)  # rescaled: N gaps sum to N / rate


def test_burstiness_sets_cv_to_one_over_sqrt_shape() -> None:
    inter_s = gaps(arrival_times_s(20_000, 10.0, 0.25, 0))
    assert inter_s.std() / inter_s.mean() == pytest.approx(2.0, rel=0.05)


def test_infinite_rate_puts_everything_at_zero() -> None:
    assert np.array_equal(arrival_times_s(50, math.inf, 1.0, 0), np.zeros(50))


def test_infinite_burstiness_is_evenly_spaced() -> None:
    times_s = arrival_times_s(4, 2.0, math.inf, 0)
    np.testing.assert_allclose(times_s, [0.5, 1.0, 1.5, 2.0])


def test_same_seed_same_arrays() -> None:
    for seed in (0, 12345):
        np.testing.assert_array_equal(
            arrival_times_s(100, 5.0, 0.7, seed), arrival_times_s(100, 5.0, 0.7, seed)
        )
        for a, b in zip(
            random_lengths(100, 512, 64, 0.3, seed),
            random_lengths(100, 512, 64, 0.3, seed),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(
            lognormal_lengths(100, 5000, 1.0, 32768, seed),
            lognormal_lengths(100, 5000, 1.0, 32768, seed),
        )
        np.testing.assert_array_equal(
            reasoning_mix_lengths(100, seed), reasoning_mix_lengths(100, seed)
        )
    assert not np.array_equal(reasoning_mix_lengths(100, 1), reasoning_mix_lengths(100, 2))


def test_random_lengths_use_vllms_stream_and_order() -> None:
    num, seed = 200, 7
    rng = np.random.default_rng(seed)
    expected_in = rng.integers(math.floor(1024 * 0.9), math.ceil(1024 * 1.1) + 1, size=num)
    expected_out = rng.integers(math.floor(128 * 0.9), math.ceil(128 * 1.1) + 1, size=num)
    input_tokens, output_tokens = random_lengths(num, 1024, 128, 0.1, seed)
    np.testing.assert_array_equal(input_tokens, expected_in)
    np.testing.assert_array_equal(output_tokens, expected_out)


@settings(max_examples=60, deadline=None)
@given(
    input_len=st.integers(1, 200_000),
    output_len=st.integers(1, 50_000),
    range_ratio=st.floats(0.0, 0.999),
    seed=st.integers(0, 2**32 - 1),
)
def test_range_ratio_bounds(input_len: int, output_len: int, range_ratio: float, seed: int) -> None:
    input_tokens, output_tokens = random_lengths(200, input_len, output_len, range_ratio, seed)
    assert input_tokens.min() >= max(1, math.floor(input_len * (1 - range_ratio)))
    assert input_tokens.max() <= math.ceil(input_len * (1 + range_ratio))
    assert output_tokens.min() >= max(1, math.floor(output_len * (1 - range_ratio)))
    assert output_tokens.max() <= math.ceil(output_len * (1 + range_ratio))
    if range_ratio == 0:
        assert np.all(input_tokens == input_len)
        assert np.all(output_tokens == output_len)


def test_range_bounds_are_inclusive() -> None:
    lengths = uniform_lengths(5000, 10, 0.5, 0, "--random-input-len")
    assert (lengths.min(), lengths.max()) == (5, 15)


def test_lognormal_mean_and_cap() -> None:
    lengths = lognormal_lengths(50_000, 1000, 0.5, 10**6, 0)
    assert lengths.mean() == pytest.approx(1000, rel=0.02)
    capped = lognormal_lengths(50_000, 5000, 1.0, 32768, 0)
    assert capped.max() == 32768
    assert capped.min() >= 1
    assert capped.dtype == np.int64


def test_reasoning_mix_share_above_threshold() -> None:
    lengths = reasoning_mix_lengths(50_000, 0)
    assert (lengths > 5000).mean() == pytest.approx(0.45, abs=0.01)
    assert lengths.max() <= 32768
    assert lengths.min() >= 1
    assert 4000 < lengths.mean() < 7000
    assert np.all(reasoning_mix_lengths(1000, 0, long_fraction=0.0) <= 5000)
    assert np.all(reasoning_mix_lengths(1000, 0, long_fraction=1.0) > 5000)


def test_truncated_lognormal_stays_in_range_and_refuses_empty_ranges() -> None:
    lengths = truncated_lognormal_lengths(2000, 100, 1.0, 50, 150, 0)
    assert lengths.min() >= 50
    assert lengths.max() <= 150
    with pytest.raises(InferplanError, match="move the mean"):
        truncated_lognormal_lengths(10, 10, 0.1, 5000, 6000, 0)


def test_re_time_keeps_requests_and_order() -> None:
    trace = load_trace(bundled_trace("mooncake_fast25_conversation"))
    timed = re_time(trace, 4.0, 1.0, 0)
    assert timed.arrival_s[-1] == trace.num_requests / 4.0
    assert np.all(np.diff(timed.arrival_s) >= 0)
    np.testing.assert_array_equal(timed.input_tokens, trace.input_tokens)
    assert timed.prefix_hashes == trace.prefix_hashes
    assert timed.notes[: len(trace.notes)] == trace.notes
    assert "re-timed" in timed.notes[-1]


@pytest.mark.parametrize(
    ("call", "flag"),
    [
        (lambda: arrival_times_s(10, 0.0, 1.0, 0), "--request-rate"),
        (lambda: arrival_times_s(10, -2.0, 1.0, 0), "--request-rate"),
        (lambda: arrival_times_s(10, float("nan"), 1.0, 0), "--request-rate"),
        (lambda: arrival_times_s(10, 1.0, 0.0, 0), "--burstiness"),
        (lambda: arrival_times_s(0, 1.0, 1.0, 0), "--num-prompts"),
        (lambda: random_lengths(10, 100, 10, 1.0, 0), "--random-range-ratio"),
        (lambda: random_lengths(10, 100, 10, -0.1, 0), "--random-range-ratio"),
        (lambda: random_lengths(10, 0, 10, 0.0, 0), "--random-input-len"),
        (lambda: random_lengths(10, 100, 0, 0.0, 0), "--random-output-len"),
        (lambda: random_lengths(10, 100, 10, 0.0, -1), "--seed"),
        (lambda: random_lengths(2.5, 100, 10, 0.0, 0), "--num-prompts"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_name_the_vllm_flag(call: Callable[[], object], flag: str) -> None:
    with pytest.raises(InferplanError) as info:
        call()
    assert str(info.value).startswith(flag)


def test_make_rng_passes_generators_through() -> None:
    rng = np.random.default_rng(0)
    assert make_rng(rng) is rng
