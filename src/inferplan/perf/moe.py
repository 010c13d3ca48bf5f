"""MoE routing: how many distinct experts a batch touches, and how unevenly ranks are loaded.

Each token picks ``k`` of ``E`` experts. Expert ``e`` is picked by one token with probability
``q_e = min(1, c * p_e)``, where ``p_e`` is the routing distribution, uniform (``p_e = 1/E``)
or Zipf with exponent ``s`` (``p_e ∝ (e+1)^-s``, the usual model of skewed expert popularity),
and ``c`` makes ``sum_e q_e = k`` (``c = k`` unless the most popular experts saturate at 1).
Over ``T`` independent tokens expert ``e`` is touched with probability ``1 - (1 - q_e)^T``, so
the expected number of distinct experts, whose weights a step must read, is
``sum_e 1 - (1 - q_e)^T``: 1 token reads ``k`` experts, a large batch reads all ``E``.

With expert parallelism the experts are placed round-robin by popularity over the ``ep`` ranks
(what a load balancer such as DeepSeek's EPLB aims for); the step waits for the most loaded rank,
whose share of the token-expert assignments is ``max_r sum_{e in r} q_e / sum_e q_e``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from inferplan.errors import InferplanError


@dataclass(frozen=True)
class Routing:
    """A routing distribution over experts: Zipf exponent 0 is uniform."""

    zipf_exponent: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.zipf_exponent <= 5:
            raise InferplanError(f"--moe-skew: must be in [0, 5], got {self.zipf_exponent}")


@lru_cache(maxsize=64)
def _pick_probabilities(num_experts: int, top_k: int, zipf_exponent: float) -> np.ndarray:
    ranks = np.arange(1, num_experts + 1, dtype=np.float64)
    weights = ranks**-zipf_exponent
    p = weights / weights.sum()  # descending
    # Scale so that sum_e min(1, c * p_e) = k: one token touches exactly k experts. With the
    # j most popular experts saturated at 1, c = (k - j) / sum of the rest; take the first j
    # for which the next expert stays below 1 (water filling).
    tail = np.cumsum(p[::-1])[::-1]  # tail[j] = sum of p[j:]
    for saturated in range(top_k):
        scale = (top_k - saturated) / tail[saturated]
        if scale * p[saturated] <= 1.0:
            return np.minimum(1.0, scale * p)
    return np.where(np.arange(num_experts) < top_k, 1.0, 0.0)


@lru_cache(maxsize=4096)
def expected_experts_touched(
    num_experts: int, top_k: int, num_tokens: int, zipf_exponent: float = 0.0, ep: int = 1
) -> tuple[float, float]:
    """(distinct experts touched on the busiest rank, that rank's share of all assignments)."""
    if num_tokens <= 0:
        return 0.0, 1.0 / ep
    q = _pick_probabilities(num_experts, top_k, zipf_exponent)
    touched = 1.0 - (1.0 - q) ** num_tokens
    if ep == 1:
        return float(touched.sum()), 1.0
    per_rank_load = np.array([q[r::ep].sum() for r in range(ep)])
    busiest = int(np.argmax(per_rank_load))
    return float(touched[busiest::ep].sum()), float(per_rank_load[busiest] / q.sum())
