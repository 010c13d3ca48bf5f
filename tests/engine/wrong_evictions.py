"""Wrong eviction orders for ``test_own_blocks_equal.py``, in a module of their own: an
interpreted subclass of a compiled class cannot be defined, so it is imported only where the
engine runs pure (``pure_only``)."""

from __future__ import annotations

from inferplan.memory.ownblocks import OwnBlocks


class _NewestFirst(OwnBlocks):
    """Evicts the most recently freed run first (vLLM evicts the least recently freed)."""

    def evict_to(self, free_blocks: int) -> None:
        while self.lru_blocks > free_blocks:
            rid, entries = next(reversed(self.runs.items()))
            drop = min(entries, -(-(self.lru_blocks - free_blocks) // self.entry_blocks))
            if drop == entries:
                del self.runs[rid]
            else:
                self.runs[rid] = entries - drop
            self.lru_blocks -= drop * self.entry_blocks


class _HeadFirst(OwnBlocks):
    """Evicts a run's first entries first (vLLM frees a request's tail blocks first): the run
    is left with no prefix to hit."""

    def evict_to(self, free_blocks: int) -> None:
        while self.lru_blocks > free_blocks:
            rid = next(iter(self.runs))
            del self.runs[rid]  # a run missing its first entry hits nothing
            self.lru_blocks = sum(self.runs.values()) * self.entry_blocks


WRONG_EVICTIONS: dict[str, type[OwnBlocks]] = {"NewestFirst": _NewestFirst, "HeadFirst": _HeadFirst}
