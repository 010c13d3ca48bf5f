"""SGLang's scheduler (``--engine sglang``): prefill first, new-token-ratio admission, retraction,
radix cache.

Emulates SGLang 0.5.4 (github.com/sgl-project/sglang: ``sglang/srt/managers/scheduler.py``,
``schedule_policy.py`` ``PrefillAdder``, ``schedule_batch.py`` ``retract_decode``):

- **Prefill first, mixed chunk off (its default).** When a prefill (extend) batch can be formed
  it runs alone and the running decodes wait that step. The unfinished chunked request goes
  first and takes ``min(remaining prompt, chunked_prefill_size)``; then waiting requests in
  FCFS order take what is left of the chunk budget (``max_num_batched_tokens`` here, set to
  ``chunked_prefill_size``); the first that does not fit whole is cut to the rest and becomes
  the next chunked request, so only one request is chunked at a time. ``max_prefill_tokens``
  (16384) is above every default chunk size and not modelled.
- **Admission by new-token ratio.** With ``clip(x) = min(x, 4096)``, a waiting request is
  admitted only if ``prompt_left + clip(max_new - generated) < rem_total`` where ``rem_total =
  free tokens - ratio * sum_running clip(max_new - generated) - sum_admitted_this_round
  (prompt_left + clip(max_new))``: new requests reserve their whole (clipped) output, running
  ones a decaying share of theirs. The ratio starts at 0.7, falls by ``(0.7 - 0.098) / 600``
  after every decode step without a retraction down to 0.098, and is reset to 0.7 when the
  engine goes idle (``--schedule-conservativeness c`` starts it at ``min(0.7 c, 1)``, floor
  and decay scaled alike: ``new_token_ratios``). ``max_new`` is the request's output length
  (``max_tokens``, EOS ignored).
- **A full batch is not retried** (``scheduler.py`` ``get_new_batch_prefill``,
  ``running_batch.batch_is_full``): an admission that fails for want of tokens
  (``AddReqResult.NO_TOKEN``) or of running slots (``max_running_requests``) marks the batch
  full, and no prefill is formed (bar the chunked request's next chunk) until the running batch
  shrinks: ``update_running_batch`` filters finished requests (the step after they finish, which
  still decodes) or retracts. So the decaying ratio admits the queue head only when that retry
  comes, not at the decode step where the head would first pass.
- **Decode.** Every running request decodes one token; KV is paged per token (page size 1).
- **Retraction** (``schedule_batch.py`` ``retract_decode``, ``scheduler.py``
  ``update_running_batch``) when a decode step lacks slots (``check_decode_mem``: free plus
  evictable radix tokens below one per request): running requests retract fewest-generated
  first (ties: longest prompt, then the latest admitted) until the free tokens cover
  ``RETRACT_DECODE_STEPS`` (20, ``global_config.retract_decode_steps``) decode steps of those
  left, at least one and never the last one; each frees its KV (its prompt stays in the radix
  tree, unlocked) and joins the *tail* of the queue, to re-prefill prompt + generated tokens
  past its cache hit later. The ratio is then re-estimated as ``min(1, (sum generated + 20 n) /
  (sum max_new + 1))`` over the ``n`` requests left, and decays from there. A last request that
  still lacks a slot (SGLang aborts it) is retracted too and waits for room.
- **Radix cache** (``memory/radixcache.py``, on by default; ``--no-enable-prefix-caching`` is
  SGLang's ``--disable-radix-cache``): on admission the head's prefix hit (whole hash entries,
  up to its prompt less one token) is locked and counted in ``cached_tokens``; the admission
  test charges the tokens left to compute, the clipped output and the hit's evictable tokens
  that locking takes (free and evictable tokens both count as free); the entries a round's
  chunks compute are inserted after the round's admissions, so requests admitted together do
  not share a new prefix; a finished request inserts its sequence (its output entries where
  the hashes cover them, as session traces' do) and its path is accessed.

The overlap scheduler's effect on step time is in the step model (``plan/served.py``
``with_overlap_schedule``: the host work hides behind the GPU's). Its admission lag is built and
off (``OVERLAP_ADMISSION_LAG``): ``event_loop_overlap`` forms batch k + 1 while batch k runs on
the GPU (``recv_requests`` and ``get_next_batch_to_run`` come before the previous batch's
``process_batch_result``), so a request that reaches the scheduler while batch k runs joins
batch k + 2, not k + 1; with the engine idle the loop takes it at once. On, a round admits only
the requests queued when the last step was formed (``seen_waiting``), FCFS only. Measured on
every SGLang run, it does not improve the latency rows (docs/validation.md, ``sgl20``). Not
emulated: its one-step lag in the token stream (it moves no gap: batch k's tokens go out when
batch k ends either way), ``--enable-mixed-chunk``, and token-granular hits (hashes
are per entry). ``--scheduling-policy lpm`` sorts the queue as SGLang's ``lpm`` does before
each round (``sglang_lpm.py``); SGLang 0.5.4's default, ``fcfs``, is ours. The ratio is kept as
``(base, decode steps since base)`` so that a closed-form stretch of ``k`` decode steps and
``k`` exact steps reach the same value bit for bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.schedulers import IntArray, Scheduler, StepDecision, Swapped
from inferplan.engine.sglang_lpm import LPM_MAX_WAITING, lpm_order
from inferplan.memory.radixcache import RadixCache

if TYPE_CHECKING:
    from inferplan.engine.policies import WaitingQueue
    from inferplan.engine.replica import SchedulerConfig
    from inferplan.engine.running import RunningSet
    from inferplan.memory.blockpool import BlockPool
    from inferplan.metrics.records import RequestRecords

CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.py CLIP_MAX_NEW_TOKENS
# SGLang 0.5.4 ``global_config.py``: default_init_new_token_ratio 0.7,
# default_min_new_token_ratio_factor 0.14, default_new_token_ratio_decay_steps 600; its
# scheduler scales the first by ``--schedule-conservativeness`` (``new_token_ratios``).
BASE_INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600


def new_token_ratios(conservativeness: float) -> tuple[float, float, float]:
    """(init, floor, decay per decode step) of the ratio (``scheduler.py`` ``__init__``:
    ``init = min(0.7 * conservativeness, 1)``, ``floor = min(init * 0.14, 1)``, ``decay =
    (init - floor) / 600``)."""
    init = min(BASE_INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    floor = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
    return init, floor, (init - floor) / NEW_TOKEN_RATIO_DECAY_STEPS


# The default ``--schedule-conservativeness 1``.
INIT_NEW_TOKEN_RATIO, MIN_NEW_TOKEN_RATIO, NEW_TOKEN_RATIO_DECAY = new_token_ratios(1.0)
RETRACT_DECODE_STEPS = 20  # global_config.py retract_decode_steps (SGLang 0.5.4)
# The overlap scheduler's admission lag (module docstring): off, as measured against the
# published SGLang rows (docs/validation.md ``sgl20``: in-sample latency median 17.5 -> 17.7 %).
OVERLAP_ADMISSION_LAG = False


class SglangScheduler(Scheduler):
    """SGLang 0.5.4's scheduler (see the module docstring)."""

    vector_step = False  # prefill and decode never share a step
    pops_last_admitted = False  # retraction picks its own victims

    # Per-instance state with immutable class defaults (each instance's first assignment makes
    # its own copy, as PrefillFirstScheduler.decode_phase): the ratio is ``ratio_base`` decayed
    # over ``ratio_steps`` decode steps without retraction; whether the queue was empty at the
    # last step (the engine goes idle after it); whether this step retracted.
    ratio_base = INIT_NEW_TOKEN_RATIO
    ratio_steps = 0
    queue_was_empty = True
    retracted = False
    # SGLang's ``running_batch.batch_is_full``: set when an admission fails for want of tokens
    # or running slots; no prefill is tried again (bar the chunked request's) until the running
    # batch shrinks (a finish or a retraction), as ``update_running_batch`` sees it; and the
    # batch size that step ran with (its finishes shrink the batch the next step sees).
    batch_is_full = False
    batch_size_seen = 0
    scheduled = False  # ``schedule`` ran since the last ``note_steps`` (else: a stretch)
    # Queue entries present when the last step was formed and not admitted by it: with
    # ``OVERLAP_ADMISSION_LAG``, what the next round may admit while the engine is busy (later
    # arrivals are at the queue's tail, which only arrivals and retractions push to).
    seen_waiting = 0

    # The parameters spelled out: mypyc's compiled ``super().__init__(*args)`` misreads them.
    def __init__(
        self,
        cfg: SchedulerConfig,
        running: RunningSet,
        waiting: WaitingQueue,
        swapped: Swapped,
        pool: BlockPool,
        records: RequestRecords,
        prompt_tokens: IntArray,
    ) -> None:
        super().__init__(cfg, running, waiting, swapped, pool, records, prompt_tokens)
        self.ratio_init, self.ratio_floor, self.ratio_decay = new_token_ratios(
            self.cfg.schedule_conservativeness
        )
        self.ratio_base = self.ratio_init

    def ratio_after(self, steps: int | np.ndarray) -> float | np.ndarray:
        """The new-token ratio after ``steps`` more decode steps without a retraction (one
        formula for exact steps and stretches, so both reach the same float)."""
        decayed = self.ratio_base - (self.ratio_steps + steps) * self.ratio_decay
        return np.maximum(decayed, self.ratio_floor)

    # ---- the verb -----------------------------------------------------------------------------

    def schedule(self, now: float) -> StepDecision:
        run = self.running
        self.scheduled = True
        if not len(run) and self.queue_was_empty:  # idle since the last step: reset
            self.ratio_base, self.ratio_steps = self.ratio_init, 0
        self.queue_was_empty = not len(self.waiting)
        self.retracted = False
        if not len(run):  # an empty batch is never full (SGLang: after an idle iteration)
            self.batch_is_full = False
        if not self.batch_is_full or self._has_chunk():
            prefill = self._prefill_step(now)
            if prefill is not None:
                self.batch_size_seen = len(run) - self._finishing(prefill.sched)
                return prefill
        if len(run) < self.batch_size_seen:  # ``update_running_batch``: finished rows left
            self.batch_is_full = False
        decision = self._decode_step()
        self.batch_size_seen = len(run)
        return decision

    def _has_chunk(self) -> bool:
        """The chunked request is still prefilling (a full batch does not stop it)."""
        run = self.running
        decoding = (run.num_tokens - run.num_computed == 1) & (run.num_generated > 0)
        return not bool(decoding.all())

    def _finishing(self, sched: np.ndarray) -> int:
        """Rows that finish in this prefill step (one output token): SGLang filters them
        before the batch joins the running one."""
        run = self.running
        done = (run.num_computed + sched == run.num_tokens) & (run.num_generated + 1 >= run.target)
        return int(np.count_nonzero(done & (sched > 0)))

    def note_steps(self, num_steps: int, *, prefill_only: bool = False) -> None:
        if not self.scheduled:
            # A closed-form stretch: it runs only while the head cannot join and the batch
            # did not shrink before it (``head_can_join``), so its first step's admission
            # attempt failed and the batch is full from there on (no finish or retraction
            # inside a stretch unlatches it). Nothing is left to scan.
            self.batch_is_full = self.batch_is_full or bool(len(self.waiting))
            self.batch_size_seen = len(self.running)  # its steps ran with this batch
        self.scheduled = False
        self.queue_was_empty = not len(self.waiting)
        self.seen_waiting = len(self.waiting)
        if not prefill_only and not self.retracted:
            self.ratio_steps += num_steps
        self.retracted = False

    # ---- prefill ------------------------------------------------------------------------------

    def _sort_waiting(self) -> None:
        """``--scheduling-policy lpm`` (SGLang's ``lpm``, ``sglang_lpm.py``): sort the queue
        for this round; without a radix cache SGLang runs ``fcfs``."""
        waiting, cache = self.waiting, self.pool.cache
        if waiting.policy != "lpm" or cache is None or not 1 < len(waiting) <= LPM_MAX_WAITING:
            return
        entry_tokens = cache.entry_kv_blocks * self.pool.block_size
        ids = waiting.in_order()
        hits, chains = [], []
        for rid in ids:
            tokens = waiting.tokens[rid]
            hits.append(self.prefix_hit(rid, tokens)[0])
            hashed = int(self._hashed_tokens(np.array([rid]))[0])
            entries = min(hashed, tokens - 1) // entry_tokens
            chains.append(cache.hashes[rid][: max(entries, 0)])
        waiting.reorder(lpm_order(ids, hits, chains, entry_tokens))

    def _prefill_step(self, now: float) -> StepDecision | None:
        """The chunked request's next chunk and the admissions behind it, or None."""
        self._sort_waiting()
        run, budget = self.running, self.cfg.max_num_batched_tokens
        sched = np.zeros(len(run), dtype=np.int64)
        decoding = (run.num_tokens - run.num_computed == 1) & (run.num_generated > 0)
        pending = np.flatnonzero(~decoding)
        for row in pending:  # at most one: the chunked request
            sched[row] = min(int(run.num_tokens[row] - run.num_computed[row]), budget)
            budget -= int(sched[row])
        if len(pending):
            new_blocks = self.pool.blocks_for(run.num_computed + sched) - run.held_blocks
            grow = np.maximum(new_blocks, 0)
            self.pool.free -= int(grow.sum())
            run.held_blocks = run.held_blocks + grow
        admitted = [int(t) for t in sched]
        self.admit_waiting(budget, admitted, now)
        if not any(admitted):
            return None
        decision = np.array(admitted, dtype=np.int64)
        if self.pool.cache is not None:
            self._insert_chunks(decision)
        return StepDecision(decision, prefill_only=True)

    def _insert_chunks(self, sched: np.ndarray) -> None:
        """Insert the prompt entries this round's chunks compute into the radix tree, after
        every admission of the round (SGLang matches all of them before any inserts, so two
        requests admitted together do not share a new prefix); duplicates are freed."""
        cache, run = self.pool.cache, self.running
        assert isinstance(cache, RadixCache)
        entry_tokens = cache.entry_kv_blocks * self.pool.block_size
        hashed = self._hashed_tokens(run.ids)
        for row in np.flatnonzero((sched > 0) & (run.num_computed < hashed)):
            end = min(int(run.num_computed[row] + sched[row]), int(hashed[row]))
            self.pool.free += cache.insert(int(run.ids[row]), end // entry_tokens)

    def _hashed_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Tokens the hashes cover: the prompt, and the output too where they go on past it
        (session traces: a retracted request's re-prefill inserts its generated entries)."""
        cache = self.pool.cache
        assert cache is not None
        hashed = self.prompt_tokens[ids]
        return hashed + self.target_tokens[ids] if cache.covers_output else hashed

    def free_tokens(self, free_blocks: int | np.ndarray) -> int | np.ndarray:
        """Tokens ``free_blocks`` pool blocks hold (SGLang counts tokens; its page is 1 token
        by default; a block of a pool with sliding-window groups costs more than one)."""
        return free_blocks // self.pool.blocks_for_one(self.pool.block_size) * self.pool.block_size

    def _rem_total(self, free: int, generated: np.ndarray, steps: int = 0) -> int:
        """The largest token count strictly below ``rem_total`` for the running requests with
        ``generated`` tokens, ``free`` pool blocks free and the ratio ``steps`` decode steps
        on: a need ``x`` is admitted iff ``x <= _rem_total(...)`` (``x < rem_total``)."""
        left = np.minimum(np.maximum(self.running.target - generated, 0), CLIP_MAX_NEW_TOKENS)
        rem = float(self.free_tokens(free)) - float(self.ratio_after(steps)) * float(left.sum())
        return math.ceil(rem) - 1

    def available_blocks(self, *, after_decode_step: bool = False) -> int:
        """Free tokens less the running requests' ratio-weighted reservation (in tokens, as
        the admission test reads it)."""
        run = self.running
        if not after_decode_step:
            return self._rem_total(self.pool.free, run.num_generated)
        free = self.pool.free - int(self.pool.crossing_cost(run.num_computed).sum())
        return self._rem_total(free, run.num_generated + 1, 1)

    def _need(self) -> tuple[int, int, int]:
        """The queue head's tokens, its radix-cache hit, and the tokens it takes from
        ``rem_total``: those left to compute, its clipped output, and the evictable tokens of
        its hit that locking it removes (``add_one_req`` tests after ``_lock_node``)."""
        rid, tokens = self.waiting.peek()
        hit, shared_blocks = self.prefix_hit(rid, tokens)
        generated = int(tokens - self.prompt_tokens[rid])
        output = min(int(self.target_tokens[rid]) - generated, CLIP_MAX_NEW_TOKENS)
        block = self.pool.block_size
        lock = (hit // block - shared_blocks) * block if hit else 0
        return tokens, hit, tokens - hit + output + lock

    def head_chunk(self, budget: int, available: int) -> int | None:
        """SGLang's ``add_one_req``: the head's remaining prompt past its hit, its clipped
        output and its hit's lock must be below ``rem_total``; its first chunk is what the
        budget leaves."""
        tokens, hit, need = self._need()
        if need > available or budget <= 0:
            return None
        return min(tokens - hit, budget)

    def admit_waiting(self, budget: int, sched: list[int], now: float) -> None:
        """FCFS admissions while the chunk budget lasts; each admitted request reserves its
        whole prompt and clipped output for the rest of the round; a cut request ends it."""
        run = self.running
        base = self.available_blocks()  # the running requests' reservation, before any joins
        reserved, received = 0, self.received()
        while len(self.waiting) and budget > 0:
            if received is not None:  # the overlap lag: only what the scheduler had received
                if received <= 0:
                    break
                received -= 1
            if len(run) >= self.cfg.max_num_seqs:
                self.batch_is_full = True  # no running slot left
                break
            chunk = self.head_chunk(budget, base - reserved)
            if chunk is None:
                self.batch_is_full = True  # ``AddReqResult.NO_TOKEN``
                break
            tokens, hit, need = self._need()
            rid = self.waiting.pop()
            reserved += need
            held = self.pool.blocks_for_one(hit + chunk)
            if self.pool.cache is not None:
                self._lock_hit(rid, tokens, hit)
            self.pool.free -= held - self.pool.blocks_for_one(hit)
            if math.isnan(self.records.first_scheduled_s[rid]):
                self.records.first_scheduled_s[rid] = now
            generated = int(tokens - self.prompt_tokens[rid])
            run.append(rid, hit, tokens, generated, int(self.target_tokens[rid]), held, now)
            sched.append(chunk)
            budget -= chunk
            if hit + chunk < tokens:
                break  # the chunked request: one at a time

    def received(self) -> int | None:
        """How many queue entries this round may admit under the overlap scheduler's lag
        (``OVERLAP_ADMISSION_LAG``): those queued when the last step was formed, while a batch
        runs; None (every entry) with the lag off, the engine idle (SGLang's loop takes an
        arrival at once) or a policy other than FCFS (a sorted queue has no arrival tail).
        A stretch needs no test of its own: it runs only while the queue head cannot join,
        and the steps it stops before are the ones where the head could."""
        if not OVERLAP_ADMISSION_LAG or not len(self.running) or self.waiting.policy != "fcfs":
            return None
        return min(self.seen_waiting, len(self.waiting))

    def _lock_hit(self, rid: int, tokens: int, hit: int) -> None:
        """Lock the admitted request's radix hit (``inc_lock_ref``) and count it."""
        cache = self.pool.cache
        assert cache is not None
        entries = hit // (cache.entry_kv_blocks * self.pool.block_size)
        self.pool.free -= cache.acquire(rid, entries)
        self.records.cached_tokens[rid] += hit  # type: ignore[index]
        self.records.prefix_queried_tokens[rid] += tokens  # type: ignore[index]
        cache.cached_tokens += hit
        cache.queried_tokens += tokens

    def head_can_join(self) -> bool:
        """Whether the next step must be taken exactly: the queue head passes admission now
        (the stretch runs only while it does not, and stops where it would), or the batch
        shrank since the last step (a finish) while the batch is full or a request waits. That
        step's ``update_running_batch`` unlatches the batch even where its own admission just
        failed and latched it, so the step after it retries admission with the ratio one
        decay further on, which a stretch (latched from its first step) would skip."""
        shrank = len(self.running) < self.batch_size_seen
        if shrank and (self.batch_is_full or len(self.waiting)):
            return True
        if self.batch_is_full:
            return False
        if not len(self.waiting) or len(self.running) >= self.cfg.max_num_seqs:
            return False
        self._sort_waiting()  # the order the next round would see (sorting again is a no-op)
        return self.head_chunk(self.cfg.max_num_batched_tokens, self.available_blocks()) is not None

    # ---- decode and retraction -----------------------------------------------------------------

    def _decode_step(self) -> StepDecision:
        run, pool = self.running, self.pool
        need = pool.crossing_cost(run.num_computed)
        if int(need.sum()) > pool.free:  # ``check_decode_mem`` fails (evictable counted free)
            self._retract()
            need = pool.crossing_cost(run.num_computed)
            while int(need.sum()) > pool.free and len(run):  # one request alone lacks a slot:
                self.preempt(self.victim_row())  # SGLang aborts it; here it waits for room
                need = pool.crossing_cost(run.num_computed)
        pool.free -= int(need.sum())
        run.held_blocks = run.held_blocks + need
        return StepDecision(np.ones(len(run), dtype=np.int64), preempted=self.retracted)

    def _retract(self) -> None:
        """SGLang's ``retract_decode``: retract victims (``victim_row``) until the free tokens
        cover ``RETRACT_DECODE_STEPS`` decode steps of those left, at least one, never the last
        one; then re-estimate the ratio over those left."""
        run = self.running
        while len(run) > 1:
            self.preempt(self.victim_row())
            if self.free_tokens(self.pool.free) >= RETRACT_DECODE_STEPS * len(run):
                break
        self.retracted = True
        self.batch_is_full = False  # the batch shrank
        self._reestimate_ratio()

    def victim_row(self) -> int:
        """Fewest generated tokens first, ties to the longest prompt (``retract_decode``), then
        the latest admitted."""
        run = self.running
        prompt = self.prompt_tokens[run.ids]
        order = np.lexsort((-np.arange(len(run)), -prompt, run.num_generated))
        return int(order[0])

    def preempt(self, row: int) -> float:
        """Retract: free the request's KV and append it to the queue's tail; its prefix stays
        in the radix tree, unlocked and not accessed (``release_kv_cache(is_insert=False)``)."""
        rid, computed, tokens, held = self.running.pop(row)
        cache = self.pool.cache
        self.pool.free += held - (0 if cache is None else cache.release(rid))
        self.records.num_preemptions[rid] += 1
        self.records.recomputed_tokens[rid] += computed
        self.waiting.push(rid, num_tokens=tokens)
        return 0.0

    def release_blocks(self, rid: int, held: int, computed: int | None = None) -> None:
        """A finished request frees its KV; with the radix tree it inserts its sequence there
        (``cache_finished_req``: the full entries of its ``computed`` tokens where the hashes
        cover the output, as session traces' do; its prompt's otherwise), so its path is
        accessed now."""
        cache = self.pool.cache
        if cache is None:
            self.pool.free += held
            return
        assert isinstance(cache, RadixCache)
        if cache.covers_output and computed is not None:
            entry_tokens = cache.entry_kv_blocks * self.pool.block_size
            self.pool.free += cache.insert(rid, computed // entry_tokens)
        self.pool.free += held - cache.release(rid, touch=True)

    def _reestimate_ratio(self) -> None:
        run = self.running
        total_max_new = float(run.target.sum())
        estimate = (float(run.num_generated.sum()) + RETRACT_DECODE_STEPS * len(run)) / (
            total_max_new + 1
        )
        self.ratio_base, self.ratio_steps = min(1.0, estimate), 0
