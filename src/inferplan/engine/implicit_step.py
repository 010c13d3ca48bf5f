"""The common step with the decode rows implicit (``engine/implicit.py``; issue 10).

``Replica._decode_and_admit_step``'s step (every running row decodes one token, the waiting pass
admits the queue head) with vLLM v1's scheduler on a uniform pool without admission policies:
the new blocks come from the block-crossing histogram, the decode context from the scalars, the
decode itself is the running set's counter, and the old rows' gap is one ITL mark, so the step
touches only the admitted rows' columns. Every float and record is the one the column form
computes (the same expressions in the same order). Resumed requests (recompute preemption's
victims back with their whole KV as one chunk, the step after a finish above capacity) stay in
the fast form where every row that emitted before did so one step ago: one ITL sample per row,
their worst gap written, no first token. A step the fast form does not cover (an admitted prompt
that does not finish in this step, other gaps) writes the columns and continues as ``Replica``
does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.chunk_step import PLAIN, emit_admitted
from inferplan.engine.own_admission import admit_first
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.schedulers import OWN
from inferplan.engine.stepshape import step_shape
from inferplan.memory.ownblocks import OwnBlocks

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica
    from inferplan.engine.schedulers import HeadFit
    from inferplan.memory.blockpool import BlockPool

# Rows of ``RunningSet._ints`` (``engine/running.py``).
_ID, _COMPUTED, _TOKENS, _GENERATED, _TARGET, _HELD, _ITL_FROM = 0, 1, 2, 3, 4, 5, 6


def joined_admission_step(r: Replica) -> bool:
    """The step after ``can_stretch`` said no because the queue head joins the batch
    (``Scheduler.joins``: its admission test's answer, asked at this clock): the vector step
    with implicit rows at once, where ``Replica.step`` reaches it (nothing swapped out, no KV
    tiers or admission policy, every row holding ``ceil(computed / B)`` blocks, and no doomed
    cycle: the head's prompt fits the step's leftover budget, ``Simulation._doomed_cycles``'
    first test), without the calls between. False, having done nothing, elsewhere, and where
    the pool cannot give every row its block (the caller then takes the general path)."""
    scheduler, run = r.scheduler, r.running
    joins = scheduler.joins
    if joins is None or r.swapped or r.offload is not None or scheduler.admission is not None:
        return False
    if not (r.vector_steps and scheduler.vector_step and r.stretches.base_join):
        return False
    if joins[1] > r.cfg.max_num_batched_tokens - run._size or not run.rows.block:
        return False
    return run.rows.holds_ceil() and implicit_decode_and_admit_step(r)


def implicit_decode_and_admit_step(r: Replica) -> bool:
    """The vector step with implicit rows; False, having done nothing, when the pool cannot
    give every row its block (the general path runs the step)."""
    run, pool = r.running, r.pool
    rows, n = run.rows, run._size
    new_blocks = rows.crossings(1)
    if new_blocks > pool.free_blocks:
        return False
    if (pool.cache is None or type(pool.cache) is OwnBlocks) and _admit_head(r, n, new_blocks):
        return True  # the usual step below capacity: the lone queued request's whole prompt
    scheduler = r.scheduler
    # ``can_stretch`` asked at this step's start: its head's admission test, for the waiting pass
    fit = scheduler.joins if r.stretches.asked_at == (r.num_steps, r.now) else None
    cache = pool.cache
    if cache is None:
        pool.free_blocks -= new_blocks  # nothing to evict
    elif fit is None or type(cache) is not OwnBlocks:
        pool.free = pool.free_blocks - new_blocks  # evicts what no longer fits
    else:
        fit = _decode_evicting(pool, cache, new_blocks, fit)
    scheduler.step_fit = fit
    decode_context = rows.total_context()
    emitted = rows.emitted_at(n)  # the old rows' last token time, if they share one
    chunks: list[int] = []
    appended: list[tuple[int, ...]] = []  # the admitted rows' columns as ``append`` stores them
    run.appended = appended
    scheduler.admit_waiting(r.cfg.max_num_batched_tokens - n, chunks, r.now)
    scheduler.step_fit = None
    run.appended = None
    r._decoding = None
    if n == 0 and not chunks:
        return True
    if len(appended) == 1:  # the usual single admission, in scalars
        _admit_one(r, n, new_blocks, decode_context, emitted, chunks[0], appended[0])
        return True
    _admit_many(r, n, new_blocks, decode_context, emitted, chunks, appended)
    return True


def _admit_many(
    r: Replica,
    n: int,
    new_blocks: int,
    decode_context: int,
    emitted: float | None,
    chunks: list[int],
    appended: list[tuple[int, ...]],
) -> None:
    """The rest of ``implicit_decode_and_admit_step`` where no row or several were admitted
    (``appended``: their columns as ``append`` stored them, minus the lag; above capacity
    mostly a finish's resumed victims): the same values and records as the general form, the
    admitted rows read in one pass where their prompts are all done (``_learn_admitted``)."""
    rows = r.running.rows
    lag = rows.lag
    hits = [stored[_COMPUTED] + lag for stored in appended]  # their computed tokens
    duration = r.step_s.seconds(*step_shape(n, decode_context, chunks, hits))
    r.trace.record(r.now, r.pool.num_blocks - r.pool.free_blocks)
    start = r.now  # the admitted rows' last token time (``admit_popped``'s ``now``)
    r.now += duration
    r.num_steps += 1
    # Every prompt done (all emit): ``hit + chunk == tokens``, both sides less the lag.
    resumed = []  # the admitted rows that emitted before (preempted requests back)
    for stored, chunk in zip(appended, chunks, strict=True):
        if stored[_COMPUTED] + chunk != stored[_TOKENS]:
            if emit_admitted(r, n, chunks, appended, start, duration):
                return  # the last admitted prefills on (``chunk_step.py``)
            _general_emit(r, n, [o + q for o, q in zip(hits, chunks, strict=True)], duration)
            return
        if stored[_GENERATED] + lag:
            resumed.append(stored[_ID])
    if resumed and not _one_step_gaps(r, n, emitted, start, duration):
        _general_emit(r, n, [o + q for o, q in zip(hits, chunks, strict=True)], duration)
        return
    rows.decode(1, new_blocks, n)  # the old rows' token; they hold ceil(computed / B) blocks
    if appended:
        _learn_admitted(r, n, appended, lag)
    if resumed:
        _resumed_gaps(r, n, resumed, duration)
    else:
        _old_rows_gaps(r, n, emitted, duration)
    rows.itl_restart(n)  # the admitted rows' gaps start at their first token
    rows.emitted(r.now)
    r._decoding = True  # every row has sampled and needs one token
    if rows.fewest_left() <= 0:
        r.finish(rows.finished_rows())


def _learn_admitted(r: Replica, n: int, appended: list[tuple[int, ...]], lag: int) -> None:
    """The admitted rows (``[n, size)``, every prompt done in this step: computed tokens
    ``tokens - 1`` as stored, ``lag``: the lag before the step's decode) written into the
    computed column, the held prefix and the scalars, and their first tokens, in one pass."""
    run, rows = r.running, r.running.rows
    block, now = rows.block, r.now
    first_token_s = r.records.first_token_s
    stored_computed, keys, held = [], [], []
    holds_ceil = True
    for rid, _, tokens, generated, target, row_held, _ in appended:
        stored_computed.append(tokens - 1)  # ``end - lag - 1``: ``end`` is ``tokens + lag``
        keys.append(target - generated)
        held.append(row_held)
        if row_held != -(-(tokens + lag) // block):
            holds_ceil = False
        if not generated + lag:  # a first token (a resumed request emitted its first before)
            first_token_s[rid] = now
    run._ints[_COMPUTED, n : run._size] = stored_computed
    if holds_ceil:
        rows.held_rows = run._size
    if rows.known_rows == n:  # the scalars of the old rows hold: add the admitted ones
        rows.learn_rows(stored_computed, keys, held)


def _decode_evicting(pool: BlockPool, cache: OwnBlocks, new_blocks: int, fit: HeadFit) -> HeadFit:
    """The decode's new blocks taken from the pool (evicting the cached-free blocks that no
    longer fit), and the queue head's admission test's answer as the waiting pass can take it.

    The answer keeps the cached-free count it saw (``Scheduler.admit_waiting`` asks again where
    that count moved); with own blocks (``memory/ownblocks.py``) the head's hit is its own run
    alone, so an eviction that leaves that run whole leaves the answer true: it takes the new
    count, and the waiting pass does not ask the same test twice."""
    rid, tokens, budget, available, _, chunk, hit = fit
    if cache.may_hold(rid):  # the head has a run (a preempted request's): is it left whole?
        run_before = cache.runs.get(rid, 0)
        pool.free = pool.free_blocks - new_blocks  # evicts what no longer fits
        if cache.runs.get(rid, 0) != run_before:
            return fit
    else:  # no run: its hit stays none (``BlockPool.free``'s setter, inline)
        pool.free_blocks = free = pool.free_blocks - new_blocks
        if cache.lru_blocks > free:
            cache.evict_to(free)
    return rid, tokens, budget, available, cache.lru_blocks, chunk, hit


def _admit_one(
    r: Replica,
    n: int,
    new_blocks: int,
    decode_context: int,
    emitted: float | None,
    chunk: int,
    stored: tuple[int, ...],
) -> None:
    """The rest of ``implicit_decode_and_admit_step`` where one row was admitted (``stored``:
    its columns as ``append`` stored them, minus the lag): the same values and records as the
    general form, in scalars."""
    lag = r.running.rows.lag
    rid, computed, tokens, generated, target, held, _ = stored
    hit = computed + lag
    if chunk == 1 and hit:  # ``step_shape`` of one chunk, without its lists and call
        duration = r.step_s.seconds(0, 0.0, 0, 0, n + 1, decode_context + hit + 1)
    else:
        pairs = float(chunk * hit + chunk * (chunk + 1) / 2)
        duration = r.step_s.seconds(chunk, pairs, hit, 1, n, decode_context)
    r.trace.record(r.now, r.pool.num_blocks - r.pool.free_blocks)
    start = r.now  # the admitted row's last token time (``admit_popped``'s ``now``)
    r.now = start + duration
    r.num_steps += 1
    end = hit + chunk
    if end != tokens + lag and emit_admitted(r, n, [chunk], [stored], start, duration):
        return  # it prefills on (``chunk_step.py``)
    resumed = generated + lag != 0  # a first token unless it emitted one before preemption
    if end != tokens + lag or (resumed and not _one_step_gaps(r, n, emitted, start, duration)):
        _general_emit(r, n, [end], duration)
        return
    _placed(r, n, rid, end, lag, held, target - generated, new_blocks, emitted, duration, resumed)


def _placed(
    r: Replica,
    n: int,
    rid: int,
    end: int,
    lag: int,
    held: int,
    key: int,
    new_blocks: int,
    emitted: float | None,
    duration: float,
    resumed: bool,
) -> None:
    """The rest of a step that admitted one row, ``n``, whose prompt ended in it (``end``
    tokens computed; ``lag`` the rows' lag before the step, ``key`` its learnt left count):
    the old rows' token, the row's stored columns, the gaps, its first token and the
    finishes (``_admit_one`` and ``_admit_head`` share it)."""
    run = r.running
    rows, now = run.rows, r.now
    rows.decode(1, new_blocks, n)  # the old rows' token; they hold ceil(computed / B) blocks
    row_computed = end - lag - 1  # stored: tokens and generated + 1 cancel the lag's + 1
    flat, capacity = run._flat, run._capacity
    flat[_COMPUTED * capacity + n] = row_computed
    if held == -(-end // rows.block):
        rows.held_rows = n + 1
    if rows.known_rows == n:  # the scalars of the old rows hold: add the admitted one
        rows.learn_row(row_computed, key, held)
    if resumed:
        _resumed_gaps(r, n, [rid], duration)
    elif n and emitted is not None and emitted == now - duration:  # ``_old_rows_gaps``' usual
        rows.itl_mark(duration)
        r.itl.add(duration, float(n))
    else:
        _old_rows_gaps(r, n, emitted, duration)
    flat[_ITL_FROM * capacity + n] = rows.itl_length  # ``itl_restart`` of the one row
    if not resumed:
        r.records.first_token_s[rid] = now
    rows.emitted(now)
    r._decoding = True  # every row has sampled and needs one token
    if rows.fewest_left() <= 0:
        r.finish(rows.finished_rows())


def _admit_head(r: Replica, n: int, new_blocks: int) -> bool:
    """The step where the queue holds one request, new, whose whole prompt is one chunk that
    fits, and vLLM v1's waiting pass is the plain one (``Scheduler.admission_path``: no prefix
    cache, KV tiers or admission policy; a FIFO ``WaitingQueue``): that pass
    (``plain_admission.admit_plainly``: one head, so one turn of its loop) and ``_admit_one``
    in one frame, the same tests, writes and floats in the same order. With own blocks
    (``OWN``: ``own_admission.admit_own``'s pass) the same where no run of the request is
    cached (no hit), its cache writes in ``own_admission.admit_first``. False, having done
    nothing, elsewhere (the general form then runs the step)."""
    scheduler, waiting, cfg = r.scheduler, r.waiting, r.cfg
    path = scheduler.admission_path
    if type(waiting) is not WaitingQueue or (path != PLAIN and path != OWN):
        return False
    fifo = waiting._fifo
    if len(fifo) != 1 or not waiting.is_fifo or n >= cfg.max_num_seqs:
        return False  # several queued, a heap queue, or no room
    rid = fifo[0]
    tokens = waiting.tokens[rid]
    if not 0 < tokens <= cfg.max_num_batched_tokens - n:
        return False  # its prompt cut into chunks by the budget
    if tokens != scheduler.prompt_tokens.item(rid):
        return False  # a preempted request back (it emitted before): ``_admit_one``'s cases
    pool, run = r.pool, r.running
    rows, block = run.rows, pool.block_size
    held = -(-tokens // block)
    if held > pool.free_blocks - new_blocks:
        return False  # it waits: the step decodes alone
    if pool.cache is None:
        pool.free_blocks -= new_blocks + held  # the decode's blocks and the row's (no evicting)
    elif not admit_first(pool, r.records, rid, tokens, held, new_blocks):
        return False  # own blocks: a run cached (a preempted request's), maybe a hit
    decode_context = rows.total_context()
    emitted = rows.emitted_at(n)  # the old rows' last token time, if they share one
    # ``admit_plainly``'s (``admit_own``'s) turn: the head popped, its row appended
    fifo.popleft()
    del waiting.tokens[rid]
    start = r.now  # the row's last token time (``admit_popped``'s ``now``)
    first_scheduled_s = r.records.first_scheduled_s
    if math.isnan(first_scheduled_s.item(rid)):  # ``item``: a Python float
        first_scheduled_s[rid] = start
    target = scheduler.target_tokens.item(rid)
    lag = rows.lag  # the stored decode columns lag the pending decode steps
    run.append(rid, 0, tokens, 0, target, held, start)
    r._decoding = None
    # ``_admit_one`` with no hit, the whole prompt as the chunk and no token before
    pairs = float(tokens * 0 + tokens * (tokens + 1) / 2)
    duration = r.step_s.seconds(tokens, pairs, 0, 1, n, decode_context)
    r.trace.record(start, pool.num_blocks - pool.free_blocks)
    r.now = start + duration
    r.num_steps += 1
    _placed(r, n, rid, tokens, lag, held, target + lag, new_blocks, emitted, duration, False)
    return True


def _old_rows_gaps(r: Replica, n: int, emitted: float | None, duration: float) -> None:
    """The ITL of the ``n`` rows that decoded: one step long when all emitted at its start
    (one mark for all), else each row's gap since its last token (``Replica._record_gaps``)."""
    if not n:
        return
    now = r.now
    if emitted is not None and emitted == now - duration:
        r.running.rows.itl_mark(duration)
        r.itl.add(duration, float(n))
        return
    run, rec = r.running, r.records
    last = run.last_token_s[:n]  # settles the rows
    same = last == now - duration
    decoding = run.ids[:n]
    if same.all():
        rec.max_itl_s[decoding] = np.fmax(rec.max_itl_s[decoding], duration)
        r.itl.add(duration, float(n))
    else:
        r._record_gaps(decoding, np.where(same, duration, now - last), same, duration)


def _one_step_gaps(
    r: Replica, n: int, emitted: float | None, start: float, duration: float
) -> bool:
    """Every row that emitted before this step (the ``n`` old rows and the resumed admitted
    rows, whose last token time is the step's ``start``) did so exactly one step ago
    (``Replica._emit``'s ``same`` for all of them)."""
    one_step_ago = r.now - duration
    if n and (emitted is None or emitted != one_step_ago):
        return False
    return start == one_step_ago


def _resumed_gaps(r: Replica, n: int, resumed: list[int], duration: float) -> None:
    """``Replica._emit``'s gaps where the old rows and the resumed admitted rows (preempted
    requests back with their recomputed KV) all emitted one step ago (``_one_step_gaps``): one
    ITL sample of ``duration`` per row, the old rows' worst gap an ITL mark, the resumed rows'
    written (``np.fmax``: a nan gives way), as ``_record_gaps`` does."""
    if n:
        r.running.rows.itl_mark(duration)
    max_itl_s = r.records.max_itl_s
    for rid in resumed:
        if not max_itl_s[rid] >= duration:
            max_itl_s[rid] = duration
    r.itl.add(duration, float(n + len(resumed)))


def _general_emit(r: Replica, n: int, ends: list[int], duration: float) -> None:
    """The rest of the step in column form (``Replica._decode_and_admit_step``): the old rows
    take their crossing blocks and token, the admitted rows their chunk, and emitting rows
    sample."""
    run, block = r.running, r.running.rows.block
    computed, tokens = run.num_computed, run.num_tokens  # settled, as plain columns
    run.held_blocks[:n] += computed[:n] % block == 0
    computed[:n] += 1
    computed[n:] = ends
    if ends == tokens[n:].tolist():  # whole prompts of resumed requests: all emit
        r._emit(slice(0, len(run)), duration)
    else:
        r._emit((computed == tokens).nonzero()[0], duration)
