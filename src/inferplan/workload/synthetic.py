"""Synthetic arrivals and request lengths, following ``vllm bench serve`` where it has a rule.

Owns the arrival process, the random, lognormal and reasoning-mix length generators, and
``re_time``. Every function takes a ``numpy.random.Generator`` (or an integer seed for one), so
the same seed gives identical arrays; nothing touches numpy's global random state.

vLLM rules mimicked (vLLM 0.11 ``vllm/benchmarks/serve.py`` ``get_request`` and
``benchmarks/datasets.py`` ``RandomDataset``):

- ``--request-rate inf`` (vLLM's default) puts every request at t = 0. A finite rate draws the
  gaps ~ Gamma(shape=burstiness, scale=1 / (rate * burstiness)) (burstiness 1 is Poisson, < 1 is
  burstier), sums them, then rescales so the last arrival is exactly N / rate. The first request
  therefore arrives after one gap, not at 0. ``--burstiness inf`` gives constant gaps 1 / rate.
  vLLM draws the gaps from the legacy global ``np.random``; we draw them from a ``Generator``, so
  the law is the same but the numbers differ from vLLM's for the same seed.
- Random dataset: input ~ UniformInt[floor(in * (1 - r)), ceil(in * (1 + r))] and output ~
  UniformInt[max(1, floor(out * (1 - r))), ceil(out * (1 + r))], bounds inclusive, 0 <= r < 1,
  input lengths drawn before output lengths, as vLLM does. We do not subtract the tokenizer's
  special tokens (vLLM does: ``in - num_special_tokens_to_add()``), and we raise the input lower
  bound to 1 token where vLLM would allow an empty body.

Reasoning lengths (not a vLLM dataset): lognormal outputs with a given mean and a cap (the cap
mimics ``max_tokens``: capped requests pile up at the cap, as ServeGen's DeepSeek-R1 outputs do at
32,768), and a two-part mix where a fraction of requests is long (> 5,000 tokens; 45 % for
Natural Reasoning prompts, arXiv 2605.19775). The
mix's default component shapes are assumptions chosen to give a mean near 5,000 tokens, not fits.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import numpy as np

from inferplan.errors import InferplanError
from inferplan.limits import MAX_SPAN_S, MIN_BURSTINESS, span_years
from inferplan.workload.request import FloatArray, IntArray, Workload

Seed = int | np.random.Generator

# Smallest share of a lognormal's mass a truncation may keep before sampling it is refused.
_MIN_ACCEPTANCE = 1e-3


def make_rng(seed: Seed) -> np.random.Generator:
    """The generator itself, or a fresh ``numpy.random.default_rng(seed)`` for an integer seed."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InferplanError(f"--seed must be a non-negative integer, not {seed!r}")
    return np.random.default_rng(int(seed))


def check_count(value: int, flag: str) -> int:
    """A whole number >= 1 for ``flag`` (e.g. ``--num-prompts``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InferplanError(f"{flag} must be a whole number >= 1, not {value!r}")
    return int(value)


def check_request_rate(request_rate: float) -> float:
    rate = _as_float(request_rate, "--request-rate")
    if not rate > 0:
        raise InferplanError(f"--request-rate must be > 0 req/s or inf, not {request_rate!r}")
    return rate


def check_burstiness(burstiness: float) -> float:
    value = _as_float(burstiness, "--burstiness")
    if not value >= MIN_BURSTINESS:
        raise InferplanError(
            f"--burstiness must be >= {MIN_BURSTINESS} (MIN_BURSTINESS; 1 is Poisson), "
            f"not {burstiness!r}"
        )
    return value


def check_span(num_requests: int, request_rate: float) -> None:
    """``num_requests`` arrivals at ``request_rate`` span at most MAX_SPAN_S (ten years)."""
    span_s = num_requests / request_rate
    if span_s > MAX_SPAN_S:
        raise InferplanError(
            f"--request-rate {request_rate!r} with {num_requests} requests (--num-prompts) spans "
            f"{span_years(span_s)}; at most {span_years(MAX_SPAN_S)} (MAX_SPAN_S): raise the rate"
        )


def check_range_ratio(range_ratio: float) -> float:
    value = _as_float(range_ratio, "--random-range-ratio")
    if not 0 <= value < 1:
        raise InferplanError(f"--random-range-ratio must be in [0, 1), not {range_ratio!r}")
    return value


def _as_float(value: object, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise InferplanError(f"{flag} must be a number, not {value!r}")
    result = float(value)
    if math.isnan(result):
        raise InferplanError(f"{flag} must be a number, not nan")
    return result


def arrival_times_s(
    num_requests: int, request_rate: float, burstiness: float, rng: Seed
) -> FloatArray:
    """Arrival times (s, non-decreasing) for ``num_requests`` requests, by vLLM's rule."""
    num_requests = check_count(num_requests, "--num-prompts")
    rate = check_request_rate(request_rate)
    shape = check_burstiness(burstiness)
    if math.isinf(rate):
        return np.zeros(num_requests)
    check_span(num_requests, rate)
    if math.isinf(shape):
        gaps_s = np.full(num_requests, 1.0 / rate)
    else:
        gaps_s = make_rng(rng).gamma(shape=shape, scale=1.0 / (rate * shape), size=num_requests)
    times_s = np.cumsum(gaps_s)
    if times_s[-1] == 0:  # every gap underflowed to 0 (tiny burstiness): vLLM keeps zeros
        return times_s
    # vLLM rescales so the run lasts exactly N / rate; dividing first makes the last one exact.
    return (times_s / times_s[-1]) * (num_requests / rate)


