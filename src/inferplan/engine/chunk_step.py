"""The step of a prefilling last row beside implicit decoders (issue 10, above capacity).

Above capacity a finish re-admits resumed requests (recompute preemption's victims, back with
their whole KV to recompute); where the budget runs out the last one admitted is cut into
chunks, and the next steps run its chunks of ``budget - decoders`` tokens beside the decoders,
admitting the queue's next resumed requests behind it once its last chunk leaves budget over.
Every such step was the general path (``Scheduler.schedule`` -> ``Replica._batch`` ->
``_finish_step``: some fifty numpy calls on the columns). With vLLM v1's scheduler in its plain
form (``Scheduler.admission_path == PLAIN``: a uniform pool, no prefix cache, KV tiers or
admission policy) and nothing swapped out, speculated or in exact mode, the state has a closed
form: rows ``[0, m)`` decode (implicit, ``engine/implicit.py``, with the scalars of those rows
only), row ``m`` prefills. The step is then:

- the running pass (vLLM v1's, nothing preempted): each decoder one token and the block it
  crosses into (the histogram's count), the prefilling row ``min(left, budget - m)`` tokens and
  the blocks of its new KV; where the pool lacks them the general path runs the step (it
  preempts);
- the waiting pass with the budget left over (``Scheduler.admit_waiting``, as the general
  path calls it);
- the step's shape from these counts (``stepshape.step_shape``: the prefilling row and the
  admitted rows as chunks at their computed tokens), timed as the general path times it;
- the emission: the decoders' one-step gap one ITL mark, the prefilling row (where its prompt
  is done) and the admitted rows that finished theirs sample, each gap and first token as
  ``Replica._emit`` writes them, in the same order into the ITL histogram.

Rows that emitted join the scalars; a row still prefilling (the old one, or the last admitted)
stays the last row, outside them, for the next step. Where a gap is not one step long in
floats (``start != now - duration``) the step finishes in column form (``_finish_step``).
Results are the general path's bit for bit (``tests/engine/test_chunk_step.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.policies import WaitingQueue
from inferplan.engine.stepshape import step_shape

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica

# Rows of ``RunningSet._ints`` (``engine/running.py``).
_ID, _COMPUTED, _TOKENS, _GENERATED, _TARGET, _HELD, _ITL_FROM = 0, 1, 2, 3, 4, 5, 6
PLAIN = "plain"  # ``schedulers.PLAIN`` (imported there from here would cycle)


def chunk_step(r: Replica) -> bool:
    """Run the step where the last running row prefills and the others decode (the module
    docstring); False, having changed nothing the general path reads, elsewhere."""
    shape = last_row_chunk(r, 0)
    if shape is None:
        return False
    last, computed, generated, chunk, held, grown = shape
    scheduler, run = r.scheduler, r.running
    rows, pool, budget = run.rows, r.pool, r.cfg.max_num_batched_tokens
    block, flat, capacity, lag = rows.block, run._flat, run._capacity, rows.lag
    crossing = rows.hist[-lag % block] if last else 0  # ``crossings(1)`` of the decoders
    if crossing + grown > pool.free_blocks:
        return False  # the running pass preempts: the general path
    pool.free_blocks -= crossing + grown  # nothing to evict (no prefix cache)
    flat[_HELD * capacity + last] = held + grown
    # No decoders: no scalars to read (``computed_sum`` is stale where ``known_rows`` is 0).
    decode_context = rows.computed_sum + last * (lag + 1) if last else 0
    chunks = [chunk]
    appended: list[tuple[int, ...]] = []  # the admitted rows' columns as ``append`` stores them
    if budget - last - chunk > 0 or type(r.waiting) is not WaitingQueue:
        run.appended = appended
        scheduler.admit_waiting(budget - last - chunk, chunks, r.now)
        run.appended = None
    else:  # ``admit_waiting`` with no budget left: it only drops ``step_fit`` (``age``: none)
        scheduler.step_fit = None
    hits = [computed] + [stored[_COMPUTED] + lag for stored in appended]
    duration = r.step_s.seconds(*step_shape(last, decode_context, chunks, hits))
    r.trace.record(r.now, pool.num_blocks - pool.free_blocks)
    start = r.now
    r.now = now = start + duration
    r.num_steps += 1
    if start != now - duration:  # gaps not one step long in floats: the column form
        column_finish(r, last, chunks, duration)
        return True
    after = [(last, computed, generated, chunk), *_admitted(last + 1, chunks[1:], appended, lag)]
    emit_rows(r, last, after, duration)
    return True


def last_row_chunk(r: Replica, fewest: int) -> tuple[int, int, int, int, int, int] | None:
    """Where the plain scheduler's last running row (behind at least ``fewest`` decoders)
    prefills its next chunk within the budget beside decoders that are all ready on vector
    steps: the row, its computed and generated tokens, the chunk, the blocks it holds and the
    blocks the chunk adds. None elsewhere, the decoders' scalars perhaps learnt (nothing the
    general path reads is changed)."""
    run = r.running
    if r.scheduler.admission_path != PLAIN or r.swapped or r.spec is not None:
        return None
    rows = run.rows
    last, budget = run._size - 1, r.cfg.max_num_batched_tokens
    if last < fewest or last >= budget or not rows.block or not r.vector_steps:
        return None
    flat, capacity, lag = run._flat, run._capacity, rows.lag
    computed = flat[_COMPUTED * capacity + last] + lag
    left = flat[_TOKENS * capacity + last] + lag - computed
    generated = flat[_GENERATED * capacity + last] + lag
    if left < 1 or (left == 1 and generated):  # the last row decodes: not this step
        return None
    if not decoders_ready(r, last):
        return None
    chunk = min(left, budget - last)
    held = flat[_HELD * capacity + last]  # written by ``decoders_ready``
    grown = max(-(-(computed + chunk) // rows.block) - held, 0)
    return last, computed, generated, chunk, held, grown


def _admitted(
    first_row: int, chunks: list[int], appended: list[tuple[int, ...]], lag: int
) -> list[tuple[int, int, int, int]]:
    """The admitted rows as ``emit_rows`` takes them: row, computed and generated tokens, chunk."""
    return [
        (first_row + i, stored[_COMPUTED] + lag, stored[_GENERATED] + lag, chunk)
        for i, (stored, chunk) in enumerate(zip(appended, chunks, strict=True))
    ]


def emit_admitted(
    r: Replica,
    n: int,
    chunks: list[int],
    appended: list[tuple[int, ...]],
    start: float,
    duration: float,
) -> bool:
    """The emission of ``implicit_step``'s vector step where the last admitted row prefills
    on (its prompt cut by the budget): the ``n`` old rows decoded and emitted at ``start``, the
    admitted ones were appended then (``appended``, their chunks). False, having done nothing,
    where a gap is not one step long in floats or the scalars are not the old rows' (the caller
    then writes the columns)."""
    rows = r.running.rows
    if start != r.now - duration or rows.known_rows != n or rows.held_rows > n:
        return False
    if n and not _emitted_at(r, n, start):
        return False
    lag = rows.lag
    after = _admitted(n, chunks, appended, lag)
    for stored, (_, computed, _, chunk) in zip(appended[:-1], after[:-1], strict=True):
        if computed + chunk != stored[_TOKENS] + lag:
            return False  # only the last admitted may prefill on
    emit_rows(r, n, after, duration)
    return True


def decoders_ready(r: Replica, last: int) -> bool:
    """Rows ``[0, last)`` decode (one token each, sampled before), hold ``ceil(computed / B)``
    blocks and emitted at ``now``, with the implicit scalars of those rows only (learnt here
    where the last step was not this one); the last row's lazy block and time written."""
    run, rows = r.running, r.running.rows
    if rows.held_rows > last:  # the last row's blocks written: the scalars leave it out
        c = run._flat[_COMPUTED * run._capacity + last] + rows.lag
        run._flat[_HELD * run._capacity + last] = -(-c // rows.block)
        rows.held_rows = last
    if rows.time_rows > last:
        run._times[last] = rows.time_s
        rows.time_rows = last
    if not last:
        rows.known_rows = 0
        return True
    if r.chunk_mark != (r.num_steps, r.now, run._size) or rows.known_rows != last:
        ints = run._ints
        decoding = ints[_TOKENS, :last] - ints[_COMPUTED, :last] == 1
        if not (decoding.all() and (ints[_GENERATED, :last] > -rows.lag).all()):
            return False
        rows.learn_first(last)
        if not rows.ceil_held:
            return False
    return _emitted_at(r, last, r.now)


def _emitted_at(r: Replica, n: int, start: float) -> bool:
    """Rows ``[0, n)`` all emitted their last token at ``start`` (their lazy time set to it
    where the columns say so)."""
    run, rows = r.running, r.running.rows
    if rows.time_rows < n:
        if rows.time_rows and rows.time_s != start:
            return False
        if not (run._times[rows.time_rows : n] == start).all():
            return False
        rows.emitted_first(start, n)
    return rows.time_s == start


def emit_rows(
    r: Replica, last: int, after: list[tuple[int, int, int, int]], duration: float
) -> None:
    """The step's tokens, records and implicit state where the decoders (rows ``[0, last)``)
    and every other row that emits had their last token at the step's start, except a
    prefilling row (its own last token time). ``after``: the rows after the decoders, in row
    order (row, computed and generated tokens before the step, chunk); only the last of them
    may prefill on."""
    run, rows = r.running, r.running.rows
    flat, capacity, lag = run._flat, run._capacity, rows.lag
    now = r.now
    rows.decode(1, rows.hist[-lag % rows.block] if last else 0, last)
    if last:
        rows.itl_mark(duration)  # the decoders' one-step gap
    if len(after) == 1 and _emit_prefilling(r, last, after[0], duration, lag):
        return
    # Stored columns after the step (the new lag), whether each row emitted, and its gap
    # where it emitted before.
    max_itl_s, first_token_s = r.records.max_itl_s, r.records.first_token_s
    num_same, other_gaps = last, []
    learn_computed, learn_keys, learn_held = [], [], []
    still = None  # the row still prefilling after the step, if any
    still_decodes = False
    for row, done, emitted_before, chunk in after:
        tokens = flat[_TOKENS * capacity + row] + lag
        rid = flat[row]
        if done + chunk < tokens:  # prefills on: it stays the last row, outside the scalars
            flat[_COMPUTED * capacity + row] += chunk - 1
            flat[_TOKENS * capacity + row] -= 1
            flat[_GENERATED * capacity + row] -= 1
            still = row
            # One token left after an earlier sample reads as a decode (``all_decoding``),
            # which a stretch may take next: leave that answer to ``is_decoding``.
            still_decodes = done + chunk + 1 == tokens and emitted_before != 0
            continue
        stored_computed = tokens - lag - 1  # tokens and generated + 1 cancel the lag's + 1
        flat[_COMPUTED * capacity + row] = stored_computed
        learn_computed.append(stored_computed)
        learn_keys.append(flat[_TARGET * capacity + row] - flat[_GENERATED * capacity + row])
        learn_held.append(flat[_HELD * capacity + row])
        if not emitted_before:
            first_token_s[rid] = now
            continue
        last_s = run._times[row]  # ``Replica._emit``'s ``same`` and gap
        if last_s == now - duration:
            gap = duration
            num_same += 1
        else:
            gap = now - last_s
            other_gaps.append(gap)
        if not max_itl_s[rid] >= gap:  # ``np.fmax``: nan (no gap yet) gives way
            max_itl_s[rid] = gap
    if num_same:
        r.itl.add(duration, float(num_same))
    if other_gaps:
        r.itl.add_many(np.array(other_gaps, dtype=np.float64))
    if learn_computed:
        rows.learn_rows(learn_computed, learn_keys, learn_held)
    rows.itl_restart(last)  # the rows after the decoders read the log from here on
    if still is None:
        rows.emitted(now)
        r._decoding = True  # every row has sampled and needs one token
    else:
        rows.emitted_first(now, still)
        r._decoding = None if still_decodes else False  # False: the last row prefills
    if rows.known_rows and rows.fewest_known_left() <= 0:
        r.finish(rows.finished_rows())
    r.chunk_mark = (r.num_steps, now, run._size)


def _emit_prefilling(
    r: Replica, last: int, after: tuple[int, int, int, int], duration: float, lag: int
) -> bool:
    """``emit_rows``' rest where its one row after the decoders prefills on (a chunk run's
    usual step): the same writes in the same order, without the loop over rows (``lag``: the
    rows' lag before the step's decode). False, having done nothing, where that row emits."""
    run, rows = r.running, r.running.rows
    flat, capacity = run._flat, run._capacity
    row, done, emitted_before, chunk = after
    tokens = flat[_TOKENS * capacity + row] + lag
    if done + chunk >= tokens:
        return False
    flat[_COMPUTED * capacity + row] += chunk - 1
    flat[_TOKENS * capacity + row] -= 1
    flat[_GENERATED * capacity + row] -= 1
    still_decodes = done + chunk + 1 == tokens and emitted_before != 0
    now = r.now
    if last:
        r.itl.add(duration, float(last))
    rows.itl_restart(last)
    rows.emitted_first(now, row)
    r._decoding = None if still_decodes else False
    if rows.known_rows and rows.fewest_known_left() <= 0:
        r.finish(rows.finished_rows())
    r.chunk_mark = (r.num_steps, now, run._size)
    return True


def column_finish(r: Replica, last: int, chunks: list[int], duration: float) -> None:
    """The rest of the step in column form (``Replica._finish_step``): the decoders take the
    block they cross into, every row its tokens, and the rows whose prompt is done sample."""
    run = r.running
    computed = run.num_computed  # settled, as plain columns
    run.held_blocks[:last] += computed[:last] % run.rows.block == 0
    sched = np.array([1] * last + chunks, dtype=np.int64)
    r._finish_step(sched, duration)
    r._decoding = None


def prefill_on_step(r: Replica) -> bool:
    """``chunk_step`` of the step after a chunk step where the same last row prefills on with
    the whole budget left it (a doomed head's or a long recompute's chunks, ``chunk_run.py``):
    the same writes in the same order, without ``last_row_chunk``'s and ``decoders_ready``'s
    questions that the last chunk step answered (its ``chunk_mark``, the decoders' scalars and
    emission time as it left them), ``emit_rows``' dispatch and its lists. False, having
    changed nothing, in any other state (``Replica.step`` then runs the step)."""
    run = r.running
    rows, last = run.rows, run._size - 1
    if r.chunk_mark != (r.num_steps, r.now, run._size) or last < 1:
        return False  # not right after a chunk step (``decoders_ready``'s learning path)
    if rows.known_rows != last or rows.held_rows > last or rows.time_rows != last:
        return False
    if rows.time_s != r.now or r.swapped or type(r.waiting) is not WaitingQueue:
        return False
    if r.scheduler.admission_path != PLAIN or r.spec is not None or not r.vector_steps:
        return False  # (``last_row_chunk``'s; unchanged since that chunk step)
    budget, block, lag = r.cfg.max_num_batched_tokens, rows.block, rows.lag
    flat, capacity = run._flat, run._capacity
    computed = flat[_COMPUTED * capacity + last] + lag
    tokens = flat[_TOKENS * capacity + last] + lag
    generated = flat[_GENERATED * capacity + last] + lag
    chunk = budget - last  # ``min(left, budget - last)`` where the row prefills on
    if not 0 < chunk < tokens - computed or not block:
        return False  # its last chunk, or a budget the decoders fill
    held = flat[_HELD * capacity + last]
    grown = max(-(-(computed + chunk) // block) - held, 0)
    crossing = rows.hist[-lag % block]  # ``crossings(1)`` of the decoders
    pool = r.pool
    if crossing + grown > pool.free_blocks:
        return False  # the running pass preempts: ``preempt_step``
    pool.free_blocks -= crossing + grown  # nothing to evict (no prefix cache)
    flat[_HELD * capacity + last] = held + grown
    decode_context = rows.computed_sum + last * (lag + 1)
    r.scheduler.step_fit = None  # ``admit_waiting`` with no budget left (``chunk_step``)
    duration = r.step_s.seconds(*step_shape(last, decode_context, [chunk], [computed]))
    r.trace.record(r.now, pool.num_blocks - pool.free_blocks)
    start = r.now
    r.now = now = start + duration
    r.num_steps += 1
    if start != now - duration:  # gaps not one step long in floats: the column form
        column_finish(r, last, [chunk], duration)
        return True
    rows.decode(1, crossing, last)  # ``emit_rows``, its one row prefilling on
    rows.itl_mark(duration)  # the decoders' one-step gap
    _emit_prefilling(r, last, (last, computed, generated, chunk), duration, lag)
    return True
