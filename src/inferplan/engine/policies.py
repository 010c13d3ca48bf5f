"""Queue policies and routers: plain functions and one small queue component.

Waiting-queue policies (``--scheduling-policy``):
- ``fcfs``: arrival order; a preempted request goes back to the head (vLLM v1).
- ``priority``: lowest priority value first, then arrival (vLLM's priority policy).
- ``spf``: shortest predicted output first, then arrival; the prediction is the requested output
  length (an oracle), or with ``--length-predictor`` the predictor's point estimate
  (``workload/predict.py``); ``--spf-aging-s`` bounds starvation (``engine/aging.py``).
- ``lpm``: SGLang's longest-prefix-match (``--engine sglang`` only): a FIFO queue that SGLang's
  scheduler re-sorts before each admission round (``engine/sglang.py``, ``reorder``).
Under ``priority`` and ``spf`` a preempted request re-enters by its key.

Routers pick a replica for each arrival: ``round_robin`` and ``least_outstanding`` (fewest
requests queued or running; ties to the lowest index).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from inferplan.errors import InferplanError


class WaitingQueue:
    """Request ids waiting for admission, each with the tokens it must (re)compute."""

    def __init__(self, policy: str, keys: np.ndarray | None) -> None:
        if policy not in POLICIES:
            raise InferplanError(
                f"--scheduling-policy: unknown policy {policy!r}; valid: {', '.join(POLICIES)}"
            )
        self.policy = policy
        # Whether the queue is a deque in arrival order (else a heap by key): asked per verb.
        self.is_fifo = policy in FIFO_POLICIES
        self.keys = keys
        self._fifo: deque[int] = deque()
        self._heap: list[tuple[float, int]] = []
        self.tokens: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def push(self, rid: int, *, num_tokens: int | None = None, front: bool = False) -> None:
        self.tokens[rid] = num_tokens if num_tokens is not None else self.tokens.get(rid, 0)
        if self.is_fifo:
            if front:
                self._fifo.appendleft(rid)
            else:
                self._fifo.append(rid)
        else:
            assert self.keys is not None
            heapq.heappush(self._heap, (float(self.keys[rid]), rid))

    def push_front(self, rid: int, *, num_tokens: int) -> None:
        if self.is_fifo:  # ``push(..., front=True)``, one call fewer
            self.tokens[rid] = num_tokens
            self._fifo.appendleft(rid)
        else:
            self.push(rid, num_tokens=num_tokens, front=True)

    def peek(self) -> tuple[int, int]:
        rid = self._fifo[0] if self.is_fifo else self._heap[0][1]
        return rid, self.tokens[rid]

    def pop(self) -> int:
        rid = self._fifo.popleft() if self.is_fifo else heapq.heappop(self._heap)[1]
        del self.tokens[rid]
        return rid

    def in_order(self) -> list[int]:
        """A FIFO queue's ids, head first."""
        return list(self._fifo)

    def reorder(self, order: list[int]) -> None:
        """A FIFO queue's ids in a new order (the same ids; SGLang's ``lpm`` sort)."""
        assert self.is_fifo and sorted(order) == sorted(self._fifo)
        self._fifo = deque(order)

    def age(self, now: float) -> None:
        """Timers of the queue order (none here; ``engine/aging.py`` has SPF's aging bound)."""

    def next_deadline_s(self) -> float:
        """When the queue order next changes by itself (never here)."""
        return math.inf


def policy_keys(
    policy: str, arrival_s: np.ndarray, priorities: np.ndarray | None, predicted: np.ndarray
) -> np.ndarray | None:
    """Sort keys per request (ties broken by request id, which follows arrival order)."""
    if policy in FIFO_POLICIES:
        return None
    if policy == "priority":
        return (priorities if priorities is not None else np.zeros(len(arrival_s))).astype(float)
    return predicted.astype(float)


POLICIES = ("fcfs", "priority", "spf", "lpm")
FIFO_POLICIES = ("fcfs", "lpm")


class HasLoad(Protocol):
    @property
    def outstanding(self) -> int: ...


def round_robin(replicas: Sequence[HasLoad], counter: int) -> int:
    return counter % len(replicas)


def least_outstanding(replicas: Sequence[HasLoad], counter: int) -> int:
    loads = [r.outstanding for r in replicas]
    return loads.index(min(loads))


ROUTERS: dict[str, Callable[[Sequence[HasLoad], int], int]] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
}
