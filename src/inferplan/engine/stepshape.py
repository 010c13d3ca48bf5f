"""The shape of the vector step's batch (``StepSeconds.seconds``' arguments), shared by the
column form (``Replica._decode_and_admit_step``) and the implicit form (``implicit_step.py``)."""

from __future__ import annotations


def step_shape(
    n: int, decode_context: int, chunks: list[int], hits: list[int]
) -> tuple[int, float, int, int, int, int]:
    """``StepBatch``'s fields (``StepSeconds.seconds``' arguments) of the vector step: ``n``
    decodes of total context ``decode_context`` and admitted rows with these first chunks,
    each starting at its prefix-cache hit (a one-token chunk after a hit is a decode in
    shape, as ``Replica._batch`` counts it)."""
    if len(chunks) == 1:  # the usual case: the same numbers, without the general sums
        q, o = chunks[0], hits[0]
        if q == 1 and o:
            return 0, 0.0, 0, 0, n + 1, decode_context + o + 1
        return q, float(q * o + q * (q + 1) / 2), o, 1, n, decode_context
    # One pass over the rows (an admission step above capacity has several): the same sums,
    # integer-valued (the attention pairs too), so their order does not matter.
    tokens = context = num_prefill = 0
    pairs = 0.0
    for q, o in zip(chunks, hits, strict=True):
        if q == 1 and o:
            decode_context += o + 1
            continue
        tokens += q
        pairs += q * o + q * (q + 1) / 2
        context += o
        num_prefill += 1
    return tokens, pairs, context, num_prefill, n + len(chunks) - num_prefill, decode_context
