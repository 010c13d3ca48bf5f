"""One replica's ITL adds, kept in order so that a run's histogram can be rebuilt exactly.

``ItlHistogram``'s bin counts are integer sums while every weight is an integer (the engine
adds one sample per running row per step), so they add up to the same floats in any order;
its moments are a fold of the updates in call order (``metrics/moments.py``), which floats make
order dependent in the last bits. Replicas simulated apart (``engine/apart.py``) each write an
``ItlLog``: the counts as usual, and every moment update kept, never applied, as rows of a float
array (``metrics/moment_rows.py``: packed every ``CHUNK`` updates, so a million requests' logs
take tens of MB, not hundreds, and pickle as arrays). ``replay_into`` then adds the counts to
the run's histogram and folds the rows into it in the order the interleaved event loop would
have made them, so mean and standard deviation are the same floats as the interleaved run's.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.moment_rows import WIDTH, pack
from inferplan.metrics.moments import Update

CHUNK = 1 << 16  # updates kept as tuples before they are packed into rows


class ItlLog(ItlHistogram):
    """An ITL histogram whose moment updates are kept, in order, instead of applied."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[Update] = []
        self._packed: list[npt.NDArray[np.float64]] = []
        self._num_packed = 0

    def _queue_update(self, update: Update) -> None:
        pending = self._pending
        pending.append(update)
        if len(pending) >= CHUNK:
            self._pack()

    def _pack(self) -> None:
        if self._pending:
            self._packed.append(pack(self._pending))
            self._num_packed += len(self._pending)
            self._pending = []

    @property
    def num_updates(self) -> int:
        """Updates kept so far."""
        return self._num_packed + len(self._pending)

    def rows(self) -> npt.NDArray[np.float64]:
        """Every update kept, in order, one row each (``moment_rows.pack``)."""
        self._pack()
        if not self._packed:
            return np.zeros((0, WIDTH), dtype=np.float64)
        if len(self._packed) > 1:
            self._packed = [np.concatenate(self._packed)]
        return self._packed[0]

    @property
    def is_integral(self) -> bool:
        """Every weight so far was an integer: the counts add exactly in any order."""
        return self._integral


def replay_into(
    hist: ItlHistogram,
    counts: npt.NDArray[np.float64],
    blocks: Iterable[npt.NDArray[np.float64]],
) -> None:
    """Add ``counts`` (integral) to ``hist``'s bins and fold the blocks of update rows in
    order, as if every add had been made on ``hist`` itself."""
    hist.counts[:] += counts
    for rows in blocks:
        hist.apply_update_rows(rows)
