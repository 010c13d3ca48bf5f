"""The "long outputs coincide" workload (``--dataset-name reasoning-burst``, issue #13).

Admitting on a mean output length over-commits KV memory when several long outputs run at the
same time; a Poisson mix rarely lines them up, so this workload does it on purpose. It is the
``reasoning`` dataset (``dataset.py``: short prompts, 45 % of outputs above 5,000 tokens) for
``num_prompts - k`` *background* requests at ``--request-rate``, plus a *burst* of
``k = max(1, num_prompts // 10)`` requests that all arrive at the same instant, the median
background arrival time (mid-run, with the engine already loaded). Burst requests have the
background's prompt lengths (resampled) and outputs from the mix's long component only
(lognormal, mean 9,000 tokens, sigma 0.6, above 5,000, capped at ``--max-output-tokens``).
Classes: ``background`` (0) and ``burst`` (1), so the summary's per-class section separates
them. Deterministic: the burst draws come from a stream spawned from the seed, apart from the
background's lengths and arrivals.
"""

from __future__ import annotations

import numpy as np

from inferplan.workload.request import Workload
from inferplan.workload.streams import stream
from inferplan.workload.synthetic import truncated_lognormal_lengths

BURST_SHARE = 10  # one request in ten belongs to the burst
LONG_MEAN_TOKENS, LONG_SIGMA, LONG_ABOVE_TOKENS = 9000.0, 0.6, 5000  # synthetic.py's long mix


def burst_size(num_prompts: int) -> int:
    return max(1, num_prompts // BURST_SHARE)


def add_burst(background: Workload, num_burst: int, seed: int, max_tokens: int) -> Workload:
    """``background`` plus ``num_burst`` long-output requests arriving together (module doc)."""
    rng = stream(seed, "burst")
    prompts = rng.choice(background.input_tokens, size=num_burst)
    outputs = np.minimum(
        truncated_lognormal_lengths(
            num_burst, LONG_MEAN_TOKENS, LONG_SIGMA, LONG_ABOVE_TOKENS + 1, 10**9, rng
        ),
        max_tokens,
    )
    at_s = float(np.median(background.arrival_s))
    arrival = np.concatenate([background.arrival_s, np.full(num_burst, at_s)])
    order = np.argsort(arrival, kind="stable")  # burst after background arrivals at that time
    classes = np.concatenate(
        [np.zeros(background.num_requests, np.int64), np.ones(num_burst, np.int64)]
    )
    return Workload(
        arrival_s=arrival[order],
        input_tokens=np.concatenate([background.input_tokens, prompts])[order],
        output_tokens=np.concatenate([background.output_tokens, outputs])[order],
        class_ids=classes[order],
        class_names=("background", "burst"),
        source="reasoning-burst",
        notes=(
            *background.notes,
            f"burst: {num_burst} long-output requests arriving together at {at_s:.3f} s",
        ),
    )
