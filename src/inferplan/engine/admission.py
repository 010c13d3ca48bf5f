"""Admission control: how much KV a request reserves when it is admitted, and what happens when
a running request outgrows what it reserved (DESIGN §2 item 5, issue #13).

Reasoning models make KV memory, not compute, the first limit: outputs of thousands of tokens
grow each sequence's KV for thousands of steps. Reserving every request's maximum (TensorRT-LLM's
GUARANTEED_NO_EVICT, ``capacityScheduler.cpp``) leaves most of the reserved HBM unused; reserving
nothing (vLLM v1, which allocates blocks on demand) admits too many and preempts when several long
outputs coincide. The policies here sit between the two, beside the scheduler; the scheduler
calls them from its one admission test (``Scheduler.head_chunk``) and its running pass.

Reservation (``--admission``), in KV blocks, per admitted request:
- ``reserve-none``: nothing (vLLM v1); blocks come from the pool as the sequence grows.
- ``reserve-max``: prompt + ``max_tokens`` (``--admission-max-tokens``, default up to
  ``max_model_len``), as TensorRT-LLM reserves ``max_new_tokens``.
- ``quantile``: prompt + the ``--admission-quantile`` quantile of the predicted output length
  (``workload/predict.py``), plus a *shared* emergency headroom: admission keeps
  ``--admission-headroom`` of the pool's blocks outside every reservation, and a request that
  outgrows its reservation draws its new blocks from the unreserved free blocks (at least the
  headroom when the last request was admitted, more when others finished), instead of every
  request reserving a safety margin of its own.
- ``token-budget``: no blocks reserved; a request is admitted while the reserved tokens
  (prompt + predicted quantile) of the running requests and its own stay within
  ``--admission-token-budget`` (default: the pool's tokens).

A request's reservation is fixed when it is admitted; a preempted request re-reserves when it is
admitted again, at least its tokens so far plus one. With nothing running, the headroom and the
token budget are waived (one request is always admissible, so nothing waits for ever), and a
reservation is capped at the pool.

Exhaustion (``--on-exhaustion``): a running request needs a block beyond its reservation and no
unreserved free block is left. Explicit, counted, never retried in hiding:
- ``queue``: it borrows a free block reserved by another request, and admission stops (the
  admission test fails while the unreserved blocks are negative); if the pool itself is dry,
  vLLM's recompute preemption (the last admitted first) frees blocks.
- ``preempt``: requests are preempted by recompute in vLLM v1's victim order (the last admitted,
  possibly the request itself) until the block is unreserved; counted as preemptions.
- ``reject``: the request ends now, REJECTED with reason ``headroom_exhausted``; its blocks go
  back to the pool.
- ``truncate``: the request ends now with the tokens it has (COMPLETED, counted as truncated);
  one that has no output token yet is rejected instead.
With ``reserve-none`` and ``preempt`` this is exactly vLLM v1's running pass (tested).

Fast mode: the replica's vector decode step asks ``grants_decode``. Between events the
unreserved free blocks only fall (a block inside a reservation
moves from the pool into it; one beyond comes out of the unreserved ones), so the admission test
cannot flip inside a decode stretch, and ``steps_before_exhaustion`` finds the first step whose
growth would exhaust them by bisection (DESIGN §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError
from inferplan.memory.blockpool import BlockPool
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.workload.predict import Predictions, PredictorSpec, predict_output_tokens

if TYPE_CHECKING:
    from inferplan.engine.offload import KvOffload
    from inferplan.engine.running import RunningSet
    from inferplan.engine.schedulers import Scheduler, StepDecision

IntArray = npt.NDArray[np.int64]

POLICIES = ("reserve-none", "reserve-max", "quantile", "token-budget")
EXHAUSTION_POLICIES = ("queue", "reject", "truncate", "preempt")
# Why a request ended early (index 0: it did not) and why admission held it back.
END_REASONS = ("", "headroom_exhausted")
QUEUE_REASONS = ("", "reservation", "token_budget")
HEADROOM_EXHAUSTED = 1
QUEUED_BY_RESERVATION, QUEUED_BY_TOKEN_BUDGET = 1, 2


@dataclass(frozen=True)
class AdmissionConfig:
    """The admission policy and its knobs (module doc). ``policy`` None: the engine's own
    (vLLM reserves nothing, TensorRT-LLM reserves prompt + output), through today's code."""

    policy: str | None = None
    quantile: float = 0.9
    headroom: float = 0.0  # fraction of the pool's blocks kept outside every reservation
    on_exhaustion: str = "preempt"
    token_budget: int | None = None  # token-budget; None: the pool's tokens
    max_tokens: int | None = None  # reserve-max; None: up to max_model_len
    predictor: PredictorSpec = field(default_factory=PredictorSpec)
    spf_aging_s: float | None = None  # spf: a request waiting longer is served first-come

    @property
    def is_active(self) -> bool:
        return self.policy is not None

    def check(self, engine: str, scheduler: str, scheduling_policy: str) -> None:
        if self.policy is not None and self.policy not in POLICIES:
            raise InferplanError(f"--admission: valid: {', '.join(POLICIES)}")
        if self.on_exhaustion not in EXHAUSTION_POLICIES:
            raise InferplanError(f"--on-exhaustion: valid: {', '.join(EXHAUSTION_POLICIES)}")
        if not 0.0 <= self.headroom < 1.0:
            raise InferplanError(f"--admission-headroom: must be in [0, 1), got {self.headroom}")
        if self.spf_aging_s is not None and scheduling_policy != "spf":
            raise InferplanError("--spf-aging-s: applies with --scheduling-policy spf only")
        if self.policy is not None and (engine, scheduler) != ("vllm", "continuous"):
            raise InferplanError(
                f"--admission {self.policy}: emulated on vLLM v1's scheduler only (--engine "
                "vllm --scheduler continuous); --engine trtllm always reserves prompt + output"
            )


