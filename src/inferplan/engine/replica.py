"""One replica: a scheduler, its paged KV pool, and the steps it runs.

The replica composes a scheduler (``schedulers.py``: vLLM v1, static batching, TensorRT-LLM,
prefill-first), the block pool (``memory/blockpool.py``) and a step-time model. Each step the
scheduler decides which tokens of which running requests run (allocating their blocks,
preempting and admitting); the replica times the batch with the step-time model, advances
``now`` and emits tokens: every request whose computed tokens reach its token count samples one
(a final prefill chunk emits the first token).

Between events a pure-decode batch is constant, so ``advance_decode`` (``stretch.py``, the
replica's ``stretches`` component) runs a whole stretch of steps in closed form (DESIGN §4):
it ends at the first finishing sequence, the step that starts at or after the next arrival,
the step whose block allocation would fail, or where the step-time line stops holding; it runs
only while the scheduler says the queue head cannot join (``Scheduler.head_can_join``, the
same admission test as the waiting pass). ``exact`` mode runs the same steps one at a time.
The common step (every running row decodes, the queue head is admitted) has a vector fast path
outside exact mode, so exact mode checks it against the general one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from inferplan.engine.chunk_step import chunk_step
from inferplan.engine.implicit_step import implicit_decode_and_admit_step
from inferplan.engine.offload import KvOffload
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.preempt_step import preempt_step
from inferplan.engine.running import RunningSet
from inferplan.engine.schedulers import SCHEDULERS, StepDecision
from inferplan.engine.speculation import SpecDecode
from inferplan.engine.stepshape import step_shape as _step_shape
from inferplan.engine.stretch import DecodeStretches
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool, KvGroup
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.memory.prefixcache import PrefixCache, regroup_hashes, windowed_prefix_cache
from inferplan.memory.radixcache import RadixCache
from inferplan.memory.tiers import OffloadConfig
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.metrics.steptrace import StepTrace
from inferplan.perf.batch import StepBatch
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.step_seconds import StepSeconds
from inferplan.workload.prefixes import own_block_hashes
from inferplan.workload.request import Workload

# Reductions of the per-step paths as the ufuncs' own: ``ndarray.sum()`` and friends go through
# a Python wrapper each call, which costs more than the work on a batch of a few hundred rows.
_sum, _all, _any = np.add.reduce, np.logical_and.reduce, np.logical_or.reduce
_COMPLETED = int(RequestStatus.COMPLETED)
FEW_ROWS = 8  # finishing rows taken one at a time in scalars (more: as columns)


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    num_blocks: int
    preemption_mode: str = "recompute"  # or "swap"
    scheduler: str = "continuous"  # or "static", "trtllm", "prefill_first"
    kv_block_bytes: float = 0.0  # one block, every layer, per device (for swap traffic)
    host_link_bytes_s: float = 64e9
    num_scheduler_steps: int = 1  # prefill-first: decode steps per scheduling decision
    # Layer kinds sharing the pool (full attention, sliding windows); ``num_blocks`` and
    # ``kv_block_bytes`` are in pool blocks (``memory/blockpool.py``).
    kv_groups: tuple[KvGroup, ...] = FULL_ATTENTION
    enable_prefix_caching: bool = False  # vLLM v1's automatic prefix caching
    kv_tiers: OffloadConfig | None = None  # KV tiers below HBM (``engine/offload.py``)
    schedule_conservativeness: float = 1.0  # SGLang: scales its new-token ratio (``sglang.py``)


def prefix_cache_for(cfg: SchedulerConfig, workload: Workload) -> PrefixCache | None:
    """A replica's prefix cache (``memory/prefixcache.py``), or None where it does not apply:
    caching off, a scheduler other than vLLM v1's or SGLang's (a radix cache, full-attention
    pools only), no prompt-block hashes in the workload, or a pool without full-attention
    layers. Hash blocks that are not whole KV blocks are regrouped
    into entries of ``lcm(hash block, KV block)`` tokens."""
    hashes, entry_tokens = workload.prefix_hashes, workload.prefix_block_tokens
    radix = cfg.scheduler == "sglang"  # SGLang's radix cache (``memory/radixcache.py``)
    if not cfg.enable_prefix_caching or cfg.scheduler not in ("continuous", "sglang"):
        return None
    if hashes is None and workload.own_blocks and entry_tokens:
        if not radix and cfg.kv_groups == FULL_ATTENTION:  # counted, not hashed
            unit = math.lcm(entry_tokens, cfg.block_size)
            tokens = workload.input_tokens + workload.output_tokens
            return OwnBlocks(tokens // unit, unit // cfg.block_size)
        hashes = own_block_hashes(workload)  # the caches that need ids get them
    if hashes is None or not entry_tokens:
        return None
    hashes, entry_tokens = regroup_hashes(hashes, entry_tokens, cfg.block_size)
    kv_blocks = entry_tokens // cfg.block_size
    if radix:
        cache: PrefixCache | None = (
            RadixCache(hashes, kv_blocks) if cfg.kv_groups == FULL_ATTENTION else None
        )
    elif cfg.kv_groups == FULL_ATTENTION:
        cache = PrefixCache(hashes, kv_blocks)
    else:
        cache = windowed_prefix_cache(hashes, entry_tokens, cfg.block_size, cfg.kv_groups)
    if cache is not None:
        cache.covers_output = workload.prefix_hashes_cover_output
    return cache


class Replica:
    """A replica's scheduler state and KV pool; its verbs run steps and advance time."""

    def __init__(
        self,
        index: int,
        cfg: SchedulerConfig,
        model: StepTimeModel,
        records: RequestRecords,
        prompt_tokens: np.ndarray,
        waiting: WaitingQueue,
        itl: ItlHistogram,
        trace: StepTrace,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.index, self.cfg, self.model = index, cfg, model
        self.step_s = StepSeconds(model)  # the model's step seconds, plans cached per shape
        self.records, self.prompt_tokens = records, prompt_tokens
        self.waiting, self.itl, self.trace = waiting, itl, trace
        self.target_tokens = records.requested_tokens
        # Uniform pools keep decode rows implicit (``engine/implicit.py``).
        uniform_block = cfg.block_size if cfg.kv_groups == FULL_ATTENTION else 0
        self.running = RunningSet(block_size=uniform_block, max_itl_s=records.max_itl_s)
        self.swapped: deque[tuple[int, int, int, int]] = deque()  # id, computed, tokens, blocks
        self.pool = BlockPool(cfg.num_blocks, cfg.block_size, cfg.kv_groups)
        self.pool.cache = prefix_cache
        self.now = 0.0
        self.num_steps = 0
        # Static batching: the batch's size, and slot-steps its finished members left idle.
        self.batch_slots = 0
        self.idle_slot_steps = 0
        self.on_finish: list[int] = []  # ids finished in the last step (for the client)
        self.vector_steps = True  # False: every exact step takes the general path (reference)
        # Set by the simulation: fast mode without tiers, speculation or queue timers, whose
        # advances skip the checks that cannot apply (``Simulation._advance_plain``).
        self.is_plain = False
        # Whether every running row is a pure decode (None: unknown since the last exact step).
        # Stretches and preemption steps keep it true; only an exact step can change it.
        self._decoding: bool | None = None
        # (steps, clock, rows) after ``chunk_step`` left a prefilling last row: its decoders'
        # scalars and token time still hold where nothing ran since (``engine/chunk_step.py``).
        self.chunk_mark: tuple[int, float, int] | None = None
        # (steps, clock, arrival bound, free blocks, queue, rows) where the last doomed-head pass
        # ended (``engine/thrash.py``): asked again there, it takes no cycle.
        self.doomed_mark: tuple[int, float, float, int, int, int] | None = None
        self.scheduler = SCHEDULERS[cfg.scheduler](
            cfg, self.running, waiting, self.swapped, self.pool, records, prompt_tokens
        )
        self.scheduler.step_model = model  # SGLang's DP-attention ranks time their own batches
        self.stretches = DecodeStretches(self)  # reads the scheduler's class
        self.offload = None if cfg.kv_tiers is None else KvOffload(cfg.kv_tiers, self)
        self.scheduler.offload = self.offload
        # Speculative decoding (``engine/speculation.py``): set by the simulation; its steps
        # are timed and emitted there, one at a time.
        self.spec: SpecDecode | None = None
        # Copies of evicted entries: full-attention pools only (a windowed hit needs its
        # windowed parts in HBM, which are not copied).
        cache = prefix_cache
        if self.offload is not None and cache is not None and cache.window_entries is None:
            self.offload.attach_cache(cache, cfg.block_size)

    # ---- state ----------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        # ``len(running) or len(waiting)``, without their ``__len__`` calls (asked per event)
        if self.running._size or self.waiting.tokens or self.swapped:
            return True
        return self.offload is not None and bool(self.offload.loading)

    @property
    def outstanding(self) -> int:
        loading = 0 if self.offload is None else len(self.offload.loading)
        return len(self.running) + len(self.waiting) + len(self.swapped) + loading

    @property
    def queued(self) -> int:
        """Requests here that do not run: queued, swapped out, or waiting for a KV reload."""
        return self.outstanding - len(self.running)

    @property
    def used_blocks(self) -> int:
        return self.pool.used

    def check_invariants(self) -> None:
        """Blocks are conserved and every running request holds what its KV needs."""
        held = int(self.running.held_blocks.sum()) - self.pool.shared
        if self.offload is not None:
            held += self.offload.loading_blocks()
            self.offload.check(self.pool.free, self.now)
        assert held + self.pool.free == self.cfg.num_blocks, "KV blocks not conserved"
        cache = self.pool.cache
        if cache is not None:
            cache.check()
            assert 0 <= cache.lru_blocks <= self.pool.free, "cached-free blocks exceed free"
            mapping = set(self.running.ids.tolist())
            if self.offload is not None:
                mapping |= {x.request_id for x in self.offload.loading}
            assert set(cache.held) <= mapping, "a freed request maps KV"
        need = self.pool.blocks_for(self.running.num_computed)
        assert np.all(self.running.held_blocks >= need), "a request lacks blocks for its KV"
        assert len(self.running) <= self.cfg.max_num_seqs, "max_num_seqs exceeded"

    def is_decoding(self) -> bool:
        """Every running request is a pure decode (cached between exact steps)."""
        if self._decoding is None:
            self._decoding = self.running.all_decoding
        return self._decoding

    def count_idle_slots(self, steps: int) -> None:
        """Static batching: slot-steps that finished members of the batch leave idle."""
        if self.scheduler.counts_idle_slots:
            self.batch_slots = max(self.batch_slots, len(self.running))
            self.idle_slot_steps += (self.batch_slots - len(self.running)) * steps

    def add_request(self, request_id: int) -> None:
        self.waiting.push(request_id, num_tokens=int(self.prompt_tokens.item(request_id)))

    # ---- one step ---------------------------------------------------------------------------

    def step(self) -> None:
        """Schedule and run one engine step; advance ``now`` by its time."""
        if self.offload is not None:
            self.offload.begin_step(self)
        if self._decode_and_admit_step():
            return
        if self.offload is None and (chunk_step(self) or preempt_step(self)):
            return
        self._run(self.scheduler.schedule(self.now))
        self._decoding = None

    def _decode_and_admit_step(self) -> bool:
        """The common step in vector form: every running row decodes one token (the budget and
        the pool allow it all) and the waiting pass admits what it can behind them. Returns
        False, having done nothing, for any other step (and in exact mode)."""
        cfg, run = self.cfg, self.running
        n = len(run)
        if not self.vector_steps or self.swapped or not self.scheduler.vector_step:
            return False
        if self.offload is not None:  # tiers: the general path only
            return False
        if n > cfg.max_num_batched_tokens or not self.is_decoding():
            return False
        if run.rows.block and self.scheduler.admission is None and run.rows.holds_ceil():
            return implicit_decode_and_admit_step(self)
        computed, pool = run.num_computed, self.pool
        if pool.is_uniform:  # a row takes a block where its next token starts one
            crossing = computed % cfg.block_size == 0
            new_blocks = int(np.count_nonzero(crossing))
        else:
            crossing = pool.crossing_cost(computed)
            new_blocks = int(_sum(crossing))
        if new_blocks > pool.free_blocks:
            return False
        admission = self.scheduler.admission  # reservations: the unreserved blocks must last too
        grants = admission is None or admission.grants_decode(run, crossing.astype(np.int64))
        if not grants:
            return False
        pool.free = pool.free_blocks - new_blocks
        np.add(run.held_blocks, crossing, out=run.held_blocks)
        decode_context = int(_sum(computed)) + n
        chunks: list[int] = []
        self.scheduler.admit_waiting(cfg.max_num_batched_tokens - n, chunks, self.now)
        self._decoding = None
        if n == 0 and not chunks:
            return True
        hits = run.num_computed[n:].tolist()
        duration = self.step_s.seconds(*_step_shape(n, decode_context, chunks, hits))
        self.trace.record(self.now, pool.num_blocks - pool.free_blocks)
        self.now += duration
        self.num_steps += 1
        computed, tokens = run.num_computed, run.num_tokens  # fresh views: admission may grow
        computed[:n] += 1
        # The admitted rows, as Python ints (usually one row: cheaper than array reductions).
        ends = [o + q for o, q in zip(hits, chunks, strict=True)]
        computed[n:] = ends
        if ends == tokens[n:].tolist():  # whole prompts: all emit
            if not any(run.num_generated[n:].tolist()):  # and all are first tokens
                self._emit_decodes_and_firsts(n, duration)
                self._decoding = True  # every row has sampled and needs one token
            else:
                self._emit(slice(0, len(run)), duration)
        else:
            self._emit((computed == tokens).nonzero()[0], duration)
        return True

    def _emit_decodes_and_firsts(self, n: int, duration: float) -> None:
        """``_emit`` of every row when rows ``[0, n)`` emitted before and the rest emit their
        first token, in slices; the usual case (all emitted at this step's start) shortest."""
        run, rec, now = self.running, self.records, self.now
        ids, last_token = run.ids, run.last_token_s
        if n:
            last = last_token[:n]
            same = last == now - duration
            if _all(same):  # _record_gaps with every gap one step long
                decoding = ids[:n]
                rec.max_itl_s[decoding] = np.fmax(rec.max_itl_s[decoding], duration)
                self.itl.add(duration, float(n))
            else:
                self._record_gaps(ids[:n], np.where(same, duration, now - last), same, duration)
        rec.first_token_s[ids[n:]] = now
        run.sample()  # num_tokens and num_generated += 1
        last_token.fill(now)
        done = run.num_generated >= run.target
        if _any(done):
            self.finish(done.nonzero()[0])

    def _run(self, plan: StepDecision) -> None:
        """Execute a scheduled step: time it, advance ``now``, emit tokens."""
        offload = self.offload
        if not plan.sched.any():
            self.now += plan.swap_s
            if offload is not None:  # victims' blocks handed out must be written first
                self.now += offload.write_wait_s(self.now, self.pool.free)
            return
        self.scheduler.note_steps(1, prefill_only=plan.prefill_only)
        self.count_idle_slots(1)
        if self.spec is None:
            duration = self.step_s(self._batch(plan.sched)) + plan.swap_s
        else:
            duration = self.spec.step_seconds(self.running, plan.sched) + plan.swap_s
        if offload is not None:
            duration = offload.step_s(duration, self.pool.free)
        self.trace.record(self.now, self.used_blocks)
        self.now += duration
        self.num_steps += 1
        self._finish_step(plan.sched, duration)

    def _batch(self, sched: np.ndarray) -> StepBatch:
        computed = self.running.num_computed
        decode = (sched == 1) & (computed > 0)
        prefill = (sched > 0) & ~decode
        q, o = sched[prefill], computed[prefill]
        num_decode = int(decode.sum())
        return StepBatch(
            prefill_tokens=int(q.sum()),
            prefill_attention_pairs=float((q * o + q * (q + 1) / 2).sum()),
            prefill_context_tokens=int(o.sum()),
            num_prefill_seqs=len(q),
            num_decode_seqs=num_decode,
            decode_context_tokens=int(computed[decode].sum()) + num_decode,
        )

    def _finish_step(self, sched: np.ndarray, duration: float) -> None:
        if self.spec is not None:  # drafts verified: each row emits what it accepted
            self.spec.finish_step(self, sched, duration)
            return
        run = self.running
        np.add(run.num_computed, sched, out=run.num_computed)
        emits = (sched > 0) & (run.num_computed == run.num_tokens)
        self._emit(emits.nonzero()[0], duration)

    def _emit(self, rows: np.ndarray | slice, duration: float) -> None:
        """Rows (indices, or a slice from row 0) sample one token at ``now`` (the end of a step
        lasting ``duration``)."""
        run, rec, now = self.running, self.records, self.now
        ids = run.ids[rows]
        if len(ids) == 0:
            return
        generated = run.num_generated[rows]
        first = generated == 0
        has_first = bool(first.any())
        if not has_first or not first.all():
            later = slice(None) if not has_first else ~first  # usually every row
            last = run.last_token_s[rows][later]
            # A token after one emitted at this step's start is one step apart.
            same = last == now - duration
            self._record_gaps(ids[later], np.where(same, duration, now - last), same, duration)
        if has_first:
            rec.first_token_s[ids[first]] = now
        generated += 1
        run.num_generated[rows] = generated
        run.num_tokens[rows] += 1
        run.last_token_s[rows] = now
        done = generated >= run.target[rows]
        if done.any():
            self.finish(done.nonzero()[0] if isinstance(rows, slice) else rows[done])

    def _record_gaps(
        self, ids: np.ndarray, gaps: np.ndarray, same: np.ndarray, duration: float
    ) -> None:
        rec = self.records
        rec.max_itl_s[ids] = np.fmax(rec.max_itl_s[ids], gaps)
        num_same = int(same.sum())
        if num_same:
            self.itl.add(duration, float(num_same))
        if num_same < len(same):
            self.itl.add_many(gaps[~same])

    def _complete(self, row: int, columns: list[int]) -> None:
        """Record row ``row``'s request as completed and free its blocks (``columns``: its int
        columns as stored); the row stays in place."""
        rid, computed, _, generated, _, held = self.running.rows.row_values(row, columns)
        rec = self.records
        rec.finish_s[rid] = self.now
        rec.output_tokens[rid] = generated
        rec.status[rid] = _COMPLETED
        if self.pool.cache is None:
            self.pool.free_blocks += held  # nothing to evict
        else:
            self.scheduler.release_blocks(rid, held, computed)
        self.on_finish.append(rid)

    def finish(self, rows: np.ndarray | list[int]) -> None:
        """Complete the requests at these ascending rows (they reached their targets)."""
        run, rec = self.running, self.records
        if len(rows) == 1:  # the usual finish
            row = int(rows[0])
            columns = run.stored_row(row)  # the row's columns read once
            self._complete(row, columns)
            run.drop_row(row, columns)
            if not run._size:
                self.batch_slots = 0
            return
        if len(rows) <= FEW_ROWS:  # a few (admitted together), in scalars
            rows = [int(row) for row in rows]
            stored = [run.stored_row(row) for row in rows]  # each row's columns read once
            for row, columns in zip(rows, stored, strict=True):
                self._complete(row, columns)
            for row, columns in zip(rows[::-1], stored[::-1], strict=True):
                run.drop_row(row, columns)  # from the last: the earlier rows keep their index
            if len(run) == 0:
                self.batch_slots = 0
            return
        rows = np.asarray(rows, dtype=np.int64)
        ids = run.ids[rows]
        rec.finish_s[ids] = self.now
        rec.output_tokens[ids] = run.num_generated[rows]
        rec.status[ids] = int(RequestStatus.COMPLETED)
        if self.pool.cache is None:
            self.pool.free = self.pool.free_blocks + int(_sum(run.held_blocks[rows]))
        else:
            held_blocks, done_rows = run.held_blocks[rows].tolist(), run.num_computed[rows].tolist()
            for rid, held, done in zip(ids.tolist(), held_blocks, done_rows, strict=True):
                self.scheduler.release_blocks(rid, held, done)
        run.drop(rows)
        self.on_finish.extend(ids.tolist())
        if len(run) == 0:
            self.batch_slots = 0
