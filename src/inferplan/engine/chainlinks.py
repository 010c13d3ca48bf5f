"""A chain's links in one frame (``engine/chain.py``; issue 10, above capacity).

A chain is a run of links: a preemption step (tail victims popped, then one decode step of the
rest) and the stretch after it, to the next step whose blocks do not fit. ``_Chain.run`` takes
each link through a dozen calls (``_preemption_step``, ``_preempt_victims``, the block state's
``first_failure``, ``held`` and ``pop``, ``_context``, ``_segment`` twice, ``_head_can_join``,
``_stretch_steps``, ``_left``), each reading the chain's fields again: about 15 us a link,
138,000 links and 47 % of ``above --num-requests 20000 --bare``. Here a chain without own
blocks runs its links in one loop over locals: the block state (``TailBlocks``' ``at_least``,
``K_p``, ``p``), the clock, the steps done and the records' lists are read once a chain and
written back once, at its end, before ``_Chain._commit``.

Every expression is the reference's (``_Chain``'s methods, kept for own blocks and as the reference
in ``tests/engine/test_chain_links.py``): the same integers, the same float operations in the same
order, the same calls out (``decode_line``, ``_steps_before``, the queue's ``push_front`` and
``peek``, ``plain_head_chunk``, the intake; a FIFO ``WaitingQueue``'s push and the per-link head
test written out), so runs are bit for bit the same. One test is known instead of asked: a
preemption step follows a stretch that ended at the pool's first failing step (or, at the chain's
start, ``is_consistent``'s first failure at step 0), so its first victim is popped without asking
``first_failure`` again; and the stretch after a preemption step takes its pool bound from the
pop loop's last test (the step pops nothing and takes no block count). The roofline's cached
line for ``p`` rows is read in place where the context lies in its range.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from inferplan.engine.plain_admission import plain_head_chunk
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.stretch import _steps_before
from inferplan.metrics.moments import ARITHMETIC
from inferplan.perf.roofline import RooflineModel

if TYPE_CHECKING:
    from inferplan.engine.chain import _Chain

_COMPUTED = 1  # ``RunningSet._ints``' row of computed tokens (``engine/running.py``)


def run_links(chain: _Chain, next_arrival_s: float, preempting: bool) -> None:
    """``_Chain.run`` of a chain without own blocks (``chain.own is None``): the same links,
    records and commit. One function on purpose: its locals are the point (module doc)."""
    r = chain.r
    cfg, waiting = r.cfg, r.waiting
    decode_line, push_front, peek = r.model.decode_line, waiting.push_front, waiting.peek
    # The roofline's line of ``p`` rows holds for every context in ``[lower, limit)`` and its
    # cache answers the stretch after a preemption step with the step's own line while the
    # stretch's context (``p`` higher) stays below ``limit``: the same floats, one call fewer.
    # The table model's lines are secants through the context (``perf/table.py``): asked.
    reuses_line = type(r.model) is RooflineModel
    # ``RooflineModel.decode_line``'s cache hit read here (its lines per batch size with the
    # context range each holds for: the same floats, a call fewer a link); a miss asks it. Not
    # where the instance's ``decode_line`` is its own (``tests/engine/test_chain_lines.py``).
    model = r.model
    own_line = "decode_line" in getattr(model, "__dict__", ())
    lines_get = model._lines.get if type(model) is RooflineModel and not own_line else None
    # A FIFO queue's head after a preemption step is its last victim (pushed to the front;
    # arrivals join the tail), whose tokens the chain knows: no ``peek``. SPF's heap: asked.
    head_tokens: int | None = None
    is_fifo = waiting.is_fifo
    queued = waiting.tokens  # the queue's dict: non-empty iff the queue is (``len(waiting)``)
    # A FIFO ``WaitingQueue``'s ``push_front`` written out: the token count, then the deque.
    appendleft = waiting._fifo.appendleft if is_fifo and type(waiting) is WaitingQueue else None
    intake = chain.intake
    max_tokens, max_seqs = cfg.max_num_batched_tokens, cfg.max_num_seqs
    # The victims' ids and computed tokens read as Python ints through the columns' flat
    # view (``RunningSet._flat``: ``_ints[c, row]`` at ``c * _capacity + row``; the columns
    # stay untouched until ``_commit``), plus the implicit rows' lag (``_Chain.computed_lag``).
    run = r.running
    flat, computed_at, start_lag = run._flat, _COMPUTED * run._capacity, chain.computed_lag
    # The fewest output tokens left among the first ``p`` rows (``_Chain._fewest_left``): the
    # rows' minimum (implicit rows: their heap of left counts, every row known), found again
    # only where a victim held it (victims leave from the tail).
    left_stored, left_lag = chain.left_stored, chain.left_lag
    rows = run.rows
    fewest = rows.fewest_known_left() if chain.implicit else min(left_stored) - left_lag
    blocks = chain.blocks
    at_least, k_p, p = blocks.at_least, blocks.k, blocks.p
    block, usable, outside = chain.block, chain.usable, chain.outside
    j, now, seg_max_itl, computed_sum = chain.j, chain.now, chain.seg_max_itl, chain.computed_sum
    finished = chain.finished
    victim_ids, victim_computed, victim_itl = (
        chain.victim_ids,
        chain.victim_computed,
        chain.victim_itl,
    )
    trace_times, trace_blocks = chain.trace_times, chain.trace_blocks
    itl_updates = chain.itl_updates
    step_line: tuple[float, float, float] | None = None  # the last preemption step's line
    inf = math.inf  # builtins' ``min``, ``max`` and ``math.isfinite`` as comparisons (per link)
    step_after = False  # the loop's own ``Replica.step`` (a stretch of no steps, no preemption)
    # The first failing step of the rows a preemption step leaves (``first_failure``): found by
    # its pop loop's last test, and the stretch after it asks the same rows and blocks.
    fails_at: int | None = None
    while True:
        if preempting:
            # ``_preempt_victims``: the first victim is known (module doc); then pop while the
            # rest's first failing step (``TailBlocks.first_failure``) is at or before ``j``.
            while True:
                row = p - 1
                start = flat[computed_at + row] + start_lag
                rid = flat[row]  # ``ids``: column 0
                if appendleft is not None:
                    queued[rid] = head_tokens = start + j + 1
                    appendleft(rid)
                else:
                    push_front(rid, num_tokens=start + j + 1)
                    if is_fifo:
                        head_tokens = start + j + 1
                computed_sum -= start
                victim_ids.append(rid)
                victim_computed.append(start + j)
                victim_itl.append(seg_max_itl)
                for v in range(start % block + 1):  # ``TailBlocks.pop``
                    at_least[v] -= 1
                k_p -= start // block + 1
                p = row
                if row and left_stored[row] - left_lag == fewest:
                    fewest = min(left_stored[:row]) - left_lag
                if p == 0:
                    break
                q, rest = divmod(usable - k_p, p)
                if q >= 0:
                    v = block - 1
                    while at_least[v] <= rest:
                        v -= 1
                    fails_at = block * q + block - v
                    if fails_at > j:
                        break
            if p == 0:  # nothing left to run: the loop's ``can_stretch`` fails
                break
            # The preemption step: ``_segment`` of one step (no swap time). With ``k = 1`` its
            # total ``k * a + b * (k * C + n * k * (k - 1) / 2)`` is ``first`` exactly
            # (``1 * a == a``, ``C + 0.0 == C`` below 2**53).
            context = computed_sum + p * j + p
            line = lines_get(p) if lines_get is not None else None
            if line is not None and line[2] <= context < line[3]:
                step_line = a, b, _ = line[0], line[1], line[3]
            else:
                step_line = a, b, _ = decode_line(p, context)
            first = (a + 0.0) + b * context
            step = b * p
            trace_times.append(now)
            trace_blocks.append(
                outside + p * ((j - 1) // block) + k_p + at_least[block - (j - 1) % block]
            )
            last = first + 0 * step
            if last > seg_max_itl:
                seg_max_itl = last
            if not (first >= 0.0 and last >= 0.0):  # ``add_arithmetic``'s check
                raise ValueError(f"ITL durations must be >= 0, got {first} .. {last}")
            itl_updates.append((ARITHMETIC, first, step, 1, float(p), last))
            now += first
            finished = fewest - j <= 1
            j += 1
            if not finished and now >= next_arrival_s and intake is not None and queued:
                bound = intake(now)  # ``_arrivals_in``
                if bound is not None:
                    next_arrival_s = bound
            if finished or now >= next_arrival_s:
                break
            # ``_head_can_join``
            if p > max_tokens:
                break
            if queued and p < max_seqs and max_tokens - p > 0:
                available = usable - (p * (j // block) + k_p + at_least[block - j % block])
                tokens = peek()[1] if head_tokens is None else head_tokens
                leftover = max_tokens - p  # ``plain_head_chunk``'s test, inline (per link)
                if -(-(tokens if tokens < leftover else leftover) // block) <= available:
                    break
        preempting = True
        # ``_stretch_steps``
        context = computed_sum + p * j + p
        if step_line is not None and reuses_line and context < step_line[2]:
            a, b, limit = step_line
        else:
            line = lines_get(p) if lines_get is not None else None
            if line is not None and line[2] <= context < line[3]:
                a, b, limit = line[0], line[1], line[3]
            else:
                a, b, limit = decode_line(p, context)
        step_line = None
        k = fewest - j
        if -inf < limit < inf:  # ``math.isfinite``; then ``min(k, max(0, ahead))``
            ahead = math.ceil((limit - context) / p)
            if ahead < 0:
                ahead = 0
            if ahead < k:
                k = ahead
        if fails_at is not None:  # the pop loop's last answer: the same rows and blocks
            k_pool, fails_at = fails_at - j, None
        else:
            q, rest = divmod(usable - k_p, p)
            if q < 0:
                k_pool = -j
            else:
                v = block - 1
                while at_least[v] <= rest:
                    v -= 1
                k_pool = block * q + block - v - j
        if -inf < next_arrival_s < inf:
            # ``_steps_before``'s usual answer written out (its first two tests, the same
            # floats): the whole capped stretch starts before the arrival.
            cap = k if k < k_pool + 1 else k_pool + 1  # ``min(k, k_pool + 1)``
            window_s = next_arrival_s - now
            if window_s <= 0 or cap <= 0:
                k = 0
            elif cap * a + b * (cap * context + p * cap * (cap - 1) / 2) < window_s:
                k = cap
            else:
                k = _steps_before(window_s, a, b, context, p, cap)
        pool_bound = k_pool < k
        if pool_bound:  # ``min(k, k_pool)``
            k = k_pool
        if k > 0:  # ``_segment``
            first = a + b * context
            step = b * p
            trace_times.append(now)
            trace_blocks.append(
                outside + p * ((j - 1) // block) + k_p + at_least[block - (j - 1) % block]
            )
            last = first + (k - 1) * step
            if last > seg_max_itl:
                seg_max_itl = last
            if not (first >= 0.0 and last >= 0.0):  # ``add_arithmetic``'s check
                raise ValueError(f"ITL durations must be >= 0, got {first} .. {last}")
            itl_updates.append((ARITHMETIC, first, step, k, float(p), last))
            now += k * a + b * (k * context + p * k * (k - 1) / 2)
            finished = k >= fewest - j
            j += k
        if pool_bound:
            continue
        if k > 0 and not finished and intake is not None and queued:
            bound = intake(now)  # ``_arrivals_in``
            if bound is not None:
                # ``not _head_can_join()``: go on to a stretch bounded by the next arrival
                if p > max_tokens:
                    break
                if not queued or p >= max_seqs or max_tokens - p <= 0:
                    next_arrival_s, preempting = bound, False
                    continue
                available = usable - (p * (j // block) + k_p + at_least[block - j % block])
                tokens = peek()[1] if head_tokens is None else head_tokens
                if plain_head_chunk(tokens, max_tokens - p, block, available) is None:
                    next_arrival_s, preempting = bound, False
                    continue
        step_after = k == 0
        break
    blocks.k, blocks.p = k_p, p
    chain.j, chain.p, chain.now, chain.seg_max_itl = j, p, now, seg_max_itl
    chain.computed_sum, chain.finished = computed_sum, finished
    chain._commit()
    if step_after:
        r.step()