class AdmissionLedger:
    """Per-request admission state of one run, shared by its replicas: predictions, the
    reservation each running request holds, why requests ended early or were held back."""

    def __init__(
        self,
        cfg: AdmissionConfig,
        prompt_tokens: IntArray,
        output_tokens: IntArray,
        class_ids: IntArray,
        max_model_len: int,
    ) -> None:
        n = len(prompt_tokens)
        self.cfg, self.prompt_tokens, self.max_model_len = cfg, prompt_tokens, max_model_len
        self.predictions: Predictions = predict_output_tokens(
            cfg.predictor, output_tokens, class_ids, cfg.quantile
        )
        self.reserved_blocks = np.zeros(n, dtype=np.int64)
        self.reserved_tokens = np.zeros(n, dtype=np.int64)
        self.end_reason = np.zeros(n, dtype=np.int64)
        self.queued_reason = np.zeros(n, dtype=np.int64)
        self.peak_headroom_blocks = 0  # most blocks running requests held beyond reservations
        self.headroom_blocks = 0  # per replica (set by the replicas' components)

    def reservation_tokens(self, rid: int, tokens: int) -> int:
        """Tokens ``rid`` reserves when admitted with ``tokens`` to (re)compute."""
        policy, prompt = self.cfg.policy, int(self.prompt_tokens[rid])
        if policy == "reserve-none":
            return 0
        if policy == "reserve-max":
            cap = self.cfg.max_tokens
            total = self.max_model_len if cap is None else prompt + cap
            return max(total, tokens + 1)
        return prompt + max(int(self.predictions.quantile_tokens[rid]), tokens - prompt + 1)


