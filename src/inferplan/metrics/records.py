"""What a simulation run leaves behind for the metrics layer: one row per request.

This module owns the contract between the engine and the summaries: ``RequestStatus`` (every
request ends completed, rejected or aborted) and ``RequestRecords``, a frozen set of numpy columns.
The engine allocates the columns with ``RequestRecords.empty`` (or builds them itself), fills them
in place while it runs, and hands the result to ``inferplan.metrics.summarize``.

Time conventions (all absolute seconds of simulation time, like ``now`` in the engine):

- ``dispatch_s`` is when the client *wanted* to send the request (the trace's arrival time);
  ``arrival_s`` is when it actually reached the server. They differ only when a client-side
  concurrency limit (``vllm bench serve --max-concurrency``) held the request back. vLLM's
  benchmark starts its latency clock after that wait, so latencies here are measured from
  ``arrival_s`` (vLLM 0.11.0 ``vllm/benchmarks/serve.py``).
- Times that never happened (a rejected request's first token) are ``nan``, never ``-1``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class RequestStatus(IntEnum):
    """How a request ended. Every request ends in exactly one of these."""

    COMPLETED = 0
    REJECTED = 1  # refused at admission (queue full, prompt longer than max-model-len, ...)
    ABORTED = 2  # admitted but never finished: client timeout, failure, or the run ended first


@dataclass(frozen=True)
class RequestRecords:
    """Per-request outcomes as columns; row ``i`` is request ``i``.

    ``class_ids[i]`` indexes ``class_names``. ``output_tokens`` counts tokens actually generated;
    ``requested_output_tokens`` is what the request asked for (``max_tokens``), used to place it
    in an output-length bucket whatever its fate; it defaults to ``output_tokens`` when the
    engine does not set it. ``max_itl_s`` is the request's worst gap between consecutive tokens
    (``nan`` with fewer than two tokens). ``swapped_bytes`` counts KV bytes swapped out plus in.
    """

    arrival_s: FloatArray
    dispatch_s: FloatArray
    first_scheduled_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    status: IntArray
    class_ids: IntArray
    class_names: tuple[str, ...]
    num_preemptions: IntArray
    recomputed_tokens: IntArray
    max_itl_s: FloatArray
    swapped_bytes: IntArray
    requested_output_tokens: IntArray | None = None
    # With prefix caching (vLLM v1): prompt tokens found cached at admissions, and the tokens
    # looked up (each admission, resumes included); None when the run had no prefix hashes.
    cached_tokens: IntArray | None = None
    prefix_queried_tokens: IntArray | None = None

    def __post_init__(self) -> None:
        num_rows = len(self.arrival_s)
        for spec in fields(self):
            column = getattr(self, spec.name)
            if isinstance(column, np.ndarray) and len(column) != num_rows:
                raise ValueError(
                    f"RequestRecords.{spec.name} has {len(column)} rows, not {num_rows}"
                )
        if num_rows and len(self.class_names) == 0:
            raise ValueError("RequestRecords.class_names is empty")

    @property
    def num_requests(self) -> int:
        return len(self.arrival_s)

    @property
    def requested_tokens(self) -> IntArray:
        """The requested output length, falling back to the generated one."""
        if self.requested_output_tokens is None:
            return self.output_tokens
        return self.requested_output_tokens

    @classmethod
    def empty(
        cls,
        num_requests: int,
        *,
        class_names: tuple[str, ...] = ("default",),
    ) -> RequestRecords:
        """Columns for ``num_requests`` requests that the engine fills in place.

        Times start as ``nan``, counts as 0 and every status as ``ABORTED``, so a request the run
        never finishes is reported as aborted without further bookkeeping.
        """

        def times() -> FloatArray:
            return np.full(num_requests, np.nan, dtype=np.float64)

        def counts() -> IntArray:
            return np.zeros(num_requests, dtype=np.int64)

        return cls(
            arrival_s=times(),
            dispatch_s=times(),
            first_scheduled_s=times(),
            first_token_s=times(),
            finish_s=times(),
            input_tokens=counts(),
            output_tokens=counts(),
            status=np.full(num_requests, int(RequestStatus.ABORTED), dtype=np.int64),
            class_ids=counts(),
            class_names=class_names,
            num_preemptions=counts(),
            recomputed_tokens=counts(),
            max_itl_s=times(),
            swapped_bytes=counts(),
            requested_output_tokens=counts(),
        )

    def check(self) -> None:
        """Raise ``ValueError`` if the rows break the contract (an engine bug, not a user error)."""
        valid = np.isin(self.status, [int(s) for s in RequestStatus])
        if not np.all(valid):
            raise ValueError(f"unknown request status in rows {np.flatnonzero(~valid)[:5]}")
        if np.any((self.class_ids < 0) | (self.class_ids >= len(self.class_names))):
            raise ValueError("a class id is outside class_names")
        done = self.status == RequestStatus.COMPLETED
        for name in ("arrival_s", "first_token_s", "finish_s"):
            bad = done & ~np.isfinite(getattr(self, name))
            if np.any(bad):
                raise ValueError(f"completed requests {np.flatnonzero(bad)[:5]} lack {name}")
        if np.any(done & (self.output_tokens < 1)):
            raise ValueError("a completed request generated no tokens")
        order_bad = done & (
            (self.first_token_s < self.arrival_s) | (self.finish_s < self.first_token_s)
        )
        if np.any(order_bad):
            raise ValueError(f"requests {np.flatnonzero(order_bad)[:5]} end before they start")
