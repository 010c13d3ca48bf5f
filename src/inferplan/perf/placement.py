"""Expert placement: which expert-parallel rank holds which experts (and copies of hot ones).

Policies, as plain functions from per-expert load to a ``copies[rank, expert]`` count matrix:

- ``linear``: contiguous blocks of expert ids, the first ``E mod ep`` ranks one more (vLLM's
  default ``--expert-placement-strategy linear``);
- ``round_robin``: expert ``e`` on rank ``e mod ep`` (vLLM's ``round_robin``);
- ``oblivious``: contiguous id blocks, as ``linear``, for routing whose hot experts have nothing
  to do with their ids (a trained router's): the popularity is dealt over the ids by a seeded
  random permutation, and of ``OBLIVIOUS_DRAWS`` such permutations the one whose busiest rank
  is the median is kept (a typical load-oblivious placement, not the stacked worst case that
  ``linear`` is under Zipf-in-id-order popularity, nor the dealt-out best case of
  ``round_robin``). Deterministic: the seed is fixed;
- ``eplb``: DeepSeek's Expert Parallelism Load Balancer, global policy (github.com/deepseek-ai/EPLB;
  DeepSeek-V3 technical report §3.4): ``R`` redundant slots go one at a time to the expert with
  the highest load per copy, then the copies, heaviest first, are packed onto the rank with the
  least load that still has a free slot (each rank has ``(E + R) / ep`` slots). A rank takes
  a second copy of an expert only when no other rank has room. With ``R = 0`` it only reorders
  experts across ranks (TensorRT-LLM's placement-only online balancer).

Tokens picking an expert with several copies are split evenly among them (``traffic_share``),
as vLLM's EPLB and TensorRT-LLM's load balancer route a token to one replica.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def linear(loads: FloatArray, ep: int, num_redundant: int) -> IntArray:
    copies = np.zeros((ep, len(loads)), dtype=np.int64)
    for rank, block in enumerate(np.array_split(np.arange(len(loads)), ep)):
        copies[rank, block] = 1
    return copies


def round_robin(loads: FloatArray, ep: int, num_redundant: int) -> IntArray:
    copies = np.zeros((ep, len(loads)), dtype=np.int64)
    experts = np.arange(len(loads))
    copies[experts % ep, experts] = 1
    return copies


OBLIVIOUS_DRAWS = 33
OBLIVIOUS_SEED = 0


def oblivious(loads: FloatArray, ep: int, num_redundant: int) -> IntArray:
    rng = np.random.default_rng(OBLIVIOUS_SEED)
    draws = [rng.permutation(len(loads)) for _ in range(OBLIVIOUS_DRAWS)]

    def busiest(order: IntArray) -> float:
        return max(float(loads[block].sum()) for block in np.array_split(order, ep))

    typical = sorted(draws, key=busiest)[OBLIVIOUS_DRAWS // 2]
    copies = np.zeros((ep, len(loads)), dtype=np.int64)
    for rank, block in enumerate(np.array_split(typical, ep)):
        copies[rank, block] = 1
    return copies


def replicate(loads: FloatArray, num_redundant: int) -> IntArray:
    """Copies per expert: each redundant slot goes to the highest load per copy."""
    counts = np.ones(len(loads), dtype=np.int64)
    for _ in range(num_redundant):
        counts[int(np.argmax(loads / counts))] += 1
    return counts


def eplb(loads: FloatArray, ep: int, num_redundant: int) -> IntArray:
    num_experts = len(loads)
    slots = num_experts + num_redundant
    if slots % ep:
        raise InferplanError(
            f"--num-redundant-experts {num_redundant}: {num_experts} experts + redundant "
            f"copies must fill the {ep} expert-parallel ranks evenly (a multiple of {ep})"
        )
    counts = replicate(loads, num_redundant)
    per_copy = loads / counts
    order = sorted(
        ((e, c) for e in range(num_experts) for c in range(counts[e])),
        key=lambda item: (-per_copy[item[0]], item[0], item[1]),
    )
    copies = np.zeros((ep, num_experts), dtype=np.int64)
    rank_load = np.zeros(ep)
    free = np.full(ep, slots // ep)
    for expert, _ in order:
        open_ranks = free > 0
        fresh = open_ranks & (copies[:, expert] == 0)
        candidates = np.flatnonzero(fresh if fresh.any() else open_ranks)
        rank = int(candidates[np.argmin(rank_load[candidates])])
        copies[rank, expert] += 1
        rank_load[rank] += per_copy[expert]
        free[rank] -= 1
    return copies


PLACEMENTS: dict[str, Callable[[FloatArray, int, int], IntArray]] = {
    "linear": linear,
    "round_robin": round_robin,
    "eplb": eplb,
    "oblivious": oblivious,
}


def place_experts(loads: FloatArray, ep: int, placement: str, num_redundant: int) -> IntArray:
    """``copies[rank, expert]`` for ``loads`` (any non-negative per-expert weights)."""
    if placement not in PLACEMENTS:
        raise InferplanError(
            f"--expert-placement: unknown {placement!r}; valid: {', '.join(PLACEMENTS)}"
        )
    if num_redundant and placement != "eplb":
        raise InferplanError(
            "--num-redundant-experts: copies of hot experts need --expert-placement eplb"
        )
    return PLACEMENTS[placement](np.asarray(loads, dtype=np.float64), ep, num_redundant)


def traffic_share(copies: IntArray) -> FloatArray:
    """``share[rank, expert]``: the fraction of an expert's tokens each rank serves."""
    totals = copies.sum(axis=0)
    return copies / np.maximum(totals, 1)
