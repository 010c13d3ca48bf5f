"""SGLang with DP attention, scheduled per rank (``--engine sglang`` where the plan's attention
DP is above 1).

SGLang 0.5 runs one scheduler process per DP-attention rank (read in the 0.5.3, 0.5.4.post2
and 0.5.6.post2 wheels, ``srt/managers``):

- **Dispatch.** ``data_parallel_controller.py`` hands each request, in arrival order, to the
  next rank (``round_robin_scheduler``, the default ``--load-balance-method``); it stays on
  that rank, a retracted request too (it rejoins that rank's queue).
- **Each rank its own scheduler** (``scheduler.py``): its own KV pool (the replica's pool
  split evenly: each rank's GPUs hold their own ``max_total_num_tokens``), its own
  ``chunked_prefill_size // dp_size`` budget (``server_args.py`` ``_handle_data_parallelism``),
  its own ``max_running_requests``, new-token ratio (decayed by that rank's decode steps, reset
  when that rank goes idle), ``batch_is_full`` latch and retraction. Each rank decides prefill
  first on its own (``get_next_batch_to_run``): one rank may prefill while another decodes.
- **Lockstep.** The ranks' forwards are synchronised by the MoE (``scheduler_dp_attn_mixin.py``
  gathers every rank's token count; an idle rank runs an idle batch), so a step of the whole
  runs every rank's batch at once: here one step of the replica whose rows are every rank's
  scheduled rows, timed on their union (the step model splits attention and dense layers
  evenly over the ranks, routed experts see every rank's tokens).

Everything per rank is the pooled ``SglangScheduler``'s rule (``engine/sglang.py``) on that
rank's rows, queue and pool. Not emulated here: the radix cache (SGLang keeps one tree per
rank; ``replica.prefix_cache_for`` gives this scheduler none, so prefix hits are not counted
under DP attention, which ``simulate`` notes on stderr where the workload shares prefixes:
``session.sglang_radix_note``), and the attention's imbalance between ranks within a step
(the union's even split times it). The replica runs these steps one at a time
(``session.py`` sets exact mode: the closed-form stretches and vector steps assume one pooled
scheduler), so fast mode is exact mode here.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from inferplan.engine.schedulers import SCHEDULERS, StepDecision
from inferplan.engine.sglang import CLIP_MAX_NEW_TOKENS, RETRACT_DECODE_STEPS, SglangScheduler
from inferplan.errors import InferplanError
from inferplan.perf.batch import StepBatch

if TYPE_CHECKING:
    from inferplan.engine.policies import WaitingQueue
    from inferplan.engine.replica import SchedulerConfig
    from inferplan.engine.running import RunningSet
    from inferplan.engine.schedulers import Swapped
    from inferplan.memory.blockpool import BlockPool
    from inferplan.metrics.records import RequestRecords

RANKED_PREFIX = "sglang_dp"


class SglangRankedScheduler(SglangScheduler):
    """SGLang's scheduler, one per DP-attention rank, stepping together (module docstring)."""

    num_ranks = 1  # set per subclass by ``ranked_scheduler`` (a constant of the class)

    def __init__(
        self,
        cfg: SchedulerConfig,
        running: RunningSet,
        waiting: WaitingQueue,
        swapped: Swapped,
        pool: BlockPool,
        records: RequestRecords,
        prompt_tokens: np.ndarray,
    ) -> None:
        super().__init__(cfg, running, waiting, swapped, pool, records, prompt_tokens)
        ranks = self.num_ranks
        # Each rank: its blocks, chunk budget and running slots (the pooled config's share).
        self.rank_blocks = cfg.num_blocks // ranks
        self.rank_budget = cfg.max_num_batched_tokens // ranks
        self.rank_seqs = cfg.max_num_seqs // ranks
        if self.rank_budget < 1:  # SGLang's chunked_prefill_size // dp_size
            raise InferplanError(
                f"--max-num-batched-tokens {cfg.max_num_batched_tokens}: under DP attention each "
                f"of the {ranks} ranks takes {cfg.max_num_batched_tokens} // {ranks} = 0 tokens a "
                f"step; give at least {ranks}"
            )
        num_requests = len(records.requested_tokens)
        self.rank_of = np.zeros(num_requests, dtype=np.int64)
        self.dispatched = np.zeros(num_requests, dtype=bool)
        self.next_rank = 0  # the controller's round-robin counter
        # Per rank, the pooled scheduler's state (``SglangScheduler``'s attributes of that name).
        self.ratio_bases = [self.ratio_init] * ranks
        self.ratio_steps_of = [0] * ranks
        self.queue_empty = [True] * ranks
        self.full = [False] * ranks
        self.size_seen = [0] * ranks
        self.retracted_ranks = [False] * ranks
        self.decoded_ranks = [False] * ranks

    # ---- dispatch and per-rank views ----------------------------------------------------------

    def _dispatch(self) -> None:
        """New arrivals (not yet on a rank), in queue order = arrival order: round robin."""
        for rid in self.waiting.in_order():
            if not self.dispatched[rid]:
                self.dispatched[rid] = True
                self.rank_of[rid] = self.next_rank
                self.next_rank = (self.next_rank + 1) % self.num_ranks

    def _rows(self, rank: int) -> np.ndarray:
        return np.flatnonzero(self.rank_of[self.running.ids] == rank)

    def _queues(self) -> list[list[int]]:
        """Each rank's waiting requests, in queue order."""
        queues: list[list[int]] = [[] for _ in range(self.num_ranks)]
        ids = self.waiting.in_order()
        for rid, rank in zip(ids, self.rank_of[ids].tolist(), strict=True):
            queues[rank].append(rid)
        return queues

    def _free(self, rows: np.ndarray) -> int:
        """The rank's free blocks: its share less what its running rows hold."""
        return self.rank_blocks - int(self.running.held_blocks[rows].sum())

    def _ratio(self, rank: int, steps: int = 0) -> float:
        decayed = self.ratio_bases[rank] - (self.ratio_steps_of[rank] + steps) * self.ratio_decay
        return max(decayed, self.ratio_floor)

    def _decoding(self, rows: np.ndarray) -> np.ndarray:
        run = self.running
        left = run.num_tokens[rows] - run.num_computed[rows]
        return (left == 1) & (run.num_generated[rows] > 0)

    # ---- the verb -----------------------------------------------------------------------------

    def schedule(self, now: float) -> StepDecision:
        self._dispatch()
        sched: dict[int, int] = {}
        admitted: list[int] = []
        for rank, queue in enumerate(self._queues()):
            self._schedule_rank(rank, queue, now, sched, admitted)
        if admitted:  # off the queue, in admission order
            taken = set(admitted)
            rest = [rid for rid in self.waiting.in_order() if rid not in taken]
            self.waiting.reorder(admitted + rest)
            for _ in admitted:
                self.waiting.pop()
        ids = self.running.ids.tolist()
        decision = np.array([sched.get(rid, 0) for rid in ids], dtype=np.int64)
        if not decision.any():
            if len(self.waiting):
                self._check_fits()
            return StepDecision(decision)
        # The lockstep's extra seconds ride on ``swap_s``, the one additive term of a decision
        # (nothing is swapped under SGLang: it retracts).
        extra_s = self._lockstep_s(decision)
        return StepDecision(decision, swap_s=extra_s, preempted=any(self.retracted_ranks))

    def _schedule_rank(
        self, rank: int, queue: list[int], now: float, sched: dict[int, int], admitted: list[int]
    ) -> None:
        """One rank's ``SglangScheduler.schedule``: its prefill if one forms, else its decode
        (``queue``: its waiting requests; another rank's retraction does not touch them)."""
        rows = self._rows(rank)
        if not len(rows) and self.queue_empty[rank]:  # idle since the last step: reset
            self.ratio_bases[rank], self.ratio_steps_of[rank] = self.ratio_init, 0
        self.queue_empty[rank] = not queue
        self.retracted_ranks[rank] = self.decoded_ranks[rank] = False
        if not len(rows):
            self.full[rank] = False
        may_prefill = not self.full[rank] or not self._decoding(rows).all()  # a chunk left
        if may_prefill and self._prefill(rank, rows, queue, now, sched, admitted):
            rows = self._rows(rank)
            self.size_seen[rank] = len(rows) - self._finishing_rows(rows, sched)
            return
        if len(rows) < self.size_seen[rank]:  # ``update_running_batch``: finished rows left
            self.full[rank] = False
        rows = self._decode(rank, rows, sched)
        self.size_seen[rank] = len(rows)

    def _finishing_rows(self, rows: np.ndarray, sched: dict[int, int]) -> int:
        run = self.running
        ids = run.ids[rows].tolist()
        step = np.array([sched.get(rid, 0) for rid in ids], dtype=np.int64)
        computed = run.num_computed[rows] + step
        done = (computed == run.num_tokens[rows]) & (
            run.num_generated[rows] + 1 >= run.target[rows]
        )
        return int(np.count_nonzero(done & (step > 0)))

    # ---- prefill ------------------------------------------------------------------------------

    def _prefill(
        self,
        rank: int,
        rows: np.ndarray,
        queue: list[int],
        now: float,
        sched: dict[int, int],
        admitted: list[int],
    ) -> bool:
        """The rank's chunked request's next chunk and the admissions behind it (FCFS over its
        own queue, against its own pool and budget); whether a prefill formed."""
        run, pool, budget = self.running, self.pool, self.rank_budget
        formed = False
        for row in rows[~self._decoding(rows)]:  # at most one: the rank's chunked request
            computed = int(run.num_computed[row])
            chunk = min(int(run.num_tokens[row]) - computed, budget)
            grow = max(pool.blocks_for_one(computed + chunk) - int(run.held_blocks[row]), 0)
            pool.free -= grow
            run.held_blocks[row] += grow
            sched[int(run.ids[row])] = chunk
            budget -= chunk
            formed = formed or chunk > 0
        available = self._rem_total_rank(rank, rows)
        reserved = 0
        count = len(rows)
        for rid in queue:
            if budget <= 0:
                break
            if count >= self.rank_seqs:
                self.full[rank] = True  # no running slot left
                break
            tokens = self.waiting.tokens[rid]
            generated = tokens - int(self.prompt_tokens[rid])
            need = tokens + min(int(self.target_tokens[rid]) - generated, CLIP_MAX_NEW_TOKENS)
            if need > available - reserved:
                self.full[rank] = True  # ``AddReqResult.NO_TOKEN``
                break
            chunk = min(tokens, budget)
            held = pool.blocks_for_one(chunk)
            pool.free -= held
            if math.isnan(self.records.first_scheduled_s[rid]):
                self.records.first_scheduled_s[rid] = now
            run.append(rid, 0, tokens, generated, int(self.target_tokens[rid]), held, now)
            sched[rid] = chunk
            admitted.append(rid)
            reserved += need
            budget -= chunk
            count += 1
            formed = True
            if chunk < tokens:
                break  # the chunked request: one at a time
        return formed

    def _rem_total_rank(self, rank: int, rows: np.ndarray) -> int:
        """``SglangScheduler._rem_total`` on the rank's rows, pool share and ratio."""
        run = self.running
        left = np.minimum(
            np.maximum(run.target[rows] - run.num_generated[rows], 0), CLIP_MAX_NEW_TOKENS
        )
        free = float(self.free_tokens(self._free(rows)))
        return math.ceil(free - self._ratio(rank) * float(left.sum())) - 1

    # ---- decode and retraction ----------------------------------------------------------------

    def _decode(self, rank: int, rows: np.ndarray, sched: dict[int, int]) -> np.ndarray:
        """Every row of the rank decodes one token; where its pool lacks the slots the rank
        retracts (``SglangScheduler._retract`` on its rows). Returns the rank's rows after."""
        pool, run = self.pool, self.running
        if not len(rows):
            return rows
        need = pool.crossing_cost(run.num_computed[rows])
        if int(need.sum()) > self._free(rows):
            rows = self._retract_rank(rank, rows)
            need = pool.crossing_cost(run.num_computed[rows])
            while len(rows) and int(need.sum()) > self._free(rows):
                self.preempt(self._victim(rows))  # SGLang aborts it; here it waits for room
                rows = self._rows(rank)
                need = pool.crossing_cost(run.num_computed[rows])
        pool.free -= int(need.sum())
        run.held_blocks[rows] += need
        for rid in run.ids[rows].tolist():
            sched[rid] = 1
        self.decoded_ranks[rank] = bool(len(rows))
        return rows

    def _retract_rank(self, rank: int, rows: np.ndarray) -> np.ndarray:
        while len(rows) > 1:
            self.preempt(self._victim(rows))
            rows = self._rows(rank)
            if self.free_tokens(self._free(rows)) >= RETRACT_DECODE_STEPS * len(rows):
                break
        self.retracted_ranks[rank] = True
        self.full[rank] = False  # the batch shrank
        run = self.running
        total_max_new = float(run.target[rows].sum())
        generated = float(run.num_generated[rows].sum())
        estimate = (generated + RETRACT_DECODE_STEPS * len(rows)) / (total_max_new + 1)
        self.ratio_bases[rank], self.ratio_steps_of[rank] = min(1.0, estimate), 0
        return rows

    def _victim(self, rows: np.ndarray) -> int:
        """``SglangScheduler.victim_row`` among the rank's rows: fewest generated, then the
        longest prompt, then the latest admitted."""
        run = self.running
        prompt = self.prompt_tokens[run.ids[rows]]
        order = np.lexsort((-rows, -prompt, run.num_generated[rows]))
        return int(rows[order[0]])

    # ---- the lockstep ---------------------------------------------------------------------------

    def _lockstep_s(self, decision: np.ndarray) -> float:
        """Seconds the step takes beyond its union's even split: every rank-local operator
        (attention, projections, dense and shared layers, the LM head) runs at the heaviest
        rank's batch, the routed experts at the union's. Timed as the step model times a batch
        of ``num_ranks`` copies of the heaviest rank's (each rank's share of it is that rank's),
        with its experts swapped for the union's; 0 where the ranks are even."""
        model = self.step_model
        if model is None:
            return 0.0
        batches = self._rank_batches(decision)
        heavy = max(batches, key=_load)
        if all(b == heavy for b in batches):
            return 0.0
        union = _sum_batches(batches)
        scaled = _scale_batch(heavy, self.num_ranks)
        at_union, at_heavy = model.step_time(union), model.step_time(scaled)
        experts = at_union.by_operator_s.get("experts", 0.0)
        lockstep = at_heavy.total_s - at_heavy.by_operator_s.get("experts", 0.0) + experts
        return max(lockstep - at_union.total_s, 0.0)

    def _rank_batches(self, decision: np.ndarray) -> list[StepBatch]:
        """``Replica._batch`` of each rank's rows."""
        run, ranks = self.running, self.num_ranks
        rank = self.rank_of[run.ids]
        computed = run.num_computed
        decode = (decision == 1) & (computed > 0)
        prefill = (decision > 0) & ~decode
        q, o = decision * prefill, computed * prefill
        sums = [
            np.bincount(rank, weights=w, minlength=ranks).tolist()
            for w in (q, q * o + q * (q + 1) / 2, o, prefill, decode, (computed + 1) * decode)
        ]
        return [
            StepBatch(int(a), float(b), int(c), int(d), int(e), int(f))
            for a, b, c, d, e, f in zip(*sums, strict=True)
        ]

    # ---- the replica's hooks ------------------------------------------------------------------

    def note_steps(self, num_steps: int, *, prefill_only: bool = False) -> None:
        """Each rank that decoded this step (and did not retract) decays its ratio; whether its
        queue is empty after the step (the next step's idle reset reads it, as the pooled
        ``SglangScheduler.note_steps`` keeps ``queue_was_empty``)."""
        for rank, queue in enumerate(self._queues()):
            if self.decoded_ranks[rank] and not self.retracted_ranks[rank]:
                self.ratio_steps_of[rank] += num_steps
            self.retracted_ranks[rank] = False
            self.queue_empty[rank] = not queue
        self.scheduled = False

    def head_can_join(self) -> bool:
        return True  # never a closed-form stretch: the steps run one at a time

    def _check_fits(self) -> None:
        """A step with nothing to run while requests wait: a rank's queue head that its empty
        pool cannot take would wait forever; SGLang refuses such a request."""
        for rank in range(self.num_ranks):
            rows, queue = self._rows(rank), self._queues()[rank]
            if len(rows) or not queue:
                continue
            rid = queue[0]
            tokens = self.waiting.tokens[rid]
            need = tokens + min(int(self.target_tokens[rid]), CLIP_MAX_NEW_TOKENS)
            capacity = int(self.free_tokens(self.rank_blocks))
            if need < capacity:  # admitted while ``need <= capacity - 1``: not the pool
                raise InferplanError(
                    f"--engine sglang: DP-attention rank {rank} admits nothing though its queue "
                    f"head ({need} KV tokens) fits its pool ({capacity}): a bug, please report"
                )
            raise InferplanError(
                f"--engine sglang: a request needs {need} KV tokens (prompt and clipped "
                f"output), at least one DP-attention rank's pool holds ({capacity}); "
                "lower --max-model-len or use more memory per rank"
            )


