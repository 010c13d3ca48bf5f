"""The workload's random streams: one per purpose, each spawned from the user's ``--seed``.

Request lengths use ``numpy.random.default_rng(seed)`` itself (vLLM's random dataset draws from
that stream, inputs then outputs). Everything else draws from a child stream of
``SeedSequence(seed)`` with its own spawn key, listed here once, so that adding a draw to one
purpose (a burst, prefix groups, a noisy length predictor) never shifts another's, and two
purposes can never share a stream by accident.
"""

from __future__ import annotations

import numpy as np

# spawn key of each purpose; keys are never reused or renumbered (outputs would change)
STREAM_KEYS = {
    "arrivals": 0,  # inter-arrival gaps (``dataset.py``)
    "predictor": 2,  # the noisy output-length predictor's errors (``predict.py``)
    "prefixes": 1,  # each request's shared-prefix group (``prefixes.py``)
    "burst": 3,  # the reasoning-burst requests' lengths (``burst.py``)
}


def stream(seed: int, purpose: str) -> np.random.Generator:
    """The generator of ``purpose`` (a key of ``STREAM_KEYS``) for ``seed``."""
    key = STREAM_KEYS[purpose]
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))
