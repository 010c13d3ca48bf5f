"""The paged KV block pool of one replica, with one block table per layer kind.

A model may mix full-attention layers with sliding-window layers (Gemma-3: 5 windowed per full
layer; gpt-oss: alternating). vLLM v1's hybrid KV manager (``v1/core/kv_cache_coordinator.py``,
``single_type_kv_cache_manager.py``) keeps one block table per group of layers of the same kind,
all drawing pages from one shared pool: a full-attention group holds every block of a sequence,
a sliding-window group frees the blocks that fall out of its window and so holds at most
``ceil(window / block_size) + 1`` of them (the memory plan's count, ``specs/kv.py``).

Here the pool's unit (a *pool block*) is ``block_size`` tokens of ``unit_values`` KV values on
one device, the greatest common divisor of the groups' values per token, and a group's block
costs ``KvGroup.cost`` pool blocks: for a model with full attention only that is one block of
every layer, exactly the memory plan's ``num_blocks``. Sharing one pool by exact bytes, rather
than in vLLM's equal-size layer groups (which pad the smaller kind), is a simplification.

Linear-attention (Mamba-2, Gated DeltaNet) layers hold a fixed state per sequence, whatever its
length: vLLM v1's hybrid allocator gives each running sequence one state page per such layer
from the same pool. Here that is one more group of ``max_blocks=1``: from its first token a
sequence holds ``ceil(state bytes / pool block bytes)`` pool blocks for its states, on top of
its KV (the memory plan's ``num_blocks`` counts KV blocks only).

Also not modelled: the blocks a prefill chunk longer than the window holds in a windowed layer
during its own step (vLLM frees them at the next step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from inferplan.memory.plan import MemoryPlan
from inferplan.memory.prefixcache import PrefixCache
from inferplan.specs.dtypes import weight_format
from inferplan.specs.kv import kv_values_per_token, linear_state_bytes

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class KvGroup:
    """Layers of one kind on the device: ``cost`` pool blocks per block of this group, and the
    most blocks one sequence holds in it (None: full attention, every block)."""

    cost: int
    max_blocks: int | None = None


FULL_ATTENTION = (KvGroup(1),)


@dataclass(frozen=True)
class PoolLayout:
    """How a replica's KV memory divides into pool blocks."""

    num_blocks: int
    groups: tuple[KvGroup, ...]
    block_bytes: float  # one pool block on the device (for swap traffic)


