"""One replica: the vLLM v1 scheduler, its paged KV pool, and the steps it runs.

A step follows vLLM v1's ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``):

1. **Running pass**, in admission order: each request is given ``num_tokens - num_computed``
   tokens (1 for a decode, the rest of its prompt for a prefill) capped by the remaining token
   budget, and the KV blocks ``ceil((computed + new) / block) - held``. When the pool cannot
   supply them, the last-admitted request is preempted (recompute: its blocks are freed, it
   restarts from scratch at the head of the waiting queue; or swap: its KV goes to host memory
   over the host link) until the request fits or is itself the victim.
2. **Waiting pass**, only if nothing was preempted: swapped-out requests first, then the queue
   head, while the budget lasts, ``max_num_seqs`` allows and its first chunk's blocks fit; a head
   that does not fit blocks those behind it (vLLM's head-of-line rule).
3. The step's time comes from the step-time model; at its end every request whose computed
   tokens reach its token count samples one token (a final prefill chunk emits the first token).

``--scheduler static`` admits a new batch only when the running set is empty and reserves each
request's whole prompt + output, so nothing is preempted: request-level batching.

``--scheduler prefill-first`` is vLLM V0's default scheduler without chunked prefill (the
engine the vLLM 0.6.0 measurements ran; SGLang's default also runs prefill batches instead of
decode ones): whenever the queue head's whole prompt fits the token budget, ``max_num_seqs`` and
the pool, a step runs only new prompts (as many as fit, in order) and every running request
waits; otherwise every running request decodes. With ``num_scheduler_steps`` k > 1 (V0's
multi-step scheduling) a decode batch, once scheduled, runs k steps before the scheduler looks
at the queue again, so a new prompt waits for the end of the current block.

``--engine trtllm`` emulates TensorRT-LLM's defaults (``capacityScheduler.cpp``,
``microBatchScheduler.cpp``): GUARANTEED_NO_EVICT admits a request in arrival order only if its
whole prompt + output fits beside what every running request still needs to finish (so it never
preempts), and without chunked context a prompt is scheduled whole or waits for a step with
enough token budget. Contexts and generations share a step (in-flight batching).

Between events a pure-decode batch is constant, so ``advance_decode`` (``stretch.py``, a base
of ``Replica``) runs a whole stretch of steps in closed form (DESIGN §4): it ends at the first
finishing sequence, the step that starts at or after the next arrival, the step whose block
allocation would fail, or where the step-time line stops holding. ``exact`` mode runs the same
steps one at a time. The common step (every running row decodes, the queue head is admitted)
has a vector fast path outside exact mode, so exact mode checks it against the general one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from inferplan.engine.policies import WaitingQueue
from inferplan.engine.running import RunningSet
from inferplan.engine.stretch import DecodeStretches
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool, KvGroup
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.metrics.steptrace import StepTrace
from inferplan.perf.batch import StepBatch
from inferplan.perf.protocol import StepTimeModel

# Schedulers that run a prompt whole or not at all (no chunked prefill).
WHOLE_PROMPT_SCHEDULERS = ("trtllm", "prefill_first")


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


@dataclass
class _Plan:
    """What the schedule phase decided for one step."""

    sched: np.ndarray  # tokens per running row
    swap_s: float = 0.0
    preempted: bool = False
    prefill_only: bool = False  # a prefill-first step of new prompts


class Replica(DecodeStretches):
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
    ) -> None:
        self.index, self.cfg, self.model = index, cfg, model
        self.records, self.prompt_tokens = records, prompt_tokens
        self.waiting, self.itl, self.trace = waiting, itl, trace
        self.target_tokens = records.requested_tokens
        self.running = RunningSet()
        self.swapped: deque[tuple[int, int, int, int]] = deque()  # id, computed, tokens, blocks
        self.pool = BlockPool(cfg.num_blocks, cfg.block_size, cfg.kv_groups)
        self.now = 0.0
        self.num_steps = 0
        # Static batching: the batch's size, and slot-steps its finished members left idle.
        self.batch_slots = 0
        self.idle_slot_steps = 0
        self.on_finish: list[int] = []  # ids finished in the last step (for the client)
        self._decoding = None
        self.vector_steps = True  # False: every exact step takes the general path (reference)
        # Prefill-first multi-step: decode steps since the scheduler last looked at the queue,
        # modulo num_scheduler_steps (0: this step is a scheduling point).
        self.decode_phase = 0

    # ---- state ----------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(len(self.running) or len(self.waiting) or self.swapped)

    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting) + len(self.swapped)

    @property
    def used_blocks(self) -> int:
        return self.pool.used

    def check_invariants(self) -> None:
        """Blocks are conserved and every running request holds what its KV needs."""
        held = int(self.running.held_blocks.sum()) + 0
        assert held + self.pool.free == self.cfg.num_blocks, "KV blocks not conserved"
        need = self.pool.blocks_for(self.running.num_computed)
        assert np.all(self.running.held_blocks >= need), "a request lacks blocks for its KV"
        assert len(self.running) <= self.cfg.max_num_seqs, "max_num_seqs exceeded"

    def add_request(self, request_id: int) -> None:
        self.waiting.push(request_id, num_tokens=int(self.prompt_tokens[request_id]))

    # ---- one step ---------------------------------------------------------------------------

    def step(self) -> None:
        """Schedule and run one engine step; advance ``now`` by its time."""
        if self._decode_and_admit_step():
            return
        plan = self._prefill_only() if self.cfg.scheduler == "prefill_first" else None
        if plan is None:
            plan = self._schedule_running()
            if not plan.preempted:
                plan = self._schedule_waiting(plan)
        self._run(plan)
        self._decoding = None

    def _prefill_only(self) -> _Plan | None:
        """A step of whole new prompts while running requests wait (prefill-first), or None
        when this step decodes: inside a multi-step block, or the queue head cannot be admitted
        now."""
        if self.swapped or (self.decode_phase and len(self.running)):
            return None  # an emptied batch ends its block early
        sched = [0] * len(self.running)
        self._admit_waiting(self.cfg.max_num_batched_tokens, sched)
        if not any(sched):
            return None
        return _Plan(np.array(sched, dtype=np.int64), prefill_only=True)

    def _decode_and_admit_step(self) -> bool:
        """The common step in vector form: every running row decodes one token (the budget and
        the pool allow it all) and the waiting pass admits what it can behind them. Returns
        False, having done nothing, for any other step (and in exact mode)."""
        cfg, run = self.cfg, self.running
        n = len(run)
        if not self.vector_steps or self.swapped or cfg.scheduler != "continuous":
            return False
        if n > cfg.max_num_batched_tokens or not self.is_decoding():
            return False
        computed = run.num_computed
        crossing = self.pool.crossing_cost(computed)
        new_blocks = int(crossing.sum())
        if new_blocks > self.pool.free:
            return False
        self.pool.free -= new_blocks
        run.held_blocks += crossing
        decode_context = int(computed.sum()) + n
        chunks: list[int] = []
        self._admit_waiting(cfg.max_num_batched_tokens - n, chunks)
        self._decoding = None
        if n == 0 and not chunks:
            return True
        batch = StepBatch(
            prefill_tokens=sum(chunks),
            prefill_attention_pairs=float(sum(q * (q + 1) / 2 for q in chunks)),
            num_prefill_seqs=len(chunks),
            num_decode_seqs=n,
            decode_context_tokens=decode_context,
        )
        duration = self.model.step_time(batch).total_s
        self.trace.record(self.now, self.used_blocks)
        self.now += duration
        self.num_steps += 1
        computed, tokens = run.num_computed, run.num_tokens  # fresh views: admission may grow
        computed[:n] += 1
        computed[n:] = chunks  # admitted rows start from nothing computed
        if all(q == tokens[n + j] for j, q in enumerate(chunks)):  # whole prompts: all emit
            if not run.num_generated[n:].any():  # and all are first tokens
                self._emit_decodes_and_firsts(n, duration)
                self._decoding = True  # every row has sampled and needs one token
            else:
                self._emit(slice(0, len(run)), duration)
        else:
            self._emit(np.flatnonzero(computed == tokens), duration)
        return True

    def _emit_decodes_and_firsts(self, n: int, duration: float) -> None:
        """``_emit`` of every row when rows ``[0, n)`` emitted before and the rest emit their
        first token, in slices; the usual case (all emitted at this step's start) shortest."""
        run, rec, now = self.running, self.records, self.now
        ids, last_token = run.ids, run.last_token_s
        if n:
            last = last_token[:n]
            same = last == now - duration
            if same.all():  # _record_gaps with every gap one step long
                rec.max_itl_s[ids[:n]] = np.fmax(rec.max_itl_s[ids[:n]], duration)
                self.itl.add(duration, float(n))
            else:
                self._record_gaps(ids[:n], np.where(same, duration, now - last), same, duration)
        rec.first_token_s[ids[n:]] = now
        generated, tokens = run.num_generated, run.num_tokens
        generated += 1
        tokens += 1
        last_token[:] = now
        done = generated >= run.target
        if done.any():
            self._finish(np.flatnonzero(done))

    def _run(self, plan: _Plan) -> None:
        """Execute a scheduled step: time it, advance ``now``, emit tokens."""
        if not np.any(plan.sched):
            self.now += plan.swap_s
            return
        if self.cfg.scheduler == "prefill_first":
            self.decode_phase = (
                0 if plan.prefill_only else (self.decode_phase + 1) % self.cfg.num_scheduler_steps
            )
        batch = self._batch(plan.sched)
        self._count_idle_slots(1)
        duration = self.model.step_time(batch).total_s + plan.swap_s
        self.trace.record(self.now, self.used_blocks)
        self.now += duration
        self.num_steps += 1
        self._finish_step(plan.sched, duration)

    def _blocks_for(self, tokens: np.ndarray) -> np.ndarray:
        return self.pool.blocks_for(tokens)

    def _schedule_running(self) -> _Plan:
        run = self.running
        need = run.num_tokens - run.num_computed
        budget = self.cfg.max_num_batched_tokens
        cum = np.cumsum(need)
        sched = np.minimum(need, np.maximum(budget - (cum - need), 0))
        new_blocks = np.maximum(self._blocks_for(run.num_computed + sched) - run.held_blocks, 0)
        if int(new_blocks.sum()) <= self.pool.free:
            self.pool.free -= int(new_blocks.sum())
            run.held_blocks = run.held_blocks + new_blocks
            return _Plan(sched)
        return self._schedule_running_with_preemption()

    def _schedule_running_with_preemption(self) -> _Plan:
        """The running pass when the pool runs short: rows are granted in order; at the first
        row that does not fit, victims are preempted until it fits or is itself the victim
        (vLLM v1), then the pass goes on from the next row. A victim granted earlier in this
        pass gives its tokens back to the budget (vLLM's priority policy can pick one)."""
        run, pool = self.running, self.pool
        budget, start, swap_s = self.cfg.max_num_batched_tokens, 0, 0.0
        granted_tokens = np.zeros(len(run), dtype=np.int64)
        while start < len(run) and budget > 0:
            need = run.num_tokens[start:] - run.num_computed[start:]
            cum = np.cumsum(need)
            sched = np.minimum(need, np.maximum(budget - (cum - need), 0))
            new_blocks = np.maximum(
                pool.blocks_for(run.num_computed[start:] + sched) - run.held_blocks[start:], 0
            )
            failing = np.flatnonzero(np.cumsum(new_blocks) > pool.free)
            granted = len(new_blocks) if len(failing) == 0 else int(failing[0])
            pool.free -= int(new_blocks[:granted].sum())
            run.held_blocks[start : start + granted] += new_blocks[:granted]
            granted_tokens[start : start + granted] = sched[:granted]
            budget -= int(sched[:granted].sum())
            if granted == len(new_blocks):
                break
            row, needed, tokens = start + granted, int(new_blocks[granted]), int(sched[granted])
            while needed > pool.free:
                victim = self._victim_row()
                swap_s += self._preempt(victim)
                budget += int(granted_tokens[victim])
                granted_tokens = np.delete(granted_tokens, victim)
                if victim == row:  # the request itself: the running pass ends here
                    granted_tokens[row:] = 0
                    return _Plan(granted_tokens, swap_s=swap_s, preempted=True)
                row -= victim < row
            pool.free -= needed
            run.held_blocks[row] += needed
            granted_tokens[row] = tokens
            budget -= tokens
            start = row + 1
        return _Plan(granted_tokens, swap_s=swap_s, preempted=True)

    def _victim_row(self) -> int:
        """The running row to preempt: the last admitted (vLLM v1), or under the priority
        policy the largest (priority, arrival) (``Scheduler.schedule``, priority branch)."""
        run, keys = self.running, self.waiting.keys
        if self.waiting.policy != "priority" or keys is None:
            return len(run) - 1
        ranks = keys[run.ids]
        worst = np.flatnonzero(ranks == ranks.max())  # ties: the latest arrival (largest id)
        return int(worst[np.argmax(run.ids[worst])])

    def _preempt(self, row: int) -> float:
        """Preempt the running request at ``row``; the seconds its swap-out takes."""
        rid, computed, tokens, held = self.running.pop(row)
        self.pool.free += held
        self.records.num_preemptions[rid] += 1
        if self.cfg.preemption_mode == "swap":
            self.swapped.appendleft((rid, computed, tokens, held))
            moved = held * self.cfg.kv_block_bytes
            self.records.swapped_bytes[rid] += int(moved)
            return moved / self.cfg.host_link_bytes_s
        self.records.recomputed_tokens[rid] += computed
        self.waiting.push_front(rid, num_tokens=tokens)
        return 0.0

    def _preempt_last(self) -> float:
        return self._preempt(len(self.running) - 1)

    def _schedule_waiting(self, plan: _Plan) -> _Plan:
        cfg, run = self.cfg, self.running
        budget = cfg.max_num_batched_tokens - int(plan.sched.sum())
        sched = list(plan.sched)
        swap_s = plan.swap_s
        while self.swapped and len(run) < cfg.max_num_seqs and budget > 0:
            rid, computed, tokens, held = self.swapped[0]
            n = min(tokens - computed, budget)
            blocks = max(self.pool.blocks_for_one(computed + n), held)
            if blocks > self.pool.free:
                break
            self.swapped.popleft()
            self.pool.free -= blocks
            run.append(
                rid,
                computed,
                tokens,
                self._generated(rid, tokens),
                self._target(rid),
                blocks,
                self.now,
            )
            sched.append(n)
            budget -= n
            swap_s += held * cfg.kv_block_bytes / cfg.host_link_bytes_s
            self.records.swapped_bytes[rid] += int(held * cfg.kv_block_bytes)
        if (cfg.scheduler == "static" and len(run)) or cfg.scheduler == "prefill_first":
            # Static batching admits between batches; prefill-first only in a step of its own.
            return _Plan(np.array(sched, dtype=np.int64), swap_s=swap_s)
        self._admit_waiting(budget, sched)
        return _Plan(np.array(sched, dtype=np.int64), swap_s=swap_s)

    def _admit_waiting(self, budget: int, sched: list[int]) -> None:
        """The waiting pass over the queue: admit its head while the budget lasts,
        ``max_num_seqs`` allows and the first chunk's blocks fit; append each chunk to ``sched``."""
        cfg, run = self.cfg, self.running
        whole_prompts = cfg.scheduler in WHOLE_PROMPT_SCHEDULERS
        while len(self.waiting) and len(run) < cfg.max_num_seqs and budget > 0:
            rid, tokens = self.waiting.peek()
            if whole_prompts and tokens > budget:
                break  # TensorRT-LLM without chunked context: the prompt waits for a step
            n = min(tokens, budget)
            blocks = self._admission_blocks(rid, tokens, n)
            if blocks > self.pool.free:
                break
            self.waiting.pop()
            held = self.pool.blocks_for_one(n)
            self.pool.free -= held
            if math.isnan(self.records.first_scheduled_s[rid]):
                self.records.first_scheduled_s[rid] = self.now
            run.append(
                rid, 0, tokens, self._generated(rid, tokens), self._target(rid), held, self.now
            )
            sched.append(n)
            budget -= n

    def _admission_blocks(self, rid: int, tokens: int, chunk: int) -> int:
        """Blocks admission needs: the first chunk's (vLLM), or the whole request's prompt +
        output on top of what the running requests still need to finish (static batching, and
        TensorRT-LLM's GUARANTEED_NO_EVICT capacity policy, which therefore never preempts)."""
        if self.cfg.scheduler in ("static", "trtllm"):
            total = int(self.prompt_tokens[rid] + self.target_tokens[rid])
            run = self.running
            ends = self.prompt_tokens[run.ids] + run.target
            reserved = int((self._blocks_for(ends) - run.held_blocks).sum())
            return self.pool.blocks_for_one(total) + reserved
        return self.pool.blocks_for_one(chunk)

    def _generated(self, rid: int, num_tokens: int) -> int:
        return int(num_tokens - self.prompt_tokens[rid])

    def _target(self, rid: int) -> int:
        return int(self.target_tokens[rid])

    def _batch(self, sched: np.ndarray) -> StepBatch:
        run = self.running
        active = sched > 0
        decode = active & (sched == 1) & (run.num_computed > 0)
        prefill = active & ~decode
        q, o = sched[prefill], run.num_computed[prefill]
        return StepBatch(
            prefill_tokens=int(q.sum()),
            prefill_attention_pairs=float((q * o + q * (q + 1) / 2).sum()),
            prefill_context_tokens=int(o.sum()),
            num_prefill_seqs=int(prefill.sum()),
            num_decode_seqs=int(decode.sum()),
            decode_context_tokens=int((run.num_computed[decode] + 1).sum()),
        )

    def _finish_step(self, sched: np.ndarray, duration: float) -> None:
        run = self.running
        run.num_computed = run.num_computed + sched
        emits = (sched > 0) & (run.num_computed == run.num_tokens)
        self._emit(np.flatnonzero(emits), duration)

    def _emit(self, rows: np.ndarray | slice, duration: float) -> None:
        """Rows (indices, or a slice from row 0) sample one token at ``now`` (the end of a step
        lasting ``duration``)."""
        run, rec, now = self.running, self.records, self.now
        ids = run.ids[rows]
        if len(ids) == 0:
            return
        first = run.num_generated[rows] == 0
        later = ~first
        if np.any(later):
            last = run.last_token_s[rows][later]
            # A token after one emitted at this step's start is one step apart.
            same = last == now - duration
            self._record_gaps(ids[later], np.where(same, duration, now - last), same, duration)
        rec.first_token_s[ids[first]] = now
        run.num_generated[rows] += 1
        run.num_tokens[rows] += 1
        run.last_token_s[rows] = now
        done = run.num_generated[rows] >= run.target[rows]
        if np.any(done):
            self._finish(np.flatnonzero(done) if isinstance(rows, slice) else rows[done])

    def _record_gaps(
        self, ids: np.ndarray, gaps: np.ndarray, same: np.ndarray, duration: float
    ) -> None:
        rec = self.records
        rec.max_itl_s[ids] = np.fmax(rec.max_itl_s[ids], gaps)
        if np.any(same):
            self.itl.add(duration, float(same.sum()))
        self.itl.add_many(gaps[~same])

    def _finish(self, rows: np.ndarray) -> None:
        run, rec = self.running, self.records
        ids = run.ids[rows]
        rec.finish_s[ids] = self.now
        rec.output_tokens[ids] = run.num_generated[rows]
        rec.status[ids] = int(RequestStatus.COMPLETED)
        self.pool.free += int(run.held_blocks[rows].sum())
        run.drop(rows)
        self.on_finish.extend(ids.tolist())
        if len(run) == 0:
            self.batch_slots = 0
