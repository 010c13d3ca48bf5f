"""One replica's ITL adds, kept in order so that a run's histogram can be rebuilt exactly.

``ItlHistogram``'s bin counts are integer sums while every weight is an integer (the engine
adds one sample per running row per step), so they add up to the same floats in any order;
its moments are a fold of the updates in call order (``metrics/moments.py``), which floats make
order dependent in the last bits. Replicas simulated apart (``engine/apart.py``) each write an
``ItlLog``: the counts as usual, and every moment update in a list that is never applied.
``replay_into`` then adds the counts to the run's histogram and feeds the updates to it in the
order the interleaved event loop would have made them, so mean and standard deviation are the
same floats as the interleaved run's.

Updates travel between processes packed in one float array (``pack_updates``), a row per
update padded with ``nan`` (a tuple of Python floats per update costs about four times more).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.moments import ARITHMETIC, MANY, ONE, Update

UPDATE_WIDTH = 7  # the longest update: (MANY, min, max, weighted sum, weight, mean, m2)
_WIDTHS = {ONE: 3, ARITHMETIC: 6, MANY: 7}
REPLAY_CHUNK = 65_536  # updates unpacked to tuples at a time


class ItlLog(ItlHistogram):
    """An ITL histogram whose moment updates are kept, in order, instead of applied."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Update] = []

    def _queue_update(self, update: Update) -> None:
        self.log.append(update)

    @property
    def is_integral(self) -> bool:
        """Every weight so far was an integer: the counts add exactly in any order."""
        return self._integral


def pack_updates(updates: list[Update]) -> npt.NDArray[np.float64]:
    """The updates as rows of ``UPDATE_WIDTH`` floats (``nan`` past each update's end)."""
    packed = np.full((len(updates), UPDATE_WIDTH), np.nan, dtype=np.float64)
    for width in sorted(set(_WIDTHS.values())):
        rows = [i for i, update in enumerate(updates) if len(update) == width]
        if rows:
            packed[rows, :width] = [updates[i] for i in rows]
    return packed


def replay_into(
    hist: ItlHistogram, counts: npt.NDArray[np.float64], packed: npt.NDArray[np.float64]
) -> None:
    """Add ``counts`` (integral) to ``hist``'s bins and apply the packed updates in row order,
    as if every add had been made on ``hist`` itself."""
    hist.counts[:] += counts
    for start in range(0, len(packed), REPLAY_CHUNK):
        rows = packed[start : start + REPLAY_CHUNK].tolist()
        hist.queue_updates([tuple(row[: _WIDTHS[int(row[0])]]) for row in rows])
