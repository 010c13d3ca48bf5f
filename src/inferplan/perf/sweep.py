"""The ``roofline`` command's tables: prefill per prompt length, decode per batch size.

Prefill rows time one prompt of ``input_len`` tokens in one step (no chunking), as a
single-request TTFT floor. Decode rows time one step of ``batch_size`` sequences each attending
to ``context_len`` tokens. The compute-bound turning point is the smallest batch size at which
decode compute time exceeds memory time. Attention's arithmetic intensity does not grow with the
batch (each sequence reads its own KV), so the turn is a property of the weight GEMMs: it is
found with attention taken out (one token of context per sequence), by bisection.
"""

from __future__ import annotations

from typing import Any

from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.protocol import StepTimeModel


def prefill_row(model: StepTimeModel, input_len: int) -> dict[str, Any]:
    batch = StepBatch(
        prefill_tokens=input_len,
        prefill_attention_pairs=chunk_attention_pairs(input_len, 0),
        num_prefill_seqs=1,
    )
    step = model.step_time(batch)
    return {
        "input_len": input_len,
        "context_len": input_len,
        "step_time_s": step.total_s,
        "tokens_per_s": input_len / step.total_s,
        "bound": step.bound,
        "by_bound_s": step.by_bound_s,
    }


def decode_batch(batch_size: int, context_len: int) -> StepBatch:
    return StepBatch(num_decode_seqs=batch_size, decode_context_tokens=batch_size * context_len)


def decode_row(model: StepTimeModel, batch_size: int, context_len: int) -> dict[str, Any]:
    step = model.step_time(decode_batch(batch_size, context_len))
    return {
        "batch_size": batch_size,
        "context_len": context_len,
        "step_time_s": step.total_s,
        "tokens_per_s": batch_size / step.total_s,
        "bound": step.bound,
        "by_bound_s": step.by_bound_s,
    }


def compute_bound_batch_size(model: StepTimeModel, limit: int = 65536) -> int | None:
    """Smallest decode batch whose weight GEMMs are compute-bound (None if none <= limit)."""

    def compute_bound(n: int) -> bool:
        parts = model.step_time(decode_batch(n, 1)).by_bound_s
        return parts["compute"] > parts["memory"]

    if not compute_bound(limit):
        return None
    lo, hi = 0, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid
    return hi
