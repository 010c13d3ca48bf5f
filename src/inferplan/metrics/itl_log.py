"""One replica's ITL adds, kept in order so that a run's histogram can be rebuilt exactly.

``ItlHistogram``'s bin counts are integer sums while every weight is an integer (the engine
adds one sample per running row per step), so they add up to the same floats in any order;
its moments are a fold of the updates in call order (``metrics/moments.py``), which floats make
order dependent in the last bits. Replicas simulated apart (``engine/apart.py``) each write an
``ItlLog``: the counts as usual, and every moment update in a list that is never applied.
``replay_into`` then adds the counts to the run's histogram and feeds the updates to it in the
order the interleaved event loop would have made them, so mean and standard deviation are the
same floats as the interleaved run's.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.moments import Update


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


def replay_into(hist: ItlHistogram, counts: npt.NDArray[np.float64], updates: list[Update]) -> None:
    """Add ``counts`` (integral) to ``hist``'s bins and apply ``updates`` in order, as if
    every add had been made on ``hist`` itself."""
    hist.counts[:] += counts
    hist.queue_updates(updates)
