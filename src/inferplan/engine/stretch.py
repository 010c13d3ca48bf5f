"""Pure-decode stretches in closed form, and the preemption steps that end them (DESIGN §4).

Between events a pure-decode batch is constant, so ``advance_decode`` runs a whole stretch of
steps at once: it ends at the first finishing sequence, the step that starts at or after the
next arrival, the step whose block allocation would fail, or where the step-time line stops
holding. ``DecodeStretches`` is the component of a ``Replica`` that does this; the scheduler is
in ``schedulers.py``, the pool in ``memory/blockpool.py`` and the exact steps in ``replica.py``.
"""

from __future__ import annotations

import math
from math import ceil, isfinite
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.ownstretch import own_block_stretch_steps

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica

# The ufuncs' own reductions: ``ndarray.sum()`` and friends add a Python wrapper per call, which
# costs more than the work on a batch of a few hundred rows.
_sum, _min = np.add.reduce, np.minimum.reduce


class DecodeStretches:
    """The closed-form verbs of one replica (a component it owns): whether its batch can
    stretch, how far, running the stretch, and the vector preemption step that ends one."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        # What ``stretch_steps`` learnt about the batch (total context, fewest output tokens
        # left), keyed by the replica's (steps, clock, batch size): ``advance_decode`` of the
        # same state reuses it instead of reducing the columns again.
        self._known: tuple[int, float, int, int, int] | None = None
        # (steps, clock) of the last ``can_stretch`` that asked the scheduler: its
        # ``Scheduler.joins`` holds for a step that starts there (``implicit_step.py``).
        self.asked_at: tuple[int, float] | None = None
        from inferplan.engine.schedulers import Scheduler  # the replica's own import order

        cls = type(replica.scheduler)
        # Whether the scheduler looks at the queue every step and keeps no count of steps
        # (``Scheduler``'s own ``steps_to_scheduling_point`` and ``note_steps``, which do
        # nothing): a stretch then leaves out their calls.
        self._every_step = (
            cls.steps_to_scheduling_point is Scheduler.steps_to_scheduling_point
            and cls.note_steps is Scheduler.note_steps
        )
        # Whether the scheduler's ``head_can_join`` is ``Scheduler``'s, whose first test
        # (nothing queued or swapped out: no) ``can_stretch`` then asks without its call.
        self.base_join = cls.head_can_join is Scheduler.head_can_join
        # Whether ``stretch`` may take its implicit-row form (``_implicit_stretch``): the
        # scheduler counts no steps and no idle slots (static batching's).
        self._lean = self._every_step and not cls.counts_idle_slots

    def can_stretch(self) -> bool:
        """A pure-decode batch that nothing waiting can join until an event (the scheduler's
        own admission test says so)."""
        r = self.replica
        scheduler = r.scheduler
        # Set by vLLM v1's ``head_can_join`` only (its subclasses' too): not None only where
        # this call asked it (``implicit_step.joined_admission_step`` relies on that).
        scheduler.joins = None
        n = r.running._size
        if n == 0 or n > r.cfg.max_num_batched_tokens:
            return False
        decoding = r._decoding  # ``is_decoding``, its cached answer without the call
        if not (r.is_decoding() if decoding is None else decoding):
            return False
        self.asked_at = (r.num_steps, r.now)
        if self.base_join and not (r.swapped or r.waiting.tokens):
            return True  # ``Scheduler.head_can_join``'s first test: nothing can join
        return not scheduler.head_can_join()

    def stretch(self, next_arrival_s: float) -> tuple[int, bool]:
        """``stretch_steps`` and ``advance_decode`` of its ``k`` steps in one pass (what the
        plan learnt about the batch handed on, not kept): (k, pool_bound)."""
        r = self.replica
        pool = r.pool
        if (
            self._lean
            and r.running.rows.block
            and r.running._size
            and pool.is_uniform
            and r.offload is None
            and r.scheduler.admission is None
            and (pool.cache is None or not r.waiting.tokens)
        ):
            return self._implicit_stretch(next_arrival_s)
        k, a, b, pool_bound, context, remaining = self._plan(next_arrival_s)
        if k > 0:
            self._run(k, a, b, context, remaining)
        return k, pool_bound

    def _implicit_stretch(self, next_arrival_s: float) -> tuple[int, bool]:
        """``stretch`` of implicit rows in a uniform pool, with nothing that bounds a stretch
        but a finish, the step-time line, the arrival and the pool (no step count, own-block
        head, KV tiers or admission policy): ``_plan`` and ``_run`` in one frame, with the
        rows' small verbs (``fewest_left``, ``_steps_before``'s usual answer, ``itl_mark``,
        ``crossings``, ``decode``, ``emitted``) written out. The same integers and the same
        float operations in the same order (the usual stretch below capacity, two a
        request: its calls were a third of its cost)."""
        r = self.replica
        run, pool, now = r.running, r.pool, r.now
        rows, n = run.rows, run._size
        # ``_plan``: ``fewest_left`` (learning the rows where they are not known) and
        # ``total_context``
        if rows.known_rows != n:
            rows.learn()
        lag = rows.lag
        remaining = rows.fewest_known_left() if rows.gone else rows.due[0] - lag
        context = rows.computed_sum + n * (lag + 1)
        a, b, limit = r.model.decode_line(n, context)
        k = remaining
        if isfinite(limit):
            k = min(k, max(0, ceil((limit - context) / n)))
        if isfinite(next_arrival_s):
            window_s = next_arrival_s - now
            # ``_steps_before``'s usual answer (a stretch cut by a finish) without its call
            if window_s <= 0 or k <= 0:
                k = 0
            elif not k * a + b * (k * context + n * k * (k - 1) / 2) < window_s:
                k = _steps_before(window_s, a, b, context, n, k)
        if (pool.free_blocks // n) * pool.block_size >= k:
            k_pool = k
        else:
            k, k_pool = self._steps_before_pool_runs_out(k)
        pool_bound = k_pool < k
        k = min(k, k_pool)
        if k <= 0:
            return k, pool_bound
        # ``_run``
        first = a + b * context
        step = b * n
        total = k * a + b * (k * context + n * k * (k - 1) / 2)
        r.trace.record(now, pool.num_blocks - pool.free_blocks)
        if rows.time_rows >= n and rows.time_s == now:  # all emitted at now: one mark
            gap_s = first + (k - 1) * step  # ``itl_mark``
            vals, poss = rows._itl_val, rows._itl_pos
            while vals and vals[-1] <= gap_s:
                vals.pop()
                poss.pop()
            vals.append(gap_s)
            poss.append(rows.itl_length)
            rows.itl_length += 1
            if len(vals) > rows._prune_at:
                rows._prune()
            r.itl.add_arithmetic(first, step, k, float(n))
        else:  # settles the rows and forgets the scalars: relearnt by ``crossings`` below
            self._uneven_itl(first, step, k)
        # ``crossings(k)`` then ``decode``: every row then holds ceil(computed / B) blocks
        if rows.known_rows != n:
            rows.learn()
        block, lag, hist = rows.block, rows.lag, rows.hist
        top = -lag % block  # offset 0's bin
        if k == 1:
            new_blocks = hist[top]
        else:
            new_blocks = n * (k // block)
            low = top - k % block + 1
            if low >= 0:
                new_blocks += sum(hist[low : top + 1])
            else:
                new_blocks += sum(hist[: top + 1]) + sum(hist[low + block :])
        rows.lag = lag + k
        ceil_sum = rows.ceil_sum = rows.ceil_sum + new_blocks
        rows.held_rows, rows.pending = n, True
        # The pool is what rows do not map (shared prefix blocks counted once).
        cache = pool.cache
        if cache is None:
            pool.free_blocks = r.cfg.num_blocks - ceil_sum  # nothing to evict
        else:  # ``BlockPool.free``'s setter, inline: evicts what no longer fits
            pool.free_blocks = free = r.cfg.num_blocks - ceil_sum + cache.shared_blocks
            if cache.lru_blocks > free:
                cache.evict_to(free)
        r.now = now = now + total
        r.num_steps += k
        rows.time_rows, rows.time_s = n, now  # ``emitted``
        if k >= remaining:
            # ``finished_rows``' known case: every row is known (``crossings`` learnt them) and
            # the fewest left is ``remaining - k == 0`` (the heap's top was settled above)
            left, lag = rows.left, rows.lag
            if left.count(lag) == 1:
                r.finish([left.index(lag)])
            else:
                r.finish([row for row, key in enumerate(left) if key == lag])
        return k, pool_bound

    def stretch_steps(self, next_arrival_s: float) -> tuple[int, float, float, bool]:
        """(steps k, a, b, pool_bound): the stretch length, its step-time line ``a + b*C``, and
        whether it ends only because step ``k`` cannot get its blocks."""
        k, a, b, pool_bound, context, remaining = self._plan(next_arrival_s)
        r = self.replica
        self._known = (r.num_steps, r.now, r.running._size, context, remaining)
        return k, a, b, pool_bound

    def _plan(self, next_arrival_s: float) -> tuple[int, float, float, bool, int, int]:
        """``stretch_steps``' answer, and the batch's total context and fewest tokens left."""
        r = self.replica
        run = r.running
        n, rows = run._size, run.rows
        if rows.block:  # implicit rows: the scalars (``engine/implicit.py``)
            remaining = rows.fewest_left()  # learns them where they are not known
            context = rows.computed_sum + n * (rows.lag + 1)  # ``total_context``
        else:
            context = int(_sum(run.num_computed)) + n
            remaining = int(_min(run.target - run.num_generated))
        a, b, limit = r.model.decode_line(n, context)
        k = remaining
        if math.isfinite(limit):
            k = min(k, max(0, math.ceil((limit - context) / n)))
        if math.isfinite(next_arrival_s):
            k = _steps_before(next_arrival_s - r.now, a, b, context, n, k)
        if not self._every_step:
            block_end = r.scheduler.steps_to_scheduling_point()
            if block_end is not None:
                k = min(k, block_end)
        pool = r.pool
        # Own blocks: on to the step that admits the head (both forms give ``k`` with nothing
        # queued, the usual stretch below capacity)
        if pool.cache is not None and r.waiting.tokens:
            own = own_block_stretch_steps(r, k)
            k = min(k, self._steps_before_head_hit_shrinks(k) if own is None else own)
        if r.offload is not None and r.offload.evictable_blocks():
            k = min(k, self._steps_before_eviction(k, r.offload.evictable_blocks()))
        if pool.is_uniform and (pool.free_blocks // n) * pool.block_size >= k:
            k_pool = k  # ``_steps_before_pool_runs_out``'s first answer, without its call
        else:
            k, k_pool = self._steps_before_pool_runs_out(k)
        admission = r.scheduler.admission
        if admission is not None:  # growth beyond reservations may exhaust the unreserved
            # blocks first; the scheduler's own pass handles the step that ends the stretch.
            k = admission.steps_before_exhaustion(run, min(k, k_pool))
            admission.note_stretch(run, k)
            return k, a, b, False, context, remaining
        return min(k, k_pool), a, b, k_pool < k, context, remaining

    def _steps_before_head_hit_shrinks(self, k: int) -> int:
        """Steps (at most ``k``) before the stretch's new blocks evict a cached block the queue
        head's prefix hit uses. A smaller hit can let the head in (its hit blocks on the LRU
        list count as allocations, and its chunk then ends earlier), so admission is not
        monotone in the free pool under prefix caching: the stretch stops there."""
        r = self.replica
        cache, pool, run = r.pool.cache, r.pool, r.running
        if cache is None or not len(r.waiting):
            return k
        rid, tokens = r.waiting.peek()
        hit, _ = r.scheduler.prefix_hit(rid, tokens)
        if not hit:
            return k
        spare = pool.free_blocks - cache.lru_blocks  # blocks handed out before anything is evicted
        consumed = int((pool.blocks_for(run.num_computed + k) - run.held_blocks).sum())
        if spare >= consumed:
            return k
        keys = cache.hit_keys(rid, hit // (cache.entry_kv_blocks * pool.block_size))
        allowed = spare + cache.blocks_before(keys, consumed - spare)
        if allowed >= consumed:
            return k
        return self._steps_before_pool_runs_out(k, free=allowed)[1]

    def _steps_before_eviction(self, k: int, evictable: int) -> int:
        """Steps (at most ``k``) whose new blocks fit in the free blocks that hold no cached
        entry: with KV tiers an evicted entry is written down at the step that evicts it, so
        that step runs exactly (``engine/offload.py``)."""
        return self._steps_before_pool_runs_out(k, free=self.replica.pool.free - evictable)[1]

    def _steps_before_pool_runs_out(self, k: int, free: int | None = None) -> tuple[int, int]:
        """(k, k_pool): the stretch's length, shortened where the pool's crossing costs change,
        and the first step whose block allocation fails (``>= k`` when none in ``k`` steps), in
        a pool of ``free`` blocks (default: the free pool).
        Every row crosses into a new block once per ``block_size`` steps, at its offset
        ``(-computed) mod block_size``; a round of crossings costs the sum of the rows' costs,
        so ``free // round`` rounds succeed and, within the next, the first crossing (in offset
        order) that the rest of the pool cannot cover fails."""
        r = self.replica
        run, pool, block = r.running, r.pool, r.cfg.block_size
        free, n = pool.free_blocks if free is None else free, run._size
        if pool.is_uniform:  # every crossing costs one block: a partial sort finds it
            full_rounds = (free // n) * block
            if full_rounds >= k:
                return k, k
            if run.rows.block:
                return k, full_rounds + run.rows.kth_offset(free % n)
            offsets = (-run.num_computed) % block
            return k, full_rounds + int(np.partition(offsets, free % n)[free % n])
        cost, hold = pool.next_crossing_costs(run.num_computed)
        per_round = int(cost.sum())
        if per_round == 0 or (free // per_round) * block >= k:
            return k, k  # costs only fall as windows fill, so the pool lasts longer
        if hold is not None:
            k = min(k, hold)
        full_rounds = (free // per_round) * block
        offsets = (-run.num_computed) % block
        order = np.argsort(offsets, kind="stable")
        failing = int(np.argmax(np.cumsum(cost[order]) > free % per_round))
        return k, full_rounds + int(offsets[order[failing]])

    def advance_decode(self, k: int, a: float, b: float, context: int | None = None) -> None:
        """Run ``k`` decode steps of the current batch at once (``context``: its total
        context, ``sum(num_computed) + n``, when the caller knows it)."""
        r = self.replica
        known, self._known = self._known, None
        remaining = None
        # What ``stretch_steps`` learnt, if of this state (steps, clock, batch size).
        if known is not None and known[:3] == (r.num_steps, r.now, r.running._size):
            context, remaining = known[3], known[4]
        self._run(k, a, b, context, remaining)

    def _run(self, k: int, a: float, b: float, context: int | None, remaining: int | None) -> None:
        """``k`` decode steps of the batch (its total context and fewest tokens left where
        known): the stretch's sums and records, then the rows, implicit (without touching a
        column when every row emitted at ``now``) or as columns (``_decode_columns``)."""
        r = self.replica
        run, pool, now = r.running, r.pool, r.now
        rows, n = run.rows, run._size
        if context is None:
            context = rows.total_context() if rows.block else int(_sum(run.num_computed)) + n
        first = a + b * context
        step = b * n
        total = k * a + b * (k * context + n * k * (k - 1) / 2)
        r.trace.record(now, pool.num_blocks - pool.free_blocks)
        if r.scheduler.counts_idle_slots:
            r.count_idle_slots(k)
        if not rows.block:
            self._decode_columns(k, first, step, total, remaining)
            return
        if n and rows.time_rows >= n and rows.time_s == now:  # all emitted at now: one mark
            rows.itl_mark(first + (k - 1) * step)
            r.itl.add_arithmetic(first, step, k, float(n))
        else:
            self._uneven_itl(first, step, k)
        if remaining is None:
            remaining = rows.fewest_left()
        rows.decode(k, rows.crossings(k), n)  # every row then holds ceil(computed / B) blocks
        # The pool is what rows do not map (shared prefix blocks counted once).
        cache = pool.cache
        if cache is None:
            pool.free_blocks = r.cfg.num_blocks - rows.ceil_sum  # nothing to evict
        else:  # ``BlockPool.free``'s setter, inline: evicts what no longer fits
            pool.free_blocks = free = r.cfg.num_blocks - rows.ceil_sum + cache.shared_blocks
            if cache.lru_blocks > free:
                cache.evict_to(free)
        r.now = now = now + total
        r.num_steps += k
        if not self._every_step:
            r.scheduler.note_steps(k)
        rows.emitted(now)
        if k >= remaining:
            r.finish(rows.finished_rows())

    def _uneven_itl(self, first: float, step: float, k: int) -> None:
        """A stretch's ITL samples where not every row emitted at ``now`` (or not known to):
        reading the token times settles the rows and forgets the scalars."""
        r = self.replica
        now = r.now
        last_token = r.running.last_token_s
        same = None if _min(last_token) == now else last_token == now
        gaps = None if same is None else np.where(same, first, now + first - last_token)
        self._stretch_itl(gaps, same, first, step, k)

    def _decode_columns(
        self, k: int, first: float, step: float, total: float, remaining: int | None
    ) -> None:
        """The rows of ``_run``'s stretch as columns (pools with sliding windows, whose
        crossings cost each row its own blocks)."""
        r = self.replica
        run, cfg, pool, now = r.running, r.cfg, r.pool, r.now
        # Views of the columns: the in-place operations below write through.
        computed, held, last_token = run.num_computed, run.held_blocks, run.last_token_s
        # Every token time is <= now, so all rows emitted at now iff the earliest did.
        same = None if _min(last_token) == now else last_token == now
        gaps = None if same is None else np.where(same, first, now + first - last_token)
        run.decode(k)  # num_computed, num_tokens and num_generated += k
        if pool.is_uniform:
            np.floor_divide(computed + (cfg.block_size - 1), cfg.block_size, out=held)
        else:
            held[:] = pool.blocks_for(computed)
        # The pool is what rows do not map (shared prefix blocks counted once).
        pool.free = cfg.num_blocks - int(_sum(held)) + pool.shared
        self._stretch_itl(gaps, same, first, step, k)
        r.now = now = now + total
        r.num_steps += k
        r.scheduler.note_steps(k)
        last_token.fill(now)
        generated, target = run.num_generated, run.target
        if remaining is None:
            remaining = int(_min(target - generated)) + k
        if k >= remaining:
            r.finish((generated >= target).nonzero()[0])

    def _stretch_itl(
        self, gaps: np.ndarray | None, same: np.ndarray | None, first: float, step: float, k: int
    ) -> None:
        """ITL samples of a stretch: ``k`` steps for every sequence, where a sequence that did
        not emit at the stretch's start (``same`` False) has a longer first gap (``gaps``; both
        None if every sequence emitted then)."""
        r = self.replica
        ids, max_itl = r.running.ids, r.records.max_itl_s
        last = first + (k - 1) * step
        if gaps is None or same is None:
            max_itl[ids] = np.fmax(max_itl[ids], last)
            r.itl.add_arithmetic(first, step, k, float(len(ids)))
            return
        max_itl[ids] = np.fmax(max_itl[ids], np.maximum(gaps, last))
        r.itl.add_arithmetic(first, step, k, float(same.sum()))
        others = ~same
        r.itl.add_many(gaps[others])
        r.itl.add_arithmetic(first + step, step, k - 1, float(others.sum()))

    def preempting_decode_step(self) -> None:
        """The step a pure-decode batch takes when the pool cannot give every sequence crossing
        a block boundary its new block, in vector form: the running pass pops the last-admitted
        requests until the rest fit. Popping is lazy and both sides only move one way, so the
        number of victims is the smallest ``p`` with
        ``new blocks of rows[:n-p] <= free + blocks held by rows[n-p:]``. No request is admitted
        in a step that preempted (vLLM v1); swapping victims out adds its time to the step."""
        r = self.replica
        if r.pool.cache is not None:
            # With prefix caching the order of allocations and frees decides which cached
            # blocks are evicted, and a victim frees only the blocks nobody else maps: the
            # scheduler's own running pass, one row at a time; own blocks have that order in
            # closed form (imported here: ``ownsteps`` uses ``num_victims`` below).
            from inferplan.engine.ownsteps import own_block_preemption_step

            if not own_block_preemption_step(r):
                r.step()
            return
        run = r.running
        self._known = None
        victims = num_victims(r.pool.crossing_cost(run.num_computed), run.held_blocks, r.pool.free)
        swap_s = 0.0
        for _ in range(victims):
            swap_s += r.scheduler.preempt(len(run) - 1)
        if len(run):  # the rest decode one token each: a one-step stretch
            context = int(run.num_computed.sum()) + len(run)
            a, b, _ = r.model.decode_line(len(run), context)
            self.advance_decode(1, a + swap_s, b, context)
        else:  # nothing left to run: the step is only the swap-out
            r.now += swap_s


def num_victims(need: np.ndarray, held: np.ndarray, free: int) -> int:
    """The fewest rows ``p`` to pop from the tail so that the rest's new blocks fit:
    ``need[:n-p].sum() <= free + held[n-p:].sum()``. Each victim lowers the left side and
    raises the right, so counting them one at a time from the tail finds the first ``p``
    (usually 1, so scalar steps beat cumulative sums over the batch)."""
    n, need_rest = len(need), int(need.sum())
    victims = 0
    while need_rest > free:
        victims += 1
        need_rest -= int(need[n - victims])
        free += int(held[n - victims])
    return victims


def _steps_before(window_s: float, a: float, b: float, context: int, n: int, cap: int) -> int:
    """Steps that start before ``window_s`` from now, at most ``cap``: the smallest ``i <= cap``
    with ``S(i) >= window_s``, or ``cap`` if there is none, where
    ``S(i) = i*a + b*(i*C + n*i*(i-1)/2)`` is the time ``i`` steps take. ``S`` is increasing,
    so a bisection bounds the work (a far window, e.g. an arrival 1e100 s away, must not make
    the search walk one float at a time)."""
    if window_s <= 0 or cap <= 0:
        return 0
    if cap * a + b * (cap * context + n * cap * (cap - 1) / 2) < window_s:  # ``elapsed(cap)``
        return cap  # the usual answer of a stretch cut by a finish: no search

    # Each probe below is ``S(i)`` written out (``i * a + b * (i * C + n * i * (i - 1) / 2)``,
    # the same floats): about one search a request below capacity, where a closure and its
    # calls cost as much as the arithmetic.
    qa, qb = b * n / 2, a + b * context - b * n / 2
    root = math.sqrt(qb * qb + 4 * qa * window_s)
    guess = (-qb + root) / (2 * qa) if qa > 0 else window_s / qb if qb > 0 else cap
    # Bracket the answer in (low, high] with S(low) < window_s <= S(high), starting near the
    # root: usually two probes settle it, and the bisection is the bound.
    low, high = 0, cap
    i = min(max(0, math.ceil(guess) - 2), cap)
    if i * a + b * (i * context + n * i * (i - 1) / 2) >= window_s:
        high = i
        if i >= 2:
            i -= 2
            if i * a + b * (i * context + n * i * (i - 1) / 2) < window_s:
                low = i
    else:
        low = i
        i += 2
        if i < high and i * a + b * (i * context + n * i * (i - 1) / 2) >= window_s:
            high = i
    while high - low > 1:
        i = (low + high) // 2
        if i * a + b * (i * context + n * i * (i - 1) / 2) >= window_s:
            high = i
        else:
            low = i
    return high
