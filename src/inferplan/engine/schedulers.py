"""Schedulers: which tokens of which requests the next step runs, one class per engine.

Each scheduler has one verb, ``schedule(now) -> StepDecision``: it reads the replica's running
set, waiting queue, swapped-out requests and block pool (the same objects the replica holds, as
vLLM v1's scheduler holds its KV manager), allocates the step's blocks, preempts and admits, and
returns the tokens per running row as plain data. It owns no clock and times nothing; the
replica runs the decision. Admission is defined once (``head_chunk``): the waiting pass uses it,
and so does the closed-form stretch (``head_can_join``) when it asks whether the queue head
could join the batch before the next event.

- ``Scheduler``: vLLM v1 (``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``). Running
  pass in admission order: each request gets ``num_tokens - num_computed`` tokens capped by the
  budget and the blocks ``blocks_for(computed + new) - held``; when the pool cannot supply them,
  victims are preempted (the last admitted; under the priority policy the largest (priority,
  arrival)) until the request fits or is itself the victim. Recompute frees the victim's blocks
  and puts it at the head of the queue; swap (vLLM V0; v1 never swaps) moves its KV to host.
  Waiting pass only if nothing was preempted: swapped-out requests first, then the queue head
  while the budget lasts, ``max_num_seqs`` allows and its first chunk's blocks fit; a head that
  does not fit blocks those behind it.
- ``StaticScheduler``: request-level batching: a new batch only when nothing runs, each request
  reserving its whole prompt + output, so nothing is preempted.
- ``TrtllmScheduler``: TensorRT-LLM's GUARANTEED_NO_EVICT (``capacityScheduler.cpp``,
  ``microBatchScheduler.cpp``): admits in arrival order only if the whole prompt + output fits
  beside what every running request still needs; no chunked context, so a prompt is scheduled
  whole or waits for a step with enough budget. Contexts and generations share a step.
  ``TrtllmChunkedScheduler``: the same admission with chunked context (first come first served
  chunks of the leftover budget), TensorRT-LLM's ``enable_chunked_prefill``.
- ``PrefillFirstScheduler``: vLLM V0 without chunked prefill: when the queue head's whole prompt
  fits the budget, ``max_num_seqs`` and the pool, a step runs only new prompts (as many as fit)
  and running requests wait; otherwise every running request decodes. With
  ``num_scheduler_steps`` k > 1 (V0 multi-step) a decode batch runs k steps before the
  scheduler looks at the queue again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import numpy.typing as npt

from inferplan.engine.own_admission import admit_own, own_head_fit
from inferplan.engine.plain_admission import admit_plainly, plain_head_chunk
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.running import RunningSet
from inferplan.memory.blockpool import BlockPool
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.metrics.records import RequestRecords

if TYPE_CHECKING:
    from inferplan.engine.admission import Admission
    from inferplan.engine.offload import KvOffload
    from inferplan.engine.replica import SchedulerConfig
    from inferplan.engine.speculation import SpecDecode
    from inferplan.perf.protocol import StepTimeModel

IntArray = npt.NDArray[np.int64]
Swapped = deque[tuple[int, int, int, int]]  # id, computed, tokens, held blocks
# The queue head's admission test's answer (``Scheduler._head_fit``): rid, tokens, budget,
# available blocks, the prefix cache's cached-free blocks, chunk, prefix hit.
HeadFit = tuple[int, int, int, int, int, int, int]
# The waiting pass's and admission test's forms (``Scheduler.admission_path``): in block counts
# (``plain_admission.py``), with own blocks (``own_admission.py``), or the general one.
PLAIN, OWN, GENERAL = "plain", "own", "general"


@dataclass
class StepDecision:
    """What the scheduler decided for one step."""

    sched: IntArray  # tokens per running row, in running order
    # Seconds added to the step's time: the host-link time of swaps out and in, or (SGLang under
    # DP attention, which never swaps) the ranks' lockstep (``sglang_ranks.py``).
    swap_s: float = 0.0
    preempted: bool = False
    prefill_only: bool = False  # a prefill-first step of new prompts
    # The requests it preempted (in the order they were popped) and those it added to the
    # running set (swapped back in, then taken off the queue, in running order), as vLLM v1's
    # ``SchedulerOutput`` names its preempted and newly scheduled requests. Filled by vLLM v1's
    # running and waiting passes (``Scheduler``), which the other engines' schedulers share
    # except where they override them.
    preempted_ids: list[int] = field(default_factory=list)
    admitted_ids: list[int] = field(default_factory=list)


class Scheduler:
    """vLLM v1's scheduler (see the module docstring); the other engines override its hooks."""

    # The engine's traits, ClassVars: the simulator and its setup read them from the class
    # (``simsetup.check_config``, ``Simulation._chains_apply``).
    whole_prompts: ClassVar[bool] = False  # prompts are never chunked (whole or not at all)
    reserves_whole_request: ClassVar[bool] = False  # admission reserves prompt + output
    can_preempt: ClassVar[bool] = True
    counts_idle_slots: ClassVar[bool] = False  # static batching: finished members' slots idle
    vector_step: ClassVar[bool] = True  # the all-decode-plus-admissions step in vector form
    admission: Admission | None = None  # ``--admission`` policies (``engine/admission.py``)
    pops_last_admitted: ClassVar[bool] = True  # preemption victims: the last admitted
    offload: KvOffload | None = None  # KV tiers (``engine/offload.py``), set by the replica
    step_model: StepTimeModel | None = None  # the replica's step-time model, set by the replica
    # Speculative decoding (``engine/speculation.py``), set by the replica: a decoding row is
    # scheduled for its ``k`` drafts too, and a running row's blocks cover ``k`` lookahead slots.
    spec: SpecDecode | None = None
    # ``head_can_join``'s yes (``_head_fit``'s answer), or None; ``step_fit``: set to it by the
    # vector step (``implicit_step.py``) where no step ran since, for its waiting pass to take
    # instead of asking again (``admit_waiting``), and None everywhere else.
    joins: HeadFit | None = None
    step_fit: HeadFit | None = None
    # ``PLAIN``, ``OWN`` or ``GENERAL``, decided once where the replica's pool cache, KV tiers
    # and admission policy are set (``settle_admission_path``, by ``Simulation``'s
    # constructor); None: asked at every admission (a scheduler built or changed by hand).
    admission_path: str | None = None

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
        self.cfg, self.running, self.waiting, self.swapped = cfg, running, waiting, swapped
        self.pool, self.records, self.prompt_tokens = pool, records, prompt_tokens
        self.target_tokens = records.requested_tokens

    # ---- the verb -----------------------------------------------------------------------------

    def schedule(self, now: float) -> StepDecision:
        if self.admission is not None:
            decision = self.admission.schedule_running(self, now)
        else:
            decision = self.schedule_running()
        if self.pool.cache is not None and self.pool.cache.caches_chunks:
            self._cache_chunks(decision.sched)
        if not decision.preempted:
            decision = waiting_pass(self, decision, now, admit=True)  # ``schedule_waiting``
        return decision

    # ---- prefix caching (``memory/prefixcache.py``) ------------------------------------------

    def prefix_hit(self, rid: int, tokens: int) -> tuple[int, int]:
        """Tokens of ``rid``'s first ``tokens`` the prefix cache holds (full entries of its
        prompt, leaving at least one token to compute), and the blocks of them that running
        requests map (admission does not allocate those)."""
        if self.offload is None and self.pool.cache is None:
            return 0, 0  # no cache: nothing to look up
        if self.offload is not None:
            stored = self.offload.hit_tokens(rid, tokens)
            if stored is not None:  # its KV comes back from a tier (none of it shared)
                return stored, 0
        cache = self.pool.cache
        hits, shared, max_entries = self.hbm_hit_entries(rid, tokens)
        if cache is None or max_entries <= 0:
            return 0, 0
        if self.offload is not None:  # entries after those may come back from a tier
            hits += self.offload.prefix_tier_entries(cache.hashes[rid][hits:max_entries])
        return hits * cache.entry_kv_blocks * self.pool.block_size, shared

    def hbm_hit_entries(self, rid: int, tokens: int) -> tuple[int, int, int]:
        """(cache entries of ``rid``'s first ``tokens`` held in HBM, blocks of them running
        requests map, entries it could hit at most): full entries of what its hashes cover
        (the prompt, and the output in session traces), leaving one token to compute."""
        cache = self.pool.cache
        if cache is None:
            return 0, 0, 0
        entry_tokens = cache.entry_kv_blocks * self.pool.block_size
        hashed = self.prompt_tokens.item(rid)  # + the output where hashes cover it (sessions)
        if cache.covers_output:
            hashed += self.target_tokens.item(rid)
        max_entries = min(hashed, tokens - 1) // entry_tokens
        if max_entries <= 0:
            return 0, 0, max_entries
        hits, shared = cache.lookup(rid, max_entries)
        return hits, shared, max_entries

    def _cache_chunks(self, sched: IntArray) -> None:
        """Cache the full prompt entries the running rows' chunks of this step complete."""
        cache, run = self.pool.cache, self.running
        assert cache is not None
        entry_tokens = cache.entry_kv_blocks * self.pool.block_size
        prompt = self.prompt_tokens[run.ids]
        for row in np.flatnonzero((sched > 0) & (run.num_computed < prompt)):
            end = min(int(run.num_computed[row] + sched[row]), int(prompt[row]))
            cache.register(int(run.ids[row]), end // entry_tokens)
        cache.evict_to(self.pool.free)  # windowed parts just cached may not fit the free pool

    def release_blocks(self, rid: int, held: int, computed: int | None = None) -> None:
        """A request gives back the ``held`` blocks its sequence maps; where the prefix
        cache's hashes cover generated tokens, the full entries of its ``computed`` tokens are
        cached first (``memory/prefixcache.py``)."""
        cache = self.pool.cache
        if cache is None:
            self.pool.free_blocks += held  # nothing to evict
            return
        pool = self.pool
        if type(cache) is OwnBlocks and computed is not None:  # register and release at once
            cache.release_computed(rid, computed // (cache.entry_kv_blocks * pool.block_size))
            shared = 0  # nothing is shared: every block goes back to the pool
        else:
            if cache.covers_output and computed is not None:
                cache.register(rid, computed // (cache.entry_kv_blocks * pool.block_size))
            shared = cache.release(rid)
        # ``BlockPool.free``'s setter, inline: evicts what no longer fits
        pool.free_blocks = free = pool.free_blocks + held - shared
        if cache.lru_blocks > free:
            cache.evict_to(free)
        if cache.covers_output and cache.window_entries is not None:
            cache.evict_to(self.pool.free_blocks)  # windowed parts just cached may not fit

    # ---- admission, defined once ------------------------------------------------------------

    def available_blocks(self, *, after_decode_step: bool = False) -> int:
        """Blocks an admission may take now, or after the running rows decode one step (with
        admission policies, those no running request has reserved; with KV tiers, not the
        blocks whose copy out is still in flight: admission waits for them)."""
        unsafe = (
            0 if self.offload is None else self.pool.free - self.offload.safe_free(self.pool.free)
        )
        if self.admission is not None:  # the blocks no running request has reserved
            reserved_free = self.admission.available_blocks(
                self.running, after_decode_step=after_decode_step
            )
            return reserved_free - unsafe
        free = self.pool.free_blocks - unsafe
        if after_decode_step:
            run = self.running
            if run.rows.block:  # implicit rows: from the block-crossing histogram
                return free - run.rows.crossings(1)
            return free - self.pool.crossing_blocks(run.num_computed)
        return free

    def admission_blocks(self, rid: int, tokens: int, chunk_end: int) -> int:
        """Blocks admitting the request maps: those of its first ``chunk_end`` tokens."""
        return self.pool.blocks_for_one(chunk_end)

    def head_chunk(self, budget: int, available: int) -> int | None:
        """The queue head's first chunk if it can be admitted with ``budget`` tokens and
        ``available`` blocks, else None: THE admission test (``_head_fit``)."""
        fit = self._head_fit(budget, available)
        return None if fit is None else fit[5]

    def _head_fit(self, budget: int, available: int) -> HeadFit | None:
        """``head_chunk``'s test with what it learnt: (rid, tokens, budget, available, the
        prefix cache's cached-free blocks, chunk, prefix hit), or None where the head waits.
        Without a step, only an eviction, a release or an admission changes a hit, and each
        changes the cached-free blocks (``admit_waiting`` compares them)."""
        rid, tokens = self.waiting.peek()
        if self.offload is not None and self.offload.holds_back(rid):
            return None  # backpressure: the KV link is saturated
        hit, shared = self.prefix_hit(rid, tokens)
        if self.whole_prompts and tokens - hit > budget:
            return None  # no chunked prefill: the prompt waits for a step with the budget
        chunk = min(tokens - hit, budget)
        blocks = self.admission_blocks(rid, tokens, hit + chunk) - shared
        if self.admission is not None:
            if not self.admission.admits(self.running, rid, tokens, blocks, available):
                return None
        elif blocks > available:
            return None
        cache = self.pool.cache
        return rid, tokens, budget, available, 0 if cache is None else cache.lru_blocks, chunk, hit

    def swapped_head_fits(self, budget: int, available: int) -> bool:
        """The first swapped-out request can come back with ``budget`` tokens and
        ``available`` blocks (its KV returns whole, plus what its next chunk needs)."""
        _, computed, tokens, held = self.swapped[0]
        chunk = min(tokens - computed, budget)
        return max(self.pool.blocks_for_one(computed + chunk), held) <= available

    def head_can_join(self) -> bool:
        """Whether a swapped-out request or the queue head could join the current all-decode
        batch at its next step (the closed-form stretch runs only while neither can)."""
        n, queued = self.running._size, self.waiting.tokens  # the sizes, without ``__len__``
        if not (self.swapped or queued) or n >= self.cfg.max_num_seqs:
            return False
        leftover = self.cfg.max_num_batched_tokens - n
        if leftover <= 0:
            return False
        available = self.available_blocks(after_decode_step=True)
        if self.swapped and self.swapped_head_fits(leftover, available):
            return True
        if not queued:
            return False
        path = self.admission_path or self._admission_path()
        if path == PLAIN:  # ``_head_fit`` in block counts (no prefix hit)
            rid, tokens = self.waiting.peek()
            chunk = plain_head_chunk(tokens, leftover, self.pool.block_size, available)
            self.joins = None if chunk is None else (rid, tokens, leftover, available, 0, chunk, 0)
            return chunk is not None
        if path == OWN:  # ``_head_fit`` with own blocks, in one frame
            self.joins = own_head_fit(self, leftover, available)
            return self.joins is not None
        self.joins = self._head_fit(leftover, available)  # kept for the step that follows
        return self.joins is not None

    def steps_to_scheduling_point(self) -> int | None:
        """Decode steps before the scheduler next looks at the queue (None: every step)."""
        return None

    def note_steps(self, num_steps: int, *, prefill_only: bool = False) -> None:
        """The replica ran ``num_steps`` steps of a decision (multi-step bookkeeping)."""

    def admit_waiting(self, budget: int, sched: list[int], now: float) -> None:
        """The waiting pass over the queue: admit its head while the budget lasts,
        ``max_num_seqs`` allows and ``head_chunk`` says it fits; append each chunk to
        ``sched``. ``step_fit`` (``head_can_join``'s answer where no step ran since) is taken
        for the head if the head, budget, blocks and cache are still its own."""
        fit, self.step_fit = self.step_fit, None
        self.waiting.age(now)
        path = self.admission_path or self._admission_path()
        if path == PLAIN:  # ``_head_fit`` and ``admit_popped`` in block counts
            admit_plainly(self, budget, sched, now, fit)
            return
        if path == OWN:  # ``_head_fit`` and ``admit_popped`` with own blocks, in one frame
            admit_own(self, budget, sched, now, fit)
            return
        admit_general(self, budget, sched, now, fit)

    def settle_admission_path(self) -> None:
        """Decide ``admission_path`` once: call where the pool's cache, the KV tiers and the
        admission policy are set for good (``Simulation``'s constructor)."""
        self.admission_path = None
        self.admission_path = self._admission_path()

    def _admission_path(self) -> str:
        """The form of the waiting pass and the admission test (``admission_path``)."""
        if self._admits_plainly():
            return PLAIN
        if self._admits_own():
            return OWN
        return GENERAL

    def _admits_own(self) -> bool:
        """vLLM v1's scheduler itself on a uniform pool whose prefix cache is own blocks
        (``memory/ownblocks.py``), without KV tiers or admission policies: ``_head_fit`` and
        ``admit_popped`` reduce to its run's counts (``own_admission.py``)."""
        return (
            type(self) is Scheduler
            and type(self.pool.cache) is OwnBlocks
            and self.offload is None
            and self.admission is None
            and self.pool.is_uniform
        )

    def _admits_plainly(self) -> bool:
        """vLLM v1's scheduler itself on a uniform pool without a prefix cache, KV tiers or
        admission policies: ``_head_fit`` and ``admit_popped`` reduce to block counts."""
        return (
            type(self) is Scheduler
            and self.pool.cache is None
            and self.offload is None
            and self.admission is None
            and self.pool.is_uniform
        )

    def admit_popped(
        self, rid: int, tokens: int, chunk: int, now: float, hit: int | None = None
    ) -> bool:
        """Give the request just taken off the queue its blocks and a running row
        (``waiting_pass.admit_popped``); False where it waits for KV coming back from a tier."""
        return admit_popped(self, rid, tokens, chunk, now, hit)

    # ---- running pass -----------------------------------------------------------------------

    def schedule_running(self) -> StepDecision:
        run, pool, spec = self.running, self.pool, self.spec
        need = run.num_tokens - run.num_computed if spec is None else spec.need(run)
        cum = np.cumsum(need)
        sched = np.minimum(need, np.maximum(self.cfg.max_num_batched_tokens - (cum - need), 0))
        slots = run.num_computed + sched if spec is None else spec.slots(run.num_computed, sched)
        new_blocks = np.maximum(pool.blocks_for(slots) - run.held_blocks, 0)
        if int(new_blocks.sum()) <= pool.free_blocks:
            pool.free = pool.free_blocks - int(new_blocks.sum())
            run.held_blocks = run.held_blocks + new_blocks
            return StepDecision(sched)
        return self._schedule_running_with_preemption()

    def _schedule_running_with_preemption(self) -> StepDecision:
        """The running pass when the pool runs short: rows are granted in order; at the first
        row that does not fit, victims are preempted until it fits or is itself the victim
        (vLLM v1), then the pass goes on from the next row. A victim granted earlier in this
        pass gives its tokens back to the budget (vLLM's priority policy can pick one)."""
        run, pool = self.running, self.pool
        budget, start, swap_s = self.cfg.max_num_batched_tokens, 0, 0.0
        granted_tokens = np.zeros(len(run), dtype=np.int64)
        victims: list[int] = []
        spec = self.spec
        while start < len(run) and budget > 0:
            computed = run.num_computed[start:]
            need = run.num_tokens[start:] - computed if spec is None else spec.need(run)[start:]
            cum = np.cumsum(need)
            sched = np.minimum(need, np.maximum(budget - (cum - need), 0))
            slots = computed + sched if spec is None else spec.slots(computed, sched)
            new_blocks = np.maximum(pool.blocks_for(slots) - run.held_blocks[start:], 0)
            failing = np.flatnonzero(np.cumsum(new_blocks) > pool.free_blocks)
            granted = len(new_blocks) if len(failing) == 0 else int(failing[0])
            pool.free = pool.free_blocks - int(new_blocks[:granted].sum())
            run.held_blocks[start : start + granted] += new_blocks[:granted]
            granted_tokens[start : start + granted] = sched[:granted]
            budget -= int(sched[:granted].sum())
            if granted == len(new_blocks):
                break
            row, needed, tokens = start + granted, int(new_blocks[granted]), int(sched[granted])
            while needed > pool.free_blocks:
                victim = self.victim_row()
                victims.append(int(run.ids[victim]))
                swap_s += self.preempt(victim)
                budget += int(granted_tokens[victim])
                granted_tokens = np.delete(granted_tokens, victim)
                if victim == row:  # the request itself: the running pass ends here
                    granted_tokens[row:] = 0
                    return StepDecision(
                        granted_tokens, swap_s=swap_s, preempted=True, preempted_ids=victims
                    )
                row -= victim < row
            pool.free = pool.free_blocks - needed
            run.held_blocks[row] += needed
            granted_tokens[row] = tokens
            budget -= tokens
            start = row + 1
        return StepDecision(granted_tokens, swap_s=swap_s, preempted=True, preempted_ids=victims)

    def victim_row(self) -> int:
        """The running row to preempt: the last admitted (vLLM v1), or under the priority
        policy the largest (priority, arrival) (``Scheduler.schedule``, priority branch)."""
        run, keys = self.running, self.waiting.keys
        if self.waiting.policy != "priority" or keys is None:
            return len(run) - 1
        ranks = keys[run.ids]
        worst = np.flatnonzero(ranks == ranks.max())  # ties: the latest arrival (largest id)
        return int(worst[np.argmax(run.ids[worst])])

    def preempt(self, row: int) -> float:
        """Preempt the running request at ``row``; the seconds its swap-out takes."""
        rid, computed, tokens, held = self.running.pop(row)
        self.release_blocks(rid, held, computed)
        self.records.num_preemptions[rid] += 1
        if self.cfg.preemption_mode == "swap":
            self.swapped.appendleft((rid, computed, tokens, held))
            moved = held * self.cfg.kv_block_bytes
            self.records.swapped_bytes[rid] += int(moved)
            return moved / self.cfg.host_link_bytes_s
        offload = self.offload
        if offload is None or not offload.store(rid, computed, self.pool.blocks_for_one(computed)):
            self.records.recomputed_tokens[rid] += computed
        self.waiting.push_front(rid, num_tokens=tokens)
        return 0.0

    # ---- waiting pass -----------------------------------------------------------------------

    def schedule_waiting(self, decision: StepDecision, now: float, *, admit: bool) -> StepDecision:
        """Swapped-out requests first, then (if ``admit``) the queue (``waiting_pass.py``)."""
        return waiting_pass(self, decision, now, admit=admit)


SCHEDULERS: dict[str, type[Scheduler]] = {
    "continuous": Scheduler,
}

# The other engines' schedulers live in their own files and subclass ``Scheduler`` above:
# those that reserve whole requests (static, TensorRT-LLM) in ``reserving.py``, vLLM V0's in
# ``prefill_first.py``, SGLang's in ``sglang.py``; the package's ``__init__`` imports this module
# first, so these imports never run half-initialised.
from inferplan.engine.prefill_first import PrefillFirstScheduler  # noqa: E402
from inferplan.engine.reserving import (  # noqa: E402
    StaticScheduler,
    TrtllmChunkedScheduler,
    TrtllmScheduler,
)
from inferplan.engine.sglang import SglangScheduler  # noqa: E402

# The general waiting pass (``waiting_pass.py``) builds ``StepDecision``s: imported once it is
# defined.
from inferplan.engine.waiting_pass import admit_general, admit_popped, waiting_pass  # noqa: E402

SCHEDULERS["static"] = StaticScheduler
SCHEDULERS["trtllm"] = TrtllmScheduler
SCHEDULERS["trtllm_chunked"] = TrtllmChunkedScheduler
SCHEDULERS["prefill_first"] = PrefillFirstScheduler
SCHEDULERS["sglang"] = SglangScheduler
