"""The request-trace file formats inferplan reads, and how a file's format is recognised.

Owns the table of formats (one ``TraceFormat`` per format: which column or key holds each field,
and in which unit) and ``detect_format``, which picks a format from a file's CSV header or its
first JSON object's keys, so a file is recognised by content, not by its extension. Column names
match case-insensitively. The readers themselves are in ``traces.py``.

Formats and sources (columns as documented by each upstream project):

- ``azure_2023``: Azure LLM inference trace 2023 (Azure/AzurePublicDataset; Patel et al.,
  "Splitwise", ISCA 2024): ``TIMESTAMP`` (naive wall-clock datetime), ``ContextTokens``,
  ``GeneratedTokens``.
- ``vidur``: Vidur's processed traces (microsoft/vidur ``data/processed_traces``): ``arrived_at``
  (s), ``num_prefill_tokens``, ``num_decode_tokens``.
- ``vidur_lengths``: Vidur's length-only traces (e.g. arxiv summarization): the same token columns
  plus ``num_total_tokens``, ``pd_ratio`` and no arrival times (every request arrives at 0).
- ``csv`` and ``jsonl``: inferplan's plain format, ``arrival_s``, ``input_tokens``,
  ``output_tokens`` and optional ``class``, ``priority`` (lower runs first, as in vLLM) and
  ``session_id`` (requests of one conversation: each turn's prompt continues the previous
  turn's prompt + output, which gives them prefix hashes, ``prefixes.session_hashes``).
- ``mooncake``: Mooncake traces (kvcache-ai/Mooncake, FAST'25): ``timestamp`` (ms),
  ``input_length``, ``output_length`` and ``hash_ids``, one id per 512-token prompt block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TraceKind = Literal["csv", "jsonl"]


@dataclass(frozen=True)
class TraceFormat:
    """Where each request field lives in one trace format (names as the format spells them)."""

    name: str
    kind: TraceKind
    input_key: str
    output_key: str
    arrival_key: str | None = None  # None: the format has no arrival times; all arrive at 0
    arrival_units_per_s: float = 1.0  # 1000 for a column in ms
    is_arrival_datetime: bool = False  # arrival is a wall-clock datetime string
    class_key: str | None = None
    priority_key: str | None = None
    prefix_hash_key: str | None = None
    prefix_block_tokens: int | None = None
    extra_keys: tuple[str, ...] = ()  # other columns that identify the format
    # Conversation id: a session's requests are turns sharing their prefix (``prefixes.py``).
    session_key: str | None = None

    @property
    def required_keys(self) -> tuple[str, ...]:
        keys = (self.arrival_key, self.input_key, self.output_key)
        return tuple(key for key in keys if key is not None)

    @property
    def known_keys(self) -> tuple[str, ...]:
        optional = (self.class_key, self.priority_key, self.prefix_hash_key, self.session_key)
        return (
            self.required_keys + tuple(key for key in optional if key is not None) + self.extra_keys
        )

    def describe(self) -> str:
        """For error messages, e.g. ``vidur (CSV: arrived_at,num_prefill_tokens,...)``."""
        return f"{self.name} ({self.kind.upper()}: {','.join(self.required_keys)})"


def _plain(kind: TraceKind) -> TraceFormat:
    """inferplan's plain format: the same columns as a CSV file or as JSON lines."""
    return TraceFormat(
        name=kind,
        kind=kind,
        arrival_key="arrival_s",
        input_key="input_tokens",
        output_key="output_tokens",
        class_key="class",
        priority_key="priority",
        session_key="session_id",
    )


TRACE_FORMATS: dict[str, TraceFormat] = {
    fmt.name: fmt
    for fmt in (
        TraceFormat(
            name="azure_2023",
            kind="csv",
            arrival_key="TIMESTAMP",
            is_arrival_datetime=True,
            input_key="ContextTokens",
            output_key="GeneratedTokens",
        ),
        TraceFormat(
            name="vidur",
            kind="csv",
            arrival_key="arrived_at",
            input_key="num_prefill_tokens",
            output_key="num_decode_tokens",
        ),
        TraceFormat(
            name="vidur_lengths",
            kind="csv",
            input_key="num_prefill_tokens",
            output_key="num_decode_tokens",
            extra_keys=("num_total_tokens", "pd_ratio"),
        ),
        _plain("csv"),
        TraceFormat(
            name="mooncake",
            kind="jsonl",
            arrival_key="timestamp",
            arrival_units_per_s=1000.0,
            input_key="input_length",
            output_key="output_length",
            prefix_hash_key="hash_ids",
            prefix_block_tokens=512,
        ),
        _plain("jsonl"),
    )
}


def accepted_formats() -> str:
    """The formats, as one line for an error message."""
    return "; ".join(fmt.describe() for fmt in TRACE_FORMATS.values())


def detect_format(kind: TraceKind, keys: list[str]) -> TraceFormat | None:
    """The format of this kind whose columns best match ``keys``; ``None`` when none matches.

    A format that has all its required columns beats one that does not; then the one that
    recognises more of the columns wins (so ``vidur`` beats ``vidur_lengths`` when ``arrived_at``
    is present, and a plain header missing a column is still reported as that format's missing
    column rather than as an unknown format).
    """
    present = {key.strip().lower() for key in keys}
    best: TraceFormat | None = None
    best_score = (False, 0)
    for fmt in TRACE_FORMATS.values():
        if fmt.kind != kind:
            continue
        has_required = all(key.lower() in present for key in fmt.required_keys)
        num_known = sum(key.lower() in present for key in fmt.known_keys)
        score = (has_required, num_known)
        if num_known > 0 and score > best_score:
            best, best_score = fmt, score
    return best
