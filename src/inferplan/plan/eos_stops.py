"""Early EOS stops in ``vllm bench serve``'s ``random`` runs: a constant per-token stop hazard.

``vllm bench serve --dataset-name random`` sends every request with ``max_tokens`` set to
``--random-output-len`` and, unless ``--ignore-eos`` is passed, lets the model stop at its EOS
token (vLLM 0.11 ``vllm/benchmarks/datasets.py`` ``RandomDataset.sample``: fixed lengths at the
tool's default ``--random-range-ratio 0.0``; ``benchmarks/serve.py``: ``ignore_eos`` off by
default). The GPUStack runs do not pass it (the table's ``ignore_eos`` column says ``false``), and
several publish a mean output below the requested length (Qwen3-14B 99.64 of 100, GLM-4.6 97.03,
DeepSeek-R1 99.52): a few requests stopped early. With identical requests sent at t = 0 an
engine that fills its pool and drains it serves them in lockstep waves that all finish on one
step; an early stop frees a slot mid-wave, the scheduler admits a request whose prefill stalls
every decode, and the waves come apart (docs/validation.md, ``sglat`` and ``sglat2``).

Which requests stop, and where, is not published; the model is the simplest that reproduces the
published mean: after each generated token the model emits EOS with one probability ``p`` (a
random-token prompt gives it no reason to prefer a length), so a request's length is
``min(G, L)`` with ``G`` geometric on 1, 2, ... and ``L`` the requested length, and

    E[min(G, L)] = sum_{k=0}^{L-1} (1 - p)^k = (1 - (1 - p)^L) / p,

which falls from ``L`` (``p = 0``) to 1 (``p = 1``); ``p`` is solved from the published mean by
bisection. The lengths are the distribution's quantiles at stratified points ``(i + 1/2) / n``
(so a run's mean is the published one to within a token's share, whatever the seed), put in a
seeded random order. Nothing is fitted. Not applied by default: ``random_outputs`` is what a
run's workload would use (``scripts/sglang_stalls.py --eos-hazard``), and docs/validation.md
(``sglat2``) has what it moves.
"""

from __future__ import annotations

import numpy as np

from inferplan.plan.published import PublishedRow

# Bisection on p in [0, 1]: 60 halvings bring it to 1e-18, far below a token's share of a mean.
_BISECTION_STEPS = 60


def expected_length(p: float, limit: int) -> float:
    """``E[min(G, limit)]`` for ``G`` geometric on 1, 2, ... with stop probability ``p``."""
    if p <= 0.0:
        return float(limit)
    if p >= 1.0:
        return 1.0
    return float((1.0 - (1.0 - p) ** limit) / p)


def stop_hazard(mean: float, limit: int) -> float:
    """The per-token stop probability whose capped geometric length has mean ``mean``
    (``0 < mean <= limit``; 0 at ``limit``, 1 at or below 1 token)."""
    if mean >= limit:
        return 0.0
    if mean <= 1.0:
        return 1.0
    low, high = 0.0, 1.0  # expected_length falls as p grows
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if expected_length(mid, limit) > mean:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def early_stop_lengths(limit: int, mean: float, num: int, rng: np.random.Generator) -> np.ndarray:
    """``num`` output lengths of at most ``limit`` tokens whose mean is ``mean``: the capped
    geometric's quantiles at ``(i + 1/2) / num``, in an order drawn from ``rng``."""
    p = stop_hazard(mean, limit)
    if p <= 0.0:
        return np.full(num, limit, dtype=np.int64)
    u = (np.arange(num, dtype=np.float64) + 0.5) / num
    if p >= 1.0:
        return np.ones(num, dtype=np.int64)
    # P(G <= k) = 1 - (1 - p)^k, so the u-quantile is ceil(log(1 - u) / log(1 - p)).
    lengths = np.ceil(np.log1p(-u) / np.log1p(-p)).astype(np.int64)
    lengths = np.clip(lengths, 1, limit)
    return lengths[rng.permutation(num)]


EOS_SEED = 11  # the stream that orders the stopped requests of a run (issue 11)


def random_outputs(row: PublishedRow, num: int) -> np.ndarray:
    """The output lengths of ``num`` requests of ``row``'s ``random`` run with early stops: the
    requested length, stopped early where the published mean is below it (a mean below the
    request means EOS was not ignored), else the published mean rounded, as the bundled
    workload has it. Not the bundled workload's default (``sglat2`` in docs/validation.md:
    the rows it moves get no better on the whole); ``scripts/sglang_stalls.py --eos-hazard``."""
    limit, mean = row.output_len, row.output_len_mean or float(row.output_len or 1)
    if not limit or mean >= limit:
        return np.full(num, max(1, round(mean)), dtype=np.int64)
    return early_stop_lengths(limit, mean, num, np.random.default_rng(EOS_SEED))