def uniform_lengths(
    num_requests: int, length_tokens: int, range_ratio: float, rng: Seed, flag: str
) -> IntArray:
    """UniformInt[floor(len * (1 - r)), ceil(len * (1 + r))], at least 1 token (vLLM's bounds)."""
    num_requests = check_count(num_requests, "--num-prompts")
    length_tokens = check_count(length_tokens, flag)
    ratio = check_range_ratio(range_ratio)
    low = max(1, math.floor(length_tokens * (1 - ratio)))
    high = math.ceil(length_tokens * (1 + ratio))
    return make_rng(rng).integers(low, high + 1, size=num_requests, dtype=np.int64)


def random_lengths(
    num_prompts: int, input_len: int, output_len: int, range_ratio: float, rng: Seed
) -> tuple[IntArray, IntArray]:
    """(input_tokens, output_tokens) of vLLM's random dataset; inputs drawn first, as vLLM does."""
    generator = make_rng(rng)
    input_tokens = uniform_lengths(
        num_prompts, input_len, range_ratio, generator, "--random-input-len"
    )
    output_tokens = uniform_lengths(
        num_prompts, output_len, range_ratio, generator, "--random-output-len"
    )
    return input_tokens, output_tokens


def lognormal_lengths(
    num_requests: int, mean_tokens: float, sigma: float, max_tokens: int, rng: Seed
) -> IntArray:
    """Lognormal lengths whose uncapped mean is ``mean_tokens``, rounded, clipped to [1, max].

    ``sigma`` is the log-space standard deviation; the cap lowers the mean a little (it is where
    ``max_tokens`` truncates a generation).
    """
    num_requests = check_count(num_requests, "--num-prompts")
    mu, sigma = _log_params(mean_tokens, sigma)
    max_tokens = check_count(max_tokens, "max_tokens")
    lengths = np.rint(make_rng(rng).lognormal(mu, sigma, size=num_requests))
    return np.clip(lengths, 1, max_tokens).astype(np.int64)


def capped_lognormal_mean(mean_tokens: float, sigma: float, max_tokens: float) -> float:
    """E[min(X, max_tokens)] for a lognormal X with mean ``mean_tokens`` (before rounding)."""
    mu, sigma = _log_params(mean_tokens, sigma)
    if sigma == 0:
        return min(mean_tokens, max_tokens)
    z = (math.log(max_tokens) - mu) / sigma
    normal = NormalDist()
    return mean_tokens * normal.cdf(z - sigma) + max_tokens * (1 - normal.cdf(z))


def lognormal_mean_for_capped(capped_mean: float, sigma: float, max_tokens: float) -> float:
    """The lognormal mean whose lengths, capped at ``max_tokens``, average ``capped_mean``
    (bisection: the capped mean grows with the mean)."""
    if not 1 <= capped_mean < max_tokens:
        raise InferplanError(f"a capped mean must lie in [1, {max_tokens}), not {capped_mean!r}")
    low, high = capped_mean, capped_mean * 100
    for _ in range(100):
        mid = (low + high) / 2
        if capped_lognormal_mean(mid, sigma, max_tokens) < capped_mean:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _log_params(mean_tokens: float, sigma: float) -> tuple[float, float]:
    mean = _as_float(mean_tokens, "mean_tokens")
    spread = _as_float(sigma, "sigma")
    if not 1 <= mean < math.inf:
        raise InferplanError(f"a lognormal mean must be >= 1 token, not {mean_tokens!r}")
    if not 0 <= spread <= 10:
        raise InferplanError(f"a lognormal sigma must be in [0, 10], not {sigma!r}")
    return math.log(mean) - spread**2 / 2, spread