def _load(batch: StepBatch) -> tuple[int, int, float]:
    """The heaviest rank first by its tokens, then its decode context and attention pairs."""
    return batch.num_tokens, batch.decode_context_tokens, batch.prefill_attention_pairs


def _sum_batches(batches: list[StepBatch]) -> StepBatch:
    return StepBatch(
        prefill_tokens=sum(b.prefill_tokens for b in batches),
        prefill_attention_pairs=sum(b.prefill_attention_pairs for b in batches),
        prefill_context_tokens=sum(b.prefill_context_tokens for b in batches),
        num_prefill_seqs=sum(b.num_prefill_seqs for b in batches),
        num_decode_seqs=sum(b.num_decode_seqs for b in batches),
        decode_context_tokens=sum(b.decode_context_tokens for b in batches),
    )


def _scale_batch(batch: StepBatch, copies: int) -> StepBatch:
    return _sum_batches([batch] * copies)


@cache
def ranked_scheduler(num_ranks: int) -> str:
    """The scheduler name of SGLang with ``num_ranks`` DP-attention ranks, registered in
    ``SCHEDULERS`` (one subclass per rank count; ``num_ranks`` its constant)."""
    name = f"{RANKED_PREFIX}{num_ranks}"
    kind = type(f"SglangRanked{num_ranks}", (SglangRankedScheduler,), {"num_ranks": num_ranks})
    SCHEDULERS[name] = kind
    return name
