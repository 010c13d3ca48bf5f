"""MoE routing: which experts a batch picks, where they sit, and what each rank must do.

**Routing distribution** ``p_e`` over the ``E`` routed experts: uniform, Zipf with exponent
``s`` in expert-id order (``p_e ∝ (e+1)^-s``: expert 0 is the hottest, the usual model of
skewed expert popularity), or a measured per-expert load histogram (``perf/expert_loads.py``,
optionally per traffic class and mixed by the workload's token shares). Each token picks ``k``
distinct experts; expert ``e`` is picked by one token with probability ``q_e = min(1, c p_e)``,
``c`` water-filled so that ``sum_e q_e = k`` (hot experts saturate at 1 under strong skew).

**Placement** (``perf/placement.py``): with expert parallelism, ``share[r, e]`` is the
fraction of expert ``e``'s tokens rank ``r`` serves (1 on the one rank that holds it; ``1/c``
on each of ``c`` copies). Without it, every rank holds a ``1/tp`` slice of every expert.

**One step of ``T`` tokens** (tokens route independently), per rank ``r``:

- assignment share ``a_r = sum_e q_e share[r,e] / k`` (sums to 1 over ranks);
- experts whose weights it reads ``t_r = sum_{e on r} 1 - (1 - q_e share[r,e])^T``;
- probability that a token is sent to it ``h_r = 1 - prod_e (1 - q_e share[r,e])``: a token
  travels once to each rank holding one of its experts (DeepEP dispatch, which counts tokens per
  rank, not per expert), so the all-to-all volume follows the placement.

The MoE layer waits for its slowest rank; ``perf/roofline.py`` times every rank and keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError
from inferplan.perf.placement import PLACEMENTS, place_experts, traffic_share

FloatArray = npt.NDArray[np.float64]
MAX_ZIPF = 5.0


@dataclass(frozen=True)
class Routing:
    """A routing distribution and an expert placement policy.

    ``Routing(s)`` is the scalar shorthand (``--moe-skew s``): Zipf in id order, linear
    placement. ``expert_loads`` (relative tokens per expert) replaces the Zipf law."""

    zipf_exponent: float = 0.0
    expert_loads: tuple[float, ...] | None = None
    placement: str = "linear"
    source: str = "--moe-skew"

    def __post_init__(self) -> None:
        if not 0 <= self.zipf_exponent <= MAX_ZIPF:
            raise InferplanError(
                f"{self.source}: Zipf exponent must be in [0, {MAX_ZIPF:g}], "
                f"got {self.zipf_exponent}"
            )
        if self.placement not in PLACEMENTS:
            raise InferplanError(
                f"--expert-placement: unknown {self.placement!r}; valid: {', '.join(PLACEMENTS)}"
            )
        if self.expert_loads is not None and (
            min(self.expert_loads, default=-1.0) < 0 or sum(self.expert_loads) <= 0
        ):
            raise InferplanError(f"{self.source}: expert loads must be >= 0 with a positive sum")

    def popularity(self, num_experts: int) -> FloatArray:
        """``p_e``: the probability that one pick goes to expert ``e``."""
        if self.expert_loads is not None:
            if len(self.expert_loads) != num_experts:
                raise InferplanError(
                    f"{self.source}: loads for {len(self.expert_loads)} experts, but the model "
                    f"has {num_experts} routed experts"
                )
            loads = np.asarray(self.expert_loads, dtype=np.float64)
            return loads / loads.sum()
        weights = np.arange(1, num_experts + 1, dtype=np.float64) ** -self.zipf_exponent
        return weights / weights.sum()


def default_routing(skew: float) -> Routing:
    """The routing where a run states none (the efficiency's ``routing_skew``): uniform, or a
    Zipf popularity of exponent ``skew`` whose hot experts sit at ids unrelated to their load
    (a trained router's), so placed ``oblivious``: neither stacked nor dealt out."""
    if skew <= 0:
        return Routing()
    return Routing(skew, placement="oblivious", source="routing_skew")


def pick_probabilities(p: FloatArray, top_k: int) -> FloatArray:
    """``q_e``: one token picks expert ``e``; ``sum_e q_e = k`` with no ``q_e`` above 1.

    With the ``j`` most popular experts saturated at 1, ``c = (k - j) / (mass of the rest)``;
    take the first ``j`` for which the next expert stays below 1 (water filling)."""
    order = np.argsort(-p, kind="stable")
    ranked = p[order]
    tail = np.cumsum(ranked[::-1])[::-1]  # tail[j] = mass of ranked[j:]
    q_ranked = np.where(np.arange(len(p)) < top_k, 1.0, 0.0)
    for saturated in range(top_k):
        if tail[saturated] <= 0:
            break
        scale = (top_k - saturated) / tail[saturated]
        if scale * ranked[saturated] <= 1.0:
            q_ranked = np.minimum(1.0, scale * ranked)
            break
    q = np.empty_like(q_ranked)
    q[order] = q_ranked
    return q


@dataclass(frozen=True)
class RankTable:
    """Per (rank, expert): the probability that one token's picks reach that rank's copy."""

    q_share: FloatArray  # [ranks, experts]: q_e * share[r, e]
    hosted: npt.NDArray[np.bool_]  # [ranks, experts]: rank r holds a copy of e
    top_k: int

    @property
    def num_ranks(self) -> int:
        return int(self.q_share.shape[0])

    @property
    def assignment_share(self) -> FloatArray:
        """``a_r``: each rank's share of the token-expert assignments (sums to 1)."""
        out: FloatArray = self.q_share.sum(axis=1) / self.top_k
        return out

    def touched(self, num_tokens: float) -> FloatArray:
        """``t_r``: expected distinct experts (copies) each rank runs for ``num_tokens``."""
        miss = (1.0 - self.q_share) ** num_tokens
        out: FloatArray = np.where(self.hosted, 1.0 - miss, 0.0).sum(axis=1)
        return out

    @property
    def hit_probability(self) -> FloatArray:
        """``h_r``: probability that one token is dispatched to each rank."""
        out: FloatArray = 1.0 - np.prod(1.0 - self.q_share, axis=1)
        return out


@lru_cache(maxsize=64)
def rank_table(
    routing: Routing, num_experts: int, top_k: int, ep: int, num_redundant: int = 0
) -> RankTable:
    """The per-rank picture of ``routing`` on ``ep`` expert-parallel ranks (1: no EP)."""
    q = pick_probabilities(routing.popularity(num_experts), top_k)
    if ep <= 1:
        return RankTable(q[None, :], np.ones((1, num_experts), dtype=bool), top_k)
    copies = place_experts(q, ep, routing.placement, num_redundant)
    return RankTable(q[None, :] * traffic_share(copies), copies > 0, top_k)


def expected_experts_touched(
    num_experts: int, top_k: int, num_tokens: int, zipf_exponent: float = 0.0, ep: int = 1
) -> tuple[float, float]:
    """(distinct experts on the most loaded rank, its share of all assignments), for Zipf
    routing with experts dealt round-robin over ``ep`` ranks (hot experts spread out)."""
    if num_tokens <= 0:
        return 0.0, 1.0 / ep
    table = rank_table(Routing(zipf_exponent, placement="round_robin"), num_experts, top_k, ep)
    shares = table.assignment_share
    busiest = int(np.argmax(shares))
    return float(table.touched(num_tokens)[busiest]), float(shares[busiest])
