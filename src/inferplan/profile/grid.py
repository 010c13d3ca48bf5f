"""Where the profiler measures: token counts, decode batches and contexts, prefill chunks.

The full grid follows the deployment's own limits, so ``TableModel`` interpolates inside it for
every step the engine can form: tokens in powers of two up to the step's token budget
(``--max-num-batched-tokens``), LM-head rows and decode batches up to ``--max-num-seqs``, decode
contexts ``128 * 4^i`` up to ``--max-model-len``, prefill chunks ``16 * 4^i`` up to the budget
after ``0`` or ``1024 * 4^i`` cached tokens. Each bound is a grid point itself. The tiny grid
has a few points for a CPU run that tests the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.memory.plan import MemoryPlan


@dataclass(frozen=True)
class Grid:
    tokens: tuple[int, ...]  # per-layer operators and the all-reduce
    logit_tokens: tuple[int, ...]  # lm_head rows
    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]  # tokens per sequence
    prefill_chunks: tuple[int, ...]
    prefill_cached: tuple[int, ...]  # tokens before the chunk

    def decode_points(self) -> list[tuple[int, int]]:
        return [(b, c) for b in self.decode_batches for c in self.decode_contexts]

    def prefill_points(self, max_model_len: int) -> list[tuple[int, int]]:
        """(chunk, cached) pairs whose sequence fits ``max_model_len`` (the first always kept)."""
        pairs = [(q, o) for q in self.prefill_chunks for o in self.prefill_cached]
        return [p for i, p in enumerate(pairs) if i == 0 or sum(p) <= max_model_len]


TINY_GRID = Grid(
    tokens=(1, 8, 64),
    logit_tokens=(1, 8),
    decode_batches=(1, 4),
    decode_contexts=(64, 512, 4096),
    prefill_chunks=(16, 64),
    prefill_cached=(0, 256),
)


def _geometric(start: int, factor: int, stop: int) -> tuple[int, ...]:
    """``start * factor^i`` below ``stop``, then ``stop`` itself."""
    out, value = [], start
    while value < stop:
        out.append(value)
        value *= factor
    return (*out, stop)


def full_grid(plan: MemoryPlan) -> Grid:
    cfg = plan.config
    budget, seqs, max_len = cfg.max_num_batched_tokens, cfg.max_num_seqs, plan.max_model_len
    cached = (0, *_geometric(1024, 4, max_len)[:-1])
    return Grid(
        tokens=_geometric(1, 2, budget),
        logit_tokens=_geometric(1, 2, seqs),
        decode_batches=_geometric(1, 2, seqs),
        decode_contexts=_geometric(128, 4, max_len),
        prefill_chunks=_geometric(16, 4, budget),
        prefill_cached=cached,
    )


def grid_for(plan: MemoryPlan, *, tiny: bool) -> Grid:
    return TINY_GRID if tiny else full_grid(plan)
