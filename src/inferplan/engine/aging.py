"""Shortest-predicted-first with an aging bound (``--scheduling-policy spf --spf-aging-s X``).

Pure SPF starves long requests: under load a long reasoning request can wait behind every
shorter arrival for ever. With an aging bound, a request that has been waiting (since it
reached the server) for ``X`` seconds or more is *aged*: aged requests are served before the
others, first-come first-served among themselves (by arrival, i.e. request id), so no request
waits much longer than ``X`` plus the time the requests aged before it take to be admitted.
Predicted-length schedulers in the literature prevent starvation in the same spirit, by
promoting a request once it has waited past a threshold (Fu et al., "Efficient LLM Scheduling
by Learning to Rank", arXiv 2408.15792); the FCFS order among aged requests is this module's
choice.

Aging is a timer: ``next_deadline_s`` tells the event loop when the next waiting request ages,
so that a closed-form decode stretch stops there, and ``age(now)`` moves every request whose
deadline has passed (within the loop's same-instant tolerance) to the aged line. A preempted
request keeps its original arrival time.
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections.abc import Callable

import numpy as np

from inferplan.engine.policies import WaitingQueue


class AgingQueue(WaitingQueue):
    """SPF by predicted output length, aged requests first (module doc)."""

    def __init__(
        self,
        keys: np.ndarray,
        arrival_s: np.ndarray,
        aging_s: float,
        same_time_s: Callable[[float], float],
    ) -> None:
        super().__init__("spf", keys)
        self.arrival_s, self.aging_s, self.same_time_s = arrival_s, aging_s, same_time_s
        self._aged: list[int] = []  # request ids (arrival order), served first
        self._is_aged: set[int] = set()
        self._by_arrival: list[int] = []  # heap of ids not aged (stale entries skipped)

    def push(self, rid: int, *, num_tokens: int | None = None, front: bool = False) -> None:
        self.tokens[rid] = num_tokens if num_tokens is not None else self.tokens.get(rid, 0)
        if rid in self._is_aged:
            insort(self._aged, rid)
            return
        assert self.keys is not None
        heapq.heappush(self._heap, (float(self.keys[rid]), rid))
        heapq.heappush(self._by_arrival, rid)

    def _valid_top(self, heap: list, key: Callable[[object], int]) -> int | None:
        """The first live id of ``heap`` (dropping stale entries), or None."""
        while heap:
            rid = key(heap[0])
            if rid in self.tokens and rid not in self._is_aged:
                return rid
            heapq.heappop(heap)
        return None

    def _deadline_s(self, rid: int) -> float:
        return float(self.arrival_s[rid]) + self.aging_s

    def age(self, now: float) -> None:
        while True:
            rid = self._valid_top(self._by_arrival, lambda e: e)  # type: ignore[arg-type,return-value]
            if rid is None:
                return
            deadline = self._deadline_s(rid)
            if now < deadline - self.same_time_s(deadline):
                return
            heapq.heappop(self._by_arrival)
            self._is_aged.add(rid)
            insort(self._aged, rid)

    def next_deadline_s(self) -> float:
        rid = self._valid_top(self._by_arrival, lambda e: e)  # type: ignore[arg-type,return-value]
        return math.inf if rid is None else self._deadline_s(rid)

    def peek(self) -> tuple[int, int]:
        if self._aged:
            rid = self._aged[0]
        else:
            top = self._valid_top(self._heap, lambda e: e[1])  # type: ignore[index]
            assert top is not None
            rid = top
        return rid, self.tokens[rid]

    def pop(self) -> int:
        rid, _ = self.peek()
        if self._aged:
            self._aged.pop(0)
        else:
            heapq.heappop(self._heap)
        del self.tokens[rid]
        return rid
