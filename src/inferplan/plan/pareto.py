"""Pareto fronts: the plans no other plan beats on both axes.

A point is dominated when another is at least as good on both axes and better on one. The
front is returned sorted by the first axis, ties broken by the input order, so it is the same
for the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence


def front(points: Sequence[tuple[float, float]], maximize: tuple[bool, bool]) -> list[int]:
    """Indices of the non-dominated points, ordered by the first axis (best first)."""
    signs = [-1.0 if m else 1.0 for m in maximize]
    keyed = [(p[0] * signs[0], p[1] * signs[1]) for p in points]
    order = sorted(range(len(points)), key=lambda i: (keyed[i], i))
    out: list[int] = []
    best_second = float("inf")
    for i in order:
        if keyed[i][1] < best_second:
            out.append(i)
            best_second = keyed[i][1]
    return out
