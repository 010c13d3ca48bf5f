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
    pre = [(q, o) for q, o in zip(chunks, hits, strict=True) if q > 1 or o == 0]
    decode_context += sum(o + 1 for q, o in zip(chunks, hits, strict=True) if q == 1 and o)
    return (
        sum(q for q, _ in pre),
        float(sum(q * o + q * (q + 1) / 2 for q, o in pre)),
        sum(o for _, o in pre),
        len(pre),
        n + len(chunks) - len(pre),
        decode_context,
    )
