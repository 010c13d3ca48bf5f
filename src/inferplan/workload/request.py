"""The stream of requests a simulation replays, in columnar form.

A ``Workload`` holds one row per request as numpy arrays, sorted by arrival time, so that
100,000-request traces cost a few megabytes and the engine reads them without per-request
objects. Every trace reader and synthetic generator returns one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Workload:
    """Requests as columns; row ``i`` is request ``i`` (its id), rows sorted by ``arrival_s``.

    ``class_ids[i]`` indexes ``class_names``. ``priorities`` are integers where lower runs first
    (vLLM's convention). ``prefix_hashes`` (optional) holds, per request, the ids of its prompt's
    ``prefix_block_tokens``-token blocks (Mooncake's ``hash_ids``): equal ids mean reusable KV.
    With ``prefix_hashes_cover_output`` (session traces) they go on past the prompt and name the
    full blocks of its prompt + output (the next turn of the conversation reuses them).
    """

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    class_ids: IntArray
    class_names: tuple[str, ...] = ("default",)
    priorities: IntArray | None = None
    prefix_hashes: tuple[tuple[int, ...], ...] | None = None
    prefix_block_tokens: int | None = None
    source: str = "synthetic"
    notes: tuple[str, ...] = field(default=())
    prefix_hashes_cover_output: bool = False
    # Every request's prompt + output blocks (``prefix_block_tokens`` tokens) are its own,
    # without hashes: the engine counts them (``workload/prefixes.py`` ``with_own_blocks``).
    own_blocks: bool = False

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        columns = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "class_ids": self.class_ids,
        }
        if self.priorities is not None:
            columns["priorities"] = self.priorities
        for name, column in columns.items():
            if len(column) != n:
                raise InferplanError(
                    f"{self.source}: column {name} has {len(column)} rows, not {n}"
                )
        if self.prefix_hashes is not None and len(self.prefix_hashes) != n:
            raise InferplanError(
                f"{self.source}: prefix hashes for {len(self.prefix_hashes)} rows, not {n}"
            )
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise InferplanError(f"{self.source}: arrivals must be sorted by time")

    @property
    def num_requests(self) -> int:
        return len(self.arrival_s)
