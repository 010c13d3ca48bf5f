"""A chain's block arithmetic as scalars (``engine/chain.py``; issue 10, above capacity).

Along a chain the first ``p`` rows (admission order) run and the tail ones are preempted, so
every question the chain asks is about the current ``p``: the blocks ``G(p, j)`` those rows
hold once chain step ``j`` has run, and the first step whose blocks they cannot all get. With
``c_i = B * a_i + o_i`` (row ``i``'s computed tokens at the chain's start, ``B`` the block
size), ``ceil((c_i + u + 1) / B) = a_i + 1 + [o_i >= B - u]``, so

    G(p, j) = p * (j // B) + K_p + A_p(j % B),  K_p = sum_{i<p} a_i + p,
    A_p(u) = #{i < p : o_i >= B - u}.

Step ``j`` gets its blocks iff ``G(p, j) <= U`` (``U``: the rows' blocks and the free pool at
the chain's start). The first failing step was ``min_u B * t_u + u`` with ``t_u = max(0,
(U - K_p - A_p(u)) // p + 1)``; writing ``U - K_p = q * p + r`` (``0 <= r < p``) and since
``0 <= A_p(u) <= p``, ``t_u = max(0, q + 1 - [A_p(u) > r])``. For ``q < 0`` every ``t_u`` is 0
and the rows fail at once (step 0). Otherwise the minimum is at the first ``u`` where
``A_p(u) > r``, i.e. ``u = B - o*`` with ``o*`` the ``(r + 1)``-th largest offset among the
``p`` rows (``A_p`` counts offsets from the top), and the step is ``B * q + B - o*`` (which
is ``B * (q + 1)`` when ``o* = 0``: no ``u`` below ``B`` qualifies). So one histogram of the
offsets (kept as counts of offsets ``>= v``) and ``K_p`` answer both questions in a few
integer operations, and a preempted tail row leaves them by one subtraction per offset at or
below its own: no per-chain numpy tables of ``H_p``. The answers are the same integers as
the table form (``tests/engine/test_chain.py`` checks both against counting blocks step by
step).
"""

from __future__ import annotations

import math
from itertools import accumulate

import numpy as np


class TailBlocks:
    """``G(p, j)`` and the first failing step of the first ``p`` rows, ``p`` falling from all
    of them as tail rows are popped (the module docstring)."""

    def __init__(self, computed: np.ndarray, block: int, usable: int) -> None:
        self.block, self.usable, self.p = block, usable, len(computed)
        counts = np.bincount(computed % block, minlength=block)
        # ``at_least[v]``: rows among the first ``p`` whose offset is ``>= v`` (``v`` 0 .. B).
        self.at_least: list[int] = [*np.cumsum(counts[::-1])[::-1].tolist(), 0]
        self.k = int((computed // block).sum()) + self.p  # K_p

    @classmethod
    def from_offsets(
        cls, counts: list[int], computed_sum: int, block: int, usable: int
    ) -> TailBlocks:
        """The same state from the rows' offset histogram (``counts[v]``: rows whose computed
        tokens are ``v`` mod ``B``) and their computed tokens' sum, in ``O(B)`` scalars
        (implicit rows keep both: ``engine/implicit.py``): ``sum a_i = (sum c_i - sum o_i) / B``."""
        blocks = cls.__new__(cls)
        # ``at_least``: the counts' sums from the top (in C), then the ``B``-th entry, 0. The
        # offsets' sum ``sum_v v * counts[v]`` is ``sum_{v >= 1} at_least[v]`` (an offset ``o``
        # is counted once at each ``v`` in ``1 .. o``).
        at_least = [*accumulate(reversed(counts))]
        at_least.reverse()
        at_least.append(0)
        p = at_least[0]
        blocks.block, blocks.usable, blocks.p = block, usable, p
        blocks.at_least = at_least
        blocks.k = (computed_sum - (sum(at_least) - p)) // block + p
        return blocks

    def held(self, j: int) -> int:
        """``G(p, j)``: blocks the running rows hold once chain step ``j`` has run."""
        block = self.block
        return self.p * (j // block) + self.k + self.at_least[block - j % block]

    def first_failure(self) -> float:
        """The first chain step whose blocks the running rows cannot all get (inf: no rows)."""
        p = self.p
        if p == 0:
            return math.inf
        q, r = divmod(self.usable - self.k, p)
        if q < 0:
            return 0
        at_least, v = self.at_least, self.block - 1
        while at_least[v] <= r:  # the (r + 1)-th largest offset: at_least[0] = p > r
            v -= 1
        return self.block * q + self.block - v

    def pop(self, computed: int) -> None:
        """The last running row (``computed`` tokens at the chain's start) leaves."""
        at_least = self.at_least
        for v in range(computed % self.block + 1):
            at_least[v] -= 1
        self.k -= computed // self.block + 1
        self.p -= 1
