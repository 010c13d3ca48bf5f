"""Speculative decode stretches: many draft-and-verify steps of a constant batch at once.

Between events a speculative batch where every row decodes is constant, as a plain one is
(``engine/stretch.py``), but a step no longer adds one token per row: row ``r`` gains
``1 + m[r, i]`` at step ``i``, ``m`` its acceptance stream's draws (``engine/speculation.py``).
The draws are known before the steps run (``AcceptanceStreams.peek``), so the stretch is
computed from a matrix of them: ``G = cumsum(1 + m)`` gives each row's computed tokens before
every step, hence

- the step's context ``C_i = sum_r computed[r, i] + n`` and its seconds (the same calls, with
  the same arguments, as the exact step: ``SpecDecode.step_seconds`` of an all-verify batch),
  added to the clock one by one as the exact path adds them, so the times are the same floats;
- the first finish: the first step where a row's ``G`` reaches its output left (that step is
  the stretch's last);
- the blocks: a row holds ``max(held, ceil((computed + 1 + 2k) / block_size))`` after each
  step (its token, ``k`` drafts and ``k`` lookahead slots; nothing is freed before a finish),
  so the first step whose cumulative allocation exceeds the free pool ends the stretch before
  it (that step preempts, on the exact path);
- the start of the first step at or after the next event (an arrival, a deadline).

It runs only where the exact step is exactly this: every row decoding with all ``k`` drafts
(``n (1 + k) <= budget``, and no row within ``2k + 1`` tokens of ``max_model_len``), a uniform
pool, and nothing waiting that could join: the queue is empty, or the batch is at
``max_num_seqs`` or the budget, or (without a prefix cache, whose hits can shrink as the pool
fills) the head's first chunk does not fit the pool after the first step (the pool only
shrinks during the stretch). Records written: per step the KV trace and the ITL samples (each
row one gap per step, the first one from its last token), at the end the columns, the
counters, the draws used and the finishes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica
    from inferplan.engine.speculation import SpecDecode

MAX_STRETCH_STEPS = 256  # steps looked ahead at once (a longer stretch is several)


def can_stretch(replica: Replica) -> bool:
    """Whether the replica's next advance may be a stretch: a plain one (``stretch.py``) or,
    with speculative decoding, a speculative one."""
    spec = replica.spec
    if spec is None:
        return replica.stretches.can_stretch()
    return can_spec_stretch(replica, spec)


def can_spec_stretch(replica: Replica, spec: SpecDecode) -> bool:
    """Whether the next step starts a speculative stretch (see the module docstring)."""
    r, run = replica, replica.running
    n, cfg = len(run), replica.cfg
    if n == 0 or n * (1 + spec.k) > cfg.max_num_batched_tokens or not r.pool.is_uniform:
        return False
    if r.offload is not None or r.swapped or not r.is_decoding():
        return False
    if int(run.num_computed.max()) > spec.max_model_len - 1 - 2 * spec.k:
        return False
    if not len(r.waiting):
        return True
    leftover = cfg.max_num_batched_tokens - n * (1 + spec.k)
    if leftover <= 0 or n >= cfg.max_num_seqs:
        return True  # the waiting pass cannot look at the head
    if r.pool.cache is not None:
        return False
    slots = run.num_computed + 1 + 2 * spec.k
    first = int(np.maximum(r.pool.blocks_for(slots) - run.held_blocks, 0).sum())
    return r.scheduler.head_chunk(leftover, r.pool.free - first) is None


def _steps(
    replica: Replica, spec: SpecDecode, draws: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray]:
    """(steps, each row's computed tokens before each step, blocks held after each step) of
    the stretch before its first finish (included), block failure or ``max_model_len``."""
    run, pool, k = replica.running, replica.pool, spec.k
    gained = np.cumsum(1 + draws, axis=1)
    before = np.empty_like(gained)
    before[:, 0] = run.num_computed
    before[:, 1:] = run.num_computed[:, None] + gained[:, :-1]
    steps = draws.shape[1]
    left = (run.target - run.num_generated)[:, None]
    finishing = np.flatnonzero((gained >= left).any(axis=0))
    if len(finishing):
        steps = int(finishing[0]) + 1
    too_long = np.flatnonzero((before > spec.max_model_len - 1 - 2 * k).any(axis=0))
    if len(too_long):
        steps = min(steps, int(too_long[0]))
    held = np.maximum(pool.blocks_for(before + 1 + 2 * k), run.held_blocks[:, None])
    allocated = held.sum(axis=0) - int(run.held_blocks.sum())
    short = np.flatnonzero(allocated > pool.free)
    if len(short):
        steps = min(steps, int(short[0]))
    return steps, before, held


def spec_stretch(replica: Replica, spec: SpecDecode, bound_s: float) -> int:
    """Run the stretch's steps that start before ``bound_s``; the number run (0: none)."""
    run = replica.running
    n = len(run)
    if replica.now >= bound_s:
        return 0
    horizon = min(int((run.target - run.num_generated).min()), MAX_STRETCH_STEPS)
    ids = run.ids.tolist()
    draws = np.array([spec.streams.peek(rid, horizon) for rid in ids], dtype=np.int64)
    draws = draws.reshape(n, horizon)
    steps, before, held = _steps(replica, spec, draws)
    if steps == 0:
        return 0
    contexts = (before[:, :steps].sum(axis=0) + n).tolist()
    allocated = (held[:, :steps].sum(axis=0) - int(run.held_blocks.sum())).tolist()
    steps = _run_steps(replica, spec, contexts, allocated, bound_s)
    if steps:
        _apply(replica, spec, draws[:, :steps], held[:, steps - 1], allocated[steps - 1], ids)
    return steps


def _run_steps(
    replica: Replica, spec: SpecDecode, contexts: list[int], allocated: list[int], bound_s: float
) -> int:
    """Advance the clock step by step (the KV trace and ITL samples as the exact path writes
    them) while the steps start before ``bound_s``; the number run."""
    run, rec, itl, times = replica.running, replica.records, replica.itl, spec.times
    n, used, now = len(run), replica.used_blocks, replica.now
    ids, max_gap, steps = run.ids, 0.0, 0
    for context, blocks in zip(contexts, allocated, strict=True):
        if now >= bound_s:
            break
        replica.trace.record(now, used + blocks)
        duration = times.verify.seconds(0, 0.0, 0, 0, n, context) + times.draft_s(n, context)
        end = now + duration
        if steps == 0:  # a row's first gap runs from its last token
            last = run.last_token_s
            same = last == end - duration
            replica._record_gaps(ids, np.where(same, duration, end - last), same, duration)
        elif now == end - duration:
            itl.add(duration, float(n))
            max_gap = max(max_gap, duration)
        else:
            itl.add_many(np.full(n, end - now))
            max_gap = max(max_gap, end - now)
        now, steps = end, steps + 1
    if steps > 1:
        rec.max_itl_s[ids] = np.fmax(rec.max_itl_s[ids], max_gap)
    replica.now = now
    replica.num_steps += steps
    return steps


def _apply(
    replica: Replica,
    spec: SpecDecode,
    draws: np.ndarray,
    held: np.ndarray,
    allocated: int,
    ids: list[int],
) -> None:
    """Write the stretch's end state: the columns, the pool, the counters, the draws used,
    then the finishes of its last step."""
    run, pool = replica.running, replica.pool
    n, steps = draws.shape
    gained = steps + draws.sum(axis=1)
    left = run.target - run.num_generated
    emitted = np.minimum(gained, left)
    run.num_computed += gained
    run.num_generated += emitted
    run.num_tokens += emitted
    run.held_blocks = held
    run.last_token_s.fill(replica.now)
    pool.free -= allocated
    if pool.cache is not None and pool.cache.caches_chunks:
        pool.cache.evict_to(pool.free)  # as the exact steps' scheduler passes evict
    spec.num_drafts += n * steps
    spec.num_draft_tokens += n * steps * spec.k
    spec.num_accepted_tokens += int(draws.sum())
    for j in range(spec.k):
        spec.accepted_per_position[j] += int(np.count_nonzero(draws > j))
    spec.num_emitted_tokens += int(emitted.sum())
    for rid in ids:
        spec.streams.advance(rid, steps)
    replica._decoding = None
    done = np.flatnonzero(gained >= left)
    if len(done):
        for rid in run.ids[done].tolist():
            spec.streams.forget(rid)
        replica.finish(done)