class Admission:
    """One replica's admission policy (a component its scheduler calls)."""

    def __init__(
        self,
        ledger: AdmissionLedger,
        pool: BlockPool,
        records: RequestRecords,
        on_finish: list[int],
    ) -> None:
        self.ledger, self.cfg, self.pool, self.records = ledger, ledger.cfg, pool, records
        self.on_finish = on_finish  # the replica's list: the client sees early ends as finishes
        self.headroom_blocks = int(self.cfg.headroom * pool.num_blocks)
        ledger.headroom_blocks = self.headroom_blocks
        pool_tokens = pool.num_blocks * pool.block_size
        self.token_budget = pool_tokens if self.cfg.token_budget is None else self.cfg.token_budget
        self._outstanding = 0  # reserved blocks not yet allocated, at the last availability
        # KV tiers (``engine/offload.py``), set by the replica: requests admitted while their
        # KV comes back hold blocks and a reservation off the running set.
        self.offload: KvOffload | None = None

    # ---- the admission test ---------------------------------------------------------------

    def _active_ids(self, run: RunningSet) -> IntArray:
        """Requests holding a reservation: the running ones, and with KV tiers those admitted
        while their KV comes back."""
        if self.offload is None or not self.offload.loading:
            return run.ids
        loading = [x.request_id for x in self.offload.loading]
        return np.concatenate([run.ids, np.asarray(loading, dtype=np.int64)])

    def outstanding(self, run: RunningSet, held: IntArray) -> int:
        """Blocks reserved by running (and reloading) requests and not yet allocated to them."""
        reserved = self.ledger.reserved_blocks[run.ids]
        total = int(np.maximum(reserved - held, 0).sum())
        if self.offload is not None:  # admitted, waiting off the batch for their KV
            ledger = self.ledger.reserved_blocks
            total += sum(
                max(int(ledger[x.request_id]) - x.held_blocks, 0) for x in self.offload.loading
            )
        return total

    def available_blocks(self, run: RunningSet, *, after_decode_step: bool) -> int:
        """Unreserved free blocks now, or after every running row decodes one more token."""
        held, free = run.held_blocks, self.pool.free
        if after_decode_step:
            crossing = self.pool.crossing_cost(run.num_computed)
            held = held + crossing
            free -= int(crossing.sum())
        self._outstanding = self.outstanding(run, held)
        return free - self._outstanding

    def admits(
        self, run: RunningSet, rid: int, tokens: int, chunk_blocks: int, unreserved: int
    ) -> bool:
        """Whether the queue head (``tokens`` to compute, first chunk ``chunk_blocks``) is
        admitted with ``unreserved`` blocks; records its reservation, or why it waits."""
        ledger, pool = self.ledger, self.pool
        res_tokens = ledger.reservation_tokens(rid, tokens)
        res_blocks = 0
        if self.cfg.policy in ("reserve-max", "quantile"):
            res_blocks = min(pool.blocks_for_one(res_tokens), pool.num_blocks)
        active = self._active_ids(run)
        is_busy = len(active) > 0
        margin = self.headroom_blocks if is_busy else 0
        fits_blocks = max(res_blocks, chunk_blocks) + margin <= unreserved
        over_budget = (
            self.cfg.policy == "token-budget"
            and is_busy
            and int(ledger.reserved_tokens[active].sum()) + res_tokens > self.token_budget
        )
        if fits_blocks and not over_budget:
            ledger.reserved_blocks[rid] = res_blocks
            ledger.reserved_tokens[rid] = res_tokens
            return True
        if not fits_blocks:  # held back by reservations only if on-demand would have fit
            fits_on_demand = chunk_blocks <= unreserved + self._outstanding
            reason = QUEUED_BY_RESERVATION if fits_on_demand else 0
        else:
            reason = QUEUED_BY_TOKEN_BUDGET
        if reason and not ledger.queued_reason[rid]:
            ledger.queued_reason[rid] = reason
        return False

    # ---- fast mode --------------------------------------------------------------------------

    def steps_before_exhaustion(self, run: RunningSet, k: int) -> int:
        """Decode steps of the current batch (at most ``k``) that leave no row beyond its
        reservation without an unreserved block (all ``k`` under ``queue``: it borrows)."""
        if k <= 0 or self.cfg.on_exhaustion == "queue":
            return k
        pool, held, computed = self.pool, run.held_blocks, run.num_computed
        reserved = self.ledger.reserved_blocks[run.ids]

        def unreserved_after(steps: int) -> int:
            after = np.maximum(held, pool.blocks_for(computed + steps))
            drawn = int((after - held).sum())
            return pool.free - drawn - int(np.maximum(reserved - after, 0).sum())

        if unreserved_after(k) >= 0:
            return k
        low, high = 0, k  # unreserved_after(high) < 0; the answer is the last good step
        if unreserved_after(0) < 0:
            return 0
        while high - low > 1:
            mid = (low + high) // 2
            if unreserved_after(mid) >= 0:
                low = mid
            else:
                high = mid
        return low

    def note_headroom(self, run: RunningSet, held: IntArray) -> None:
        """Track the most blocks running requests held beyond their reservations."""
        beyond = int(np.maximum(held - self.ledger.reserved_blocks[run.ids], 0).sum())
        if beyond > self.ledger.peak_headroom_blocks:
            self.ledger.peak_headroom_blocks = beyond

    def note_stretch(self, run: RunningSet, steps: int) -> None:
        """A decode stretch of ``steps`` will run: its last step's running pass holds the most
        blocks. The peak is sampled where a step's running pass has granted its rows (as
        ``schedule_running`` does), so a stretch of no steps samples nothing: the blocks held
        now include the last step's admitted prompts, which that pass never sees, and the
        step that runs instead samples its own pass (which may end rows first)."""
        if steps <= 0:
            return
        after = np.maximum(run.held_blocks, self.pool.blocks_for(run.num_computed + steps))
        self.note_headroom(run, after)

    # ---- the running pass -------------------------------------------------------------------

    def schedule_running(self, sched: Scheduler, now: float) -> StepDecision:
        """vLLM v1's running pass (``Scheduler.schedule_running``) with reservations: rows are
        granted in order while the pool (and, beyond a row's reservation, the unreserved
        blocks) last; the first row that does not fit meets the exhaustion policy."""
        from inferplan.engine.schedulers import StepDecision

        run, pool = sched.running, sched.pool
        budget, start, swap_s, preempted = sched.cfg.max_num_batched_tokens, 0, 0.0, False
        granted = np.zeros(len(run), dtype=np.int64)
        while start < len(run) and budget > 0:
            need = run.num_tokens[start:] - run.num_computed[start:]
            cum = np.cumsum(need)
            tokens = np.minimum(need, np.maximum(budget - (cum - need), 0))
            num_ok = self._grant_prefix(run, start, tokens)
            granted[start : start + num_ok] = tokens[:num_ok]
            budget -= int(tokens[:num_ok].sum())
            if num_ok == len(tokens):
                break
            row, row_tokens = start + num_ok, int(tokens[num_ok])
            if self.cfg.on_exhaustion in ("reject", "truncate"):
                self._end_early(sched, row, now)
                granted, start = np.delete(granted, row), row
                continue
            # queue (pool dry) and preempt: vLLM v1's victims until the row fits.
            while not self._row_fits(run, row, row_tokens):
                victim = sched.victim_row()
                swap_s += sched.preempt(victim)
                preempted = True
                budget += int(granted[victim])
                granted = np.delete(granted, victim)
                if victim == row:
                    granted[row:] = 0
                    self.note_headroom(run, run.held_blocks)
                    return StepDecision(granted, swap_s=swap_s, preempted=True)
                row -= victim < row
            blocks = self._row_blocks(run, row, row_tokens)
            pool.free -= blocks
            run.held_blocks[row] += blocks
            granted[row] = row_tokens
            budget -= row_tokens
            start = row + 1
        self.note_headroom(run, run.held_blocks)
        return StepDecision(granted, swap_s=swap_s, preempted=preempted)

    def _grant_prefix(self, run: RunningSet, start: int, tokens: IntArray) -> int:
        """Allocate the blocks of rows ``start:`` (``tokens`` more each) in order while the pool
        and, beyond reservations, the unreserved blocks last; the number of rows granted."""
        pool = self.pool
        new, beyond = self._new_blocks(run, start, tokens)
        bad = np.cumsum(new) > pool.free
        if self.cfg.on_exhaustion != "queue":
            bad |= np.cumsum(beyond) > pool.free - self.outstanding(run, run.held_blocks)
        failing = np.flatnonzero(bad)
        num_ok = len(new) if len(failing) == 0 else int(failing[0])
        pool.free -= int(new[:num_ok].sum())
        run.held_blocks[start : start + num_ok] += new[:num_ok]
        return num_ok

    def grants_decode(self, run: RunningSet, crossing: IntArray) -> bool:
        """The replica's vector step: whether every row can take its ``crossing`` blocks for
        one decode token without exhausting the unreserved blocks; if so, the peak use noted
        (the caller allocates them)."""
        held = run.held_blocks + crossing
        if self.cfg.on_exhaustion != "queue":
            room = np.maximum(self.ledger.reserved_blocks[run.ids] - run.held_blocks, 0)
            beyond = int((crossing - np.minimum(crossing, room)).sum())
            if beyond > self.pool.free - int(room.sum()):
                return False
        self.note_headroom(run, held)
        return True

    def _new_blocks(
        self, run: RunningSet, start: int, tokens: IntArray
    ) -> tuple[IntArray, IntArray]:
        """New blocks of rows ``start:`` for ``tokens`` more, and how many lie beyond their
        reservations."""
        held = run.held_blocks[start:]
        new = np.maximum(self.pool.blocks_for(run.num_computed[start:] + tokens) - held, 0)
        room = np.maximum(self.ledger.reserved_blocks[run.ids[start:]] - held, 0)
        return new, new - np.minimum(new, room)

    def _row_blocks(self, run: RunningSet, row: int, tokens: int) -> int:
        computed, held = int(run.num_computed[row]), int(run.held_blocks[row])
        return max(self.pool.blocks_for_one(computed + tokens) - held, 0)

    def _row_fits(self, run: RunningSet, row: int, tokens: int) -> bool:
        new = self._row_blocks(run, row, tokens)
        if new > self.pool.free:
            return False
        if self.cfg.on_exhaustion == "queue":
            return True
        room = max(int(self.ledger.reserved_blocks[int(run.ids[row])] - run.held_blocks[row]), 0)
        unreserved = self.pool.free - self.outstanding(run, run.held_blocks)
        return new - min(new, room) <= unreserved

    def _end_early(self, sched: Scheduler, row: int, now: float) -> None:
        """``reject``/``truncate``: the request at ``row`` ends now; its blocks go back."""
        run, rec = sched.running, self.records
        generated = int(run.num_generated[row])
        rid, computed, _, held = run.pop(row)
        sched.release_blocks(rid, held, computed)
        rec.output_tokens[rid] = generated
        self.ledger.end_reason[rid] = HEADROOM_EXHAUSTED
        if self.cfg.on_exhaustion == "truncate" and generated > 0:
            rec.status[rid] = int(RequestStatus.COMPLETED)
            rec.finish_s[rid] = now
        else:
            rec.status[rid] = int(RequestStatus.REJECTED)
        self.on_finish.append(rid)

    # ---- invariants (tests call this after every step) --------------------------------------

    def check(self, run: RunningSet) -> None:
        """Reservations are never negative nor above the pool; outside ``queue`` (which
        borrows) the running requests' unallocated reservations are all backed by free
        blocks."""
        reserved = self.ledger.reserved_blocks[run.ids]
        assert np.all(reserved >= 0), "a negative reservation"
        assert np.all(reserved <= self.pool.num_blocks), "a reservation above the pool"
        assert self.outstanding(run, run.held_blocks) <= self.pool.num_blocks
        if self.cfg.on_exhaustion != "queue":
            unreserved = self.pool.free - self.outstanding(run, run.held_blocks)
            assert unreserved >= 0, "reserved blocks are not backed by free blocks"
