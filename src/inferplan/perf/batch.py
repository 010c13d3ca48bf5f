"""One engine step's batch in aggregate form, and the step time a model returns for it.

Aggregate form means no per-sequence lists: a step-time model's cost is O(1) in the batch size.
The scheduler (or the fast engine, in closed form) accumulates these sums.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

BOUNDS = ("compute", "memory", "communication", "overhead")


@dataclass(frozen=True)
class StepBatch:
    """What one forward pass processes.

    ``prefill_attention_pairs`` is the number of (query, key) pairs the prefill chunks' causal
    attention computes: a chunk of ``q`` tokens after ``o`` cached ones adds ``q*o + q*(q+1)/2``.
    ``prefill_context_tokens`` sums the ``o`` (cached tokens each chunk reads back).
    ``decode_context_tokens`` sums, over decoding sequences, the tokens each attends to (its KV
    length including the token being generated). ``num_draft_tokens`` (speculative decoding,
    ``perf/speculative.py``): each decoding sequence also verifies that many draft tokens in the
    same forward, ``1 + num_draft_tokens`` query rows per sequence (0: plain decode).
    """

    prefill_tokens: int = 0
    prefill_attention_pairs: float = 0.0
    prefill_context_tokens: int = 0
    num_prefill_seqs: int = 0
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0
    num_draft_tokens: int = 0

    @property
    def num_decode_tokens(self) -> int:
        """Query rows of the decoding sequences: one each, plus their draft tokens."""
        return self.num_decode_seqs * (1 + self.num_draft_tokens)

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.num_decode_tokens

    @property
    def num_logit_tokens(self) -> int:
        """Rows that reach the LM head: one per decoding sequence (and per draft token it
        verifies) and one per prefill chunk."""
        return self.num_decode_tokens + self.num_prefill_seqs


def chunk_attention_pairs(chunk_tokens: int, cached_tokens: int) -> float:
    """Causal (query, key) pairs of one prefill chunk after ``cached_tokens`` tokens."""
    return chunk_tokens * cached_tokens + chunk_tokens * (chunk_tokens + 1) / 2


@dataclass(frozen=True)
class StepTime:
    """A step's time and where it went. ``by_bound_s`` sums to ``total_s``."""

    total_s: float
    by_bound_s: dict[str, float]
    by_operator_s: dict[str, float] = field(default_factory=dict)

    @property
    def bound(self) -> str:
        """The bound that takes the largest share of the step."""
        return max(BOUNDS, key=lambda b: self.by_bound_s.get(b, 0.0))


def window_range(
    windows: Iterable[int | None], num_seqs: int, context_tokens: int
) -> tuple[float, float]:
    """The context range around ``context_tokens`` in which none of the sliding ``windows``
    (None or 0: full attention) saturates or unsaturates (its reads stop growing at
    ``window * num_seqs``)."""
    lower, limit = 0.0, float("inf")
    for window in windows:
        if window:
            point = float(window * num_seqs)
            if context_tokens < point:
                limit = min(limit, point)
            else:
                lower = max(lower, point)
    return lower, limit