def pool_layout(plan: MemoryPlan) -> PoolLayout:
    """The pool of ``plan``'s replica, sized by its tightest pipeline stage."""
    block_size = plan.config.block_size
    tp = plan.parallelism.tp
    best: tuple[int, tuple[KvGroup, ...], float] | None = None
    for stage in plan.stages:
        values: dict[int | None, int] = {}
        for att, count in stage.layers:
            per_token = kv_values_per_token(att, tp) * count
            if per_token:
                values[att.window_tokens] = values.get(att.window_tokens, 0) + per_token
        if not values:
            continue
        unit = math.gcd(*values.values())
        block_bytes = unit * plan.kv_format.bytes_per_value * block_size
        groups = tuple(
            KvGroup(v // unit, None if w is None else -(-w // block_size) + 1)
            for w, v in sorted(values.items(), key=lambda item: (item[0] is not None, item[0]))
        )
        state_bytes = sum(
            linear_state_bytes(att, tp, weight_format(plan.spec.dtype).bytes_per_value) * count
            for att, count in stage.layers
        )
        if state_bytes:  # one fixed state page set per sequence, from its first token
            groups += (KvGroup(math.ceil(state_bytes / block_bytes), 1),)
        blocks = int(max(stage.paged_kv_bytes, 0) // block_bytes)  # less any index keys
        # The replica admits what its tightest stage holds: compare in full-sequence bytes.
        if best is None or blocks * block_bytes < best[0] * best[2]:
            best = (blocks, groups, block_bytes)
    if best is None:  # no paged KV at all (linear attention only)
        return PoolLayout(plan.num_blocks, FULL_ATTENTION, 0.0)
    blocks, groups, block_bytes = best
    return PoolLayout(blocks * plan.parallelism.attention_dp, groups, block_bytes)


class BlockPool:
    """Free pool blocks, and the block arithmetic of sequences (tokens -> pool blocks held).

    With a prefix cache (``prefixcache.py``) ``free`` includes the cached-free blocks, and
    lowering it below them evicts the least recently freed entries. ``free_blocks`` is the same
    count as a plain attribute, for the engine's hot paths to read without a property call;
    write it through ``free`` (which evicts), or directly only where ``cache`` is None.
    """

    def __init__(self, num_blocks: int, block_size: int, groups: tuple[KvGroup, ...]) -> None:
        self.num_blocks, self.block_size, self.groups = num_blocks, block_size, groups
        self.free_blocks: int = num_blocks
        self.cache: PrefixCache | None = None
        # One full-attention group of cost 1: a block per ``block_size`` tokens (fast paths).
        self.is_uniform = groups == FULL_ATTENTION

    @property
    def free(self) -> int:
        return self.free_blocks

    @free.setter
    def free(self, blocks: int) -> None:
        self.free_blocks = blocks
        cache = self.cache
        if cache is not None and cache.lru_blocks > blocks:
            cache.evict_to(blocks)

    @property
    def shared(self) -> int:
        """Blocks running sequences map more than once (shared prefixes)."""
        return 0 if self.cache is None else self.cache.shared_blocks

    @property
    def used(self) -> int:
        return self.num_blocks - self.free_blocks

    def blocks_for(self, tokens: IntArray) -> IntArray:
        """Pool blocks sequences of ``tokens`` KV tokens hold."""
        blocks = -(-tokens // self.block_size)
        if self.is_uniform:
            return blocks
        held = np.zeros_like(blocks)
        for g in self.groups:
            held += g.cost * (blocks if g.max_blocks is None else np.minimum(blocks, g.max_blocks))
        return held

    def blocks_for_one(self, tokens: int) -> int:
        blocks = -(-tokens // self.block_size)
        if self.is_uniform:
            return blocks
        return sum(
            g.cost * (blocks if g.max_blocks is None else min(blocks, g.max_blocks))
            for g in self.groups
        )

    def crossing_cost(self, computed: IntArray) -> IntArray:
        """Pool blocks the next token of each sequence takes (0 unless it starts a block)."""
        crossing = computed % self.block_size == 0
        if self.is_uniform:
            return crossing.astype(np.int64)
        index = computed // self.block_size  # the block the next token starts
        cost = np.zeros_like(computed)
        for g in self.groups:
            cost += g.cost if g.max_blocks is None else g.cost * (index < g.max_blocks)
        return np.where(crossing, cost, 0)

    def crossing_blocks(self, computed: IntArray) -> int:
        """Pool blocks the next token of every sequence takes, in all (``crossing_cost``'s
        sum)."""
        if self.is_uniform:
            return int(np.count_nonzero(computed % self.block_size == 0))
        return int(self.crossing_cost(computed).sum())

    def next_crossing_costs(self, computed: IntArray) -> tuple[IntArray, int | None]:
        """Pool blocks each sequence's next block crossing takes, and the decode steps over
        which every later crossing costs the same (None: for ever); it changes only when a
        sequence reaches a windowed group's last block."""
        index = -(-computed // self.block_size)  # the block the next crossing starts
        cost = np.zeros_like(computed)
        steps = None
        for g in self.groups:
            if g.max_blocks is None:
                cost += g.cost
                continue
            inside = index < g.max_blocks
            cost += g.cost * inside
            if inside.any():
                left = int((g.max_blocks * self.block_size - computed[inside]).min())
                steps = left if steps is None else min(steps, left)
        return cost, steps