def truncated_lognormal_lengths(
    num_requests: int, mean_tokens: float, sigma: float, min_tokens: int, max_tokens: int, rng: Seed
) -> IntArray:
    """Lognormal lengths (uncapped mean ``mean_tokens``) kept only inside [min, max] tokens.

    Drawn by rejection; refused when the range holds under 0.1 % of the lognormal's mass.
    """
    num_requests = check_count(num_requests, "--num-prompts")
    mu, sigma = _log_params(mean_tokens, sigma)
    low, high = check_count(min_tokens, "min_tokens"), check_count(max_tokens, "max_tokens")
    if low > high:
        raise InferplanError(f"min_tokens {low} is above max_tokens {high}")
    acceptance = _mass_between(mu, sigma, low - 0.5, high + 0.5)
    if acceptance < _MIN_ACCEPTANCE:
        raise InferplanError(
            f"a lognormal with mean {mean_tokens} and sigma {sigma} puts {acceptance:.1e} of its "
            f"mass in [{low}, {high}] tokens; move the mean into that range"
        )
    generator = make_rng(rng)
    kept: list[IntArray] = []
    num_missing = num_requests
    while num_missing > 0:
        batch = math.ceil(num_missing / acceptance * 1.1) + 16
        lengths = np.rint(generator.lognormal(mu, sigma, size=batch)).astype(np.int64)
        inside = lengths[(lengths >= low) & (lengths <= high)][:num_missing]
        kept.append(inside)
        num_missing -= len(inside)
    return np.concatenate(kept)


def _mass_between(mu: float, sigma: float, low: float, high: float) -> float:
    if sigma == 0:
        return 1.0 if low <= math.exp(mu) <= high else 0.0
    normal = NormalDist(mu, sigma)
    return normal.cdf(math.log(high)) - normal.cdf(math.log(max(low, 1e-300)))


def reasoning_mix_lengths(
    num_requests: int,
    rng: Seed,
    *,
    long_fraction: float = 0.45,
    threshold_tokens: int = 5000,
    long_mean_tokens: float = 9000.0,
    long_sigma: float = 0.6,
    short_mean_tokens: float = 1200.0,
    short_sigma: float = 0.9,
    max_tokens: int = 32768,
) -> IntArray:
    """Reasoning output lengths: each request is long with probability ``long_fraction``.

    Long outputs are lognormal (mean ``long_mean_tokens``) kept above ``threshold_tokens`` and
    clipped at ``max_tokens``; short ones are lognormal (mean ``short_mean_tokens``) kept in
    [1, threshold]. With the defaults, 45 % exceed 5,000 tokens and the mean is about 5,400.
    """
    num_requests = check_count(num_requests, "--num-prompts")
    share = _as_float(long_fraction, "long_fraction")
    if not 0 <= share <= 1:
        raise InferplanError(f"long_fraction must be in [0, 1], not {long_fraction!r}")
    threshold = check_count(threshold_tokens, "threshold_tokens")
    if max_tokens <= threshold:
        raise InferplanError(f"max_tokens {max_tokens} must exceed threshold_tokens {threshold}")
    generator = make_rng(rng)
    is_long = generator.random(num_requests) < share
    lengths = np.empty(num_requests, dtype=np.int64)
    num_long = int(is_long.sum())
    if num_long:
        long = truncated_lognormal_lengths(
            num_long, long_mean_tokens, long_sigma, threshold + 1, 10**9, generator
        )
        lengths[is_long] = np.minimum(long, max_tokens)
    if num_long < num_requests:
        lengths[~is_long] = truncated_lognormal_lengths(
            num_requests - num_long, short_mean_tokens, short_sigma, 1, threshold, generator
        )
    return lengths


def re_time(workload: Workload, request_rate: float, burstiness: float, rng: Seed) -> Workload:
    """The same requests, in the same order, with arrivals drawn by vLLM's rule."""
    arrival_s = arrival_times_s(workload.num_requests, request_rate, burstiness, rng)
    note = f"re-timed: request rate {request_rate} req/s, burstiness {burstiness}"
    return replace(workload, arrival_s=arrival_s, notes=(*workload.notes, note))
