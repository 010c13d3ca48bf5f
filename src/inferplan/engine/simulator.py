"""The event loop: arrivals, routing to replicas, and replicas' steps in time order.

The loop keeps one clock per replica (when its next step starts). It repeatedly takes the
earliest of: the next arrival (routed when every busy replica has reached its time, so the
router sees their state then), or the earliest busy replica's next step, which runs one step or,
in fast mode, a whole pure-decode stretch that stops before the next arrival (with round robin,
the next one routed to that replica: ``engine/routed_arrivals.py``). Same-time ordering
is defined once: an arrival at time t is seen by any step that starts at t or later.

Client side, as ``vllm bench serve``: a request is sent at its trace time; with
``--max-concurrency`` it waits until fewer than that many are in flight, and its latency clock
starts when it is sent to the server. Requests whose prompt + output exceed ``--max-model-len``
are rejected at arrival (the OpenAI server's check), and so are prompts longer than the token
budget when prompts cannot be chunked (TensorRT-LLM's default) and requests whose KV could not
fit the replica's block pool even alone: a run completes with them as rejected requests.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from inferplan.engine.admission import AdmissionConfig
from inferplan.engine.chain import preemption_chain
from inferplan.engine.chunk_run import step_then_chunks
from inferplan.engine.implicit_step import joined_admission_step
from inferplan.engine.loop_order import same_time_s
from inferplan.engine.policies import ROUTERS, WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig, prefix_cache_for
from inferplan.engine.routed_arrivals import RoutedArrivals, held_send_s, round_robin_replicas
from inferplan.engine.run_result import SimulationResult, run_result
from inferplan.engine.schedulers import SCHEDULERS
from inferplan.engine.simsetup import (
    admission_ledger,
    build_replicas,
    check_config,
    is_routed_at_arrival,
    records_for,
)
from inferplan.engine.specstretch import can_stretch, spec_stretch
from inferplan.engine.speculation import SimSpeculation, speculate
from inferplan.engine.thrash import doomed_cycles
from inferplan.errors import InferplanError
from inferplan.memory.blockpool import BlockPool
from inferplan.metrics.itl_log import ItlBatch
from inferplan.metrics.records import RequestStatus
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.request import Workload

# A doomed pass (``engine/thrash.py``) goes on past the arrivals that ``_advance`` routes itself
# (``thrashrun._past_arrival``: the cut cycle with the general path's floats, then on); False:
# it ends at the arrival and the loop runs that cycle (``step_then_chunks``), the reference.
PASS_PAST_ARRIVALS = True
# The loop's arrivals due at a clock reading, routed (``_chain_arrivals``, ``_pass_arrivals``).
Intake = Callable[[float], float | None]


@dataclass(frozen=True)
class SimulationConfig:
    scheduler: SchedulerConfig
    max_model_len: int
    data_parallel_size: int = 1
    router: str = "round_robin"
    scheduling_policy: str = "fcfs"
    max_concurrency: int | None = None
    exact: bool = False
    # Admission control, length predictors and SPF aging (``engine/admission.py``); None: the
    # engine's own admission and the true output lengths for SPF.
    admission: AdmissionConfig | None = None
    # Speculative decoding (``engine/speculation.py``); None: off.
    speculative: SimSpeculation | None = None


class Simulation:
    """One run: the replicas, the client, and the clock."""

    def __init__(self, workload: Workload, cfg: SimulationConfig, model: StepTimeModel) -> None:
        self.scheduler_kind = SCHEDULERS[cfg.scheduler.scheduler]
        check_config(cfg, self.scheduler_kind)
        self.workload, self.cfg = workload, cfg
        sched = cfg.scheduler
        self.pool = BlockPool(sched.num_blocks, sched.block_size, sched.kv_groups)  # arithmetic
        # The clock starts at the first arrival: results must not depend on where a trace's
        # times start, and float clocks near 1.7e9 s (Unix epoch) would lose the step times.
        self.time_offset_s = float(workload.arrival_s[0]) if workload.num_requests else 0.0
        self.records = records_for(workload, self.time_offset_s)
        if prefix_cache_for(sched, workload) is not None:
            zeros = np.zeros(workload.num_requests, dtype=np.int64)
            self.records = replace(
                self.records, cached_tokens=zeros, prefix_queried_tokens=zeros.copy()
            )
        self.itl = ItlBatch()  # the adds counted and folded a batch at a time (the same floats)
        self.ledger = admission_ledger(cfg, workload)
        self.replicas = build_replicas(
            cfg, workload, model, self.records, self.itl, self.ledger, same_time_s
        )
        speculate(self.replicas, model, cfg.speculative, cfg.max_model_len)
        for replica in self.replicas:
            replica.is_plain = self._is_plain(replica)
            # Its pool cache, KV tiers and admission policy are set: the waiting pass's form
            # is decided once, not per admission.
            replica.scheduler.settle_admission_path()
        self.next_request = 0
        self._num_requests = workload.num_requests  # read per arrival: without its property
        self._arrival_s: list[float] = self.records.dispatch_s.tolist()
        self.in_flight = 0
        self.finish_times: list[float] = []  # sorted finish times (client concurrency limit)
        self.num_routed = 0
        self.num_done = 0
        # Per replica: its clock while it has work, else inf (``_earliest_busy``); set by
        # ``run`` and kept by ``_note_clock`` wherever a replica's clock or work changes.
        self._clocks = [math.inf] * len(self.replicas)
        # Whether each request passes the server's checks at arrival (a list: read per arrival).
        self._routed_at_arrival: list[bool] = self._is_routed_at_arrival().tolist()
        self.own_arrivals = self._own_arrivals()
        self._fuse_advances = self._fuses_advances()
        self._chains = self._chains_apply()
        # Set by ``run``: whether a fused advance collects finishes itself (``_advance``), the
        # progress callback it reports them to, and the arrivals a chain may take in then.
        self._collects_finishes = False
        self._on_progress: Callable[[int], None] | None = None
        self._intake: Intake | None = None
        self._pass_intake: Intake | None = None

    def _is_plain(self, replica: Replica) -> bool:
        """Whether ``_advance_once`` may take ``replica`` by ``_advance_plain``: fast mode, no
        KV tiers or speculative decoding, a queue without timers (no SPF aging), and no other
        replica whose clock bounds its stretches (a client limit over several replicas)."""
        cfg = self.cfg
        return (
            not cfg.exact
            and replica.offload is None
            and replica.spec is None
            and type(replica.waiting) is WaitingQueue
            and (cfg.max_concurrency is None or len(self.replicas) == 1)
        )

    def _own_arrivals(self) -> RoutedArrivals | None:
        """Each replica's own arrivals, where routing is known before the run (round robin,
        ``_routing_is_static``) and this class routes and times arrivals as ``Simulation``
        does. Otherwise None: stretches stop at every arrival (``engine/routed_arrivals.py``)."""
        if not self._routing_is_static():
            return None
        cls = type(self)
        for name in ("_route", "_arrive", "_next_arrival_s"):
            if getattr(cls, name) is not getattr(Simulation, name):
                return None  # a subclass (class pools) plans its own routing, or none
        is_routed = self._is_routed_at_arrival()
        replica_of = round_robin_replicas(is_routed, len(self.replicas))
        return RoutedArrivals(self.records.dispatch_s, is_routed, replica_of, len(self.replicas))

    def _routing_is_static(self) -> bool:
        """Fast mode, several replicas, a router that reads no replica state (round robin),
        and no client concurrency limit (a held request waits for a finish on any replica)."""
        cfg = self.cfg
        return (
            not cfg.exact
            and len(self.replicas) > 1
            and cfg.router == "round_robin"
            and cfg.max_concurrency is None
        )

    def _is_routed_at_arrival(self) -> np.ndarray:
        """Per request: not rejected at arrival (``simsetup.is_routed_at_arrival``)."""
        return is_routed_at_arrival(self.cfg, self.workload, self.scheduler_kind, self.pool)

    def _next_arrival_s(self) -> float:
        """When the next request reaches the server: its send time, or with a client
        concurrency limit, the moment a slot frees if every slot was taken at its send time."""
        if self.next_request >= self._num_requests:
            return math.inf
        sent = self._arrival_s[self.next_request]
        limit = self.cfg.max_concurrency
        if limit is None:
            return sent
        return held_send_s(sent, self.finish_times, self.in_flight, limit)

    def _arrive(self, now: float) -> None:
        rid = self.next_request
        self.next_request += 1
        rec = self.records
        rec.arrival_s[rid] = now
        if not self._routed_at_arrival[rid]:  # ``_is_routed_at_arrival``, for every request
            rec.status[rid] = int(RequestStatus.REJECTED)
            self.num_done += 1
            return
        self.in_flight += 1
        index = self._route(rid)
        replica = self.replicas[index]
        if self.own_arrivals is not None:
            self.own_arrivals.note_routed(rid, index)
        if not replica.has_work:
            replica.now = max(replica.now, now)
        replica.add_request(rid)
        self._clocks[index] = replica.now  # ``_note_clock``: it has work now

    def _route(self, rid: int) -> int:
        """The replica for request ``rid``: the router over every replica (class pools route
        within the request's pool: ``cluster/classpools.py``)."""
        index = ROUTERS[self.cfg.router](self.replicas, self.num_routed)
        self.num_routed += 1
        return index

    def _advance(self, replica: Replica, next_arrival_s: float) -> None:
        """``_advance_once``; with one replica in fast mode, again while the loop would pick
        this replica next anyway: the same steps, without a pass through the loop per step
        (``_fuses_advances``). Finishes are collected, and arrivals that come due routed, here
        as the loop does it, where nothing else in the loop reads them (``run``: no client
        concurrency limit and no per-advance check)."""
        collects, on_progress, arrived = self._collects_finishes, self._on_progress, False
        # ``_advance_once``'s choice, made once: a plain replica stays plain
        advance = self._advance_plain if replica.is_plain else self._advance_once
        while True:
            steps, now, requested = replica.num_steps, replica.now, self.next_request
            advance(replica, next_arrival_s)
            after_arrival, arrived = arrived, False
            if self.next_request != requested:  # a chain took arrivals in (``_chain_arrivals``)
                next_arrival_s, arrived = self._next_arrival_s(), True
            if not self._fuse_advances:
                return
            # ``has_work``, its usual yes without the call
            if not (replica.running._size or replica.waiting.tokens or replica.has_work):
                return
            finished = replica.on_finish
            if finished:
                if not collects:
                    return
                done = self._collect(replica)
                if on_progress is not None:
                    on_progress(done)
            if replica.num_steps == steps and replica.now == now:
                if after_arrival and not len(replica.running) and len(replica.waiting):
                    self._stuck(replica)  # the loop's test of the advance after an arrival
                return  # no progress: the loop says why (``_stuck``)
            if next_arrival_s <= replica.now + 1e-9 * (replica.now + 1.0):  # ``same_time_s``
                if not collects:
                    return  # the loop sees the arrival first
                # The loop would route the arrivals now due to this replica and pick it again:
                # the same ``_arrive`` here (``_fuses_advances``: the class's own client).
                next_arrival_s, arrived = self._arrive_due(next_arrival_s, replica.now), True

    def _arrive_due(self, next_arrival_s: float, now: float) -> float:
        """``_arrive`` of each arrival due at ``now`` (within ``same_time_s``), from the next
        one, ``next_arrival_s``, on, as the loop takes them; the next arrival's time after."""
        before = self.num_done
        while next_arrival_s <= now + 1e-9 * (now + 1.0):  # ``same_time_s``
            self._arrive(next_arrival_s)
            next_arrival_s = self._next_arrival_s()
        if self._on_progress is not None and self.num_done > before:
            self._on_progress(self.num_done - before)
        return next_arrival_s

    def _chain_arrivals(self, now: float) -> float | None:
        """For a chain at ``now`` (``engine/chain.py``, ``Intake``; set by ``run`` where
        ``_advance`` collects and routes by itself): ``_advance``'s arrivals when one is due
        then, and the next one's bound as ``_advance_plain`` makes it; None if none is due."""
        next_arrival_s = self._next_arrival_s()
        if not next_arrival_s <= now + 1e-9 * (now + 1.0):
            return None
        next_arrival_s = self._arrive_due(next_arrival_s, now)
        if next_arrival_s < math.inf:
            next_arrival_s -= 1e-9 * (next_arrival_s + 1.0)
        return next_arrival_s

    def _fuses_advances(self) -> bool:
        """Whether ``_advance`` may run several advances per call: fast mode, one replica (the
        loop would pick it again), and this class's own client and collection (class pools
        time checks of their own between advances)."""
        cls = type(self)
        own = all(
            getattr(cls, name) is getattr(Simulation, name)
            for name in ("_next_arrival_s", "_collect", "_arrive")
        )
        return own and not self.cfg.exact and len(self.replicas) == 1

    def _advance_once(self, replica: Replica, next_arrival_s: float) -> None:
        """One exact step, or (fast mode) a chain of pure-decode stretches joined by the
        preemption steps that end them, until a finish, an arrival or a batch change."""
        if replica.is_plain:  # the common replica, in fewer calls (the same steps)
            self._advance_plain(replica, next_arrival_s)
            return
        replica.waiting.age(replica.now)
        offload = replica.offload
        if offload is not None and not offload.is_idle(replica.now):
            # Transfers in flight: exact steps (a stretch would run past their ends).
            self._step_or_wait(replica, next_arrival_s)
            return
        spec = replica.spec  # speculative decoding has stretches of its own (``specstretch.py``)
        if self.cfg.exact or not can_stretch(replica):
            if not self.cfg.exact and spec is None and self._doomed_cycles(replica, next_arrival_s):
                return
            self._step_or_wait(replica, next_arrival_s)
            return
        if self.own_arrivals is not None:  # arrivals routed elsewhere cannot change this batch
            next_arrival_s = self.own_arrivals.next_arrival_s(replica.index)
        chain = self._chains and offload is None
        # The queue's own timer (SPF aging) ends a stretch as an arrival does.
        next_arrival_s = min(next_arrival_s, replica.waiting.next_deadline_s())
        if self.cfg.max_concurrency is not None and len(self.replicas) > 1:
            # Another replica's finish may release a held request at its clock or later: a
            # stretch must not run past the point where that replica stands.
            others = [t for i, t in enumerate(self._clocks) if i != replica.index]
            next_arrival_s = min([next_arrival_s, *others])
        # A step starting within rounding of the bound counts as starting at it (it sees it).
        if next_arrival_s < math.inf:
            next_arrival_s -= same_time_s(next_arrival_s)
        if spec is not None:
            if spec_stretch(replica, spec, next_arrival_s) == 0:
                replica.step()
            return
        self._stretch_chain(replica, next_arrival_s, chain)

    def _stretch_chain(
        self,
        replica: Replica,
        next_arrival_s: float,
        chain: bool,
        intake: Intake | None = None,
    ) -> None:
        """Stretches joined by the preemption steps that end them (or, where ``chain``, their
        closed form, ``engine/chain.py``, taking arrivals in through ``intake``), until a
        finish, the bound ``next_arrival_s`` or a batch change."""
        stretches = replica.stretches
        # ``preemption_chain`` declines a first stretch while the pool lasts a round of
        # crossings: that test here saves its call on every stretch below capacity.
        first_chain = chain and replica.pool.free_blocks < replica.running._size
        if first_chain and preemption_chain(
            replica, next_arrival_s, preempting=False, intake=intake
        ):
            return  # the loop below, at once
        while True:
            k, pool_bound = stretches.stretch(next_arrival_s)
            if not (pool_bound and chain):
                if k == 0:
                    replica.step()
                return
            if preemption_chain(replica, next_arrival_s, preempting=True, intake=intake):
                return  # the preemption steps and stretches to this loop's end, at once
            stretches.preempting_decode_step()
            if replica.on_finish or replica.now >= next_arrival_s or not stretches.can_stretch():
                return

    def _advance_plain(self, replica: Replica, next_arrival_s: float) -> None:
        """``_advance_once`` of a fast-mode replica without KV tiers, speculation, queue
        timers or other replicas' bounds (``Simulation._is_plain``): its steps, with the
        checks that cannot apply left out."""
        stretches = replica.stretches
        if not stretches.can_stretch():
            # The usual answer below capacity: the queue head joins, so the step admits it
            # beside the decoders (``joined_admission_step``: ``Replica.step``'s own, at once).
            if joined_admission_step(replica) or self._doomed_cycles(
                replica, next_arrival_s, self._pass_intake
            ):
                return
            step_then_chunks(replica, self._intake)  # ``Replica.step``, and chunk steps after
            return
        if self.own_arrivals is not None:  # arrivals routed elsewhere cannot change this batch
            next_arrival_s = self.own_arrivals.next_arrival_s(replica.index)
        if next_arrival_s < math.inf:  # a step starting within rounding of it sees it
            next_arrival_s -= 1e-9 * (next_arrival_s + 1.0)  # ``same_time_s``
        self._stretch_chain(replica, next_arrival_s, self._chains, self._intake)

    def _chains_apply(self) -> bool:
        """Whether stretches and preemption steps may run as chains (``engine/chain.py``; a
        replica with KV tiers runs them stepwise): the vector preemption step pops
        last-admitted victims, and vLLM's priority policy picks its own
        (``Scheduler.victim_row``); admission policies and SPF aging run their scheduler pass
        and timers step by step."""
        cfg, adm = self.cfg, self.cfg.admission
        pops_last = cfg.scheduling_policy != "priority" and self.scheduler_kind.pops_last_admitted
        return pops_last and (adm is None or (not adm.is_active and adm.spf_aging_s is None))

    def _doomed_cycles(
        self, replica: Replica, next_arrival_s: float, intake: Intake | None = None
    ) -> bool:
        """Fast mode: a full pool's doomed re-admissions of a long queue head, whole cycles at
        once (``engine/thrash.py``), up to the replica's next arrival (given ``intake``,
        ``_pass_arrivals``: on past it, routing it as the loop does)."""
        if self.cfg.max_concurrency is not None and len(self.replicas) > 1:
            return False  # another replica's finish may release a held request
        waiting = replica.waiting
        # ``len(running)`` and ``len(waiting)`` without their ``__len__`` calls (per admission)
        leftover = replica.cfg.max_num_batched_tokens - replica.running._size
        if not waiting.tokens or waiting.peek()[1] <= leftover:
            return False  # the head's prompt fits one chunk: no cycle (``thrash._applies``)
        if self.own_arrivals is not None:
            next_arrival_s = self.own_arrivals.next_arrival_s(replica.index)
        return doomed_cycles(replica, next_arrival_s, intake)

    def _pass_arrivals(self, now: float) -> float | None:
        """For a doomed pass at ``now`` (``thrashrun._past_arrival``; set by ``run`` where
        ``_advance`` collects and routes by itself): ``_advance``'s arrivals when one is due
        then, and the next one's time, as ``_advance`` passes it on; None if none is due."""
        next_arrival_s = self._next_arrival_s()
        if not next_arrival_s <= now + 1e-9 * (now + 1.0):  # ``same_time_s``
            return None
        return self._arrive_due(next_arrival_s, now)

    def _step_or_wait(self, replica: Replica, next_arrival_s: float) -> None:
        """One step; with KV tiers, a replica that ran nothing waits for its next transfer
        event (a reload landing, the writes draining), or the next arrival if sooner."""
        steps, now = replica.num_steps, replica.now
        replica.step()
        offload = replica.offload
        if offload is None or replica.num_steps != steps or replica.now != now:
            return
        event = offload.next_event_s(replica.now)
        if event is not None:
            replica.now = min(event, max(next_arrival_s, replica.now))

    def _collect(self, replica: Replica) -> int:
        done = len(replica.on_finish)
        if done:
            self.in_flight -= done
            self.num_done += done
            if self.cfg.max_concurrency is not None:
                for _ in range(done):
                    insort(self.finish_times, replica.now)
            replica.on_finish.clear()
        return done

    def run(
        self,
        on_progress: Callable[[int], None] | None = None,
        check: Callable[[Replica], None] | None = None,
    ) -> SimulationResult:
        for queued in self.replicas:  # a caller may have queued requests by hand
            self._note_clock(queued)
        # A fused advance may collect finishes itself where the loop would only collect them
        # and move on: no client concurrency limit (its next send waits for finishes) and no
        # per-advance ``check``.
        self._collects_finishes = self.cfg.max_concurrency is None and check is None
        self._on_progress = on_progress
        fused = self._fuse_advances and self._collects_finishes
        self._intake = self._chain_arrivals if fused else None
        self._pass_intake = self._pass_arrivals if fused and PASS_PAST_ARRIVALS else None
        while True:
            arrival = self._next_arrival_s()
            replica = self._earliest_busy()
            if replica is None and math.isinf(arrival):
                break
            if replica is None or arrival <= replica.now + same_time_s(replica.now):
                before = self.num_done
                self._arrive(arrival)
                if on_progress and self.num_done > before:
                    on_progress(self.num_done - before)
                continue
            steps_before, now_before = replica.num_steps, replica.now
            self._advance(replica, arrival)
            self._note_clock(replica)
            if (
                replica.num_steps == steps_before
                and replica.now == now_before
                and not len(replica.running)
                and len(replica.waiting)
            ):
                self._stuck(replica)
            if check is not None:  # it may read the chains' held-back victims' records
                replica.running.rows.flush_victims()
                check(replica)
            done = self._collect(replica)
            if on_progress and done:
                on_progress(done)
        return self._result()

    def _stuck(self, replica: Replica) -> None:
        """Nothing runs and the queue head can never be admitted: say why instead of looping."""
        rid, tokens = replica.waiting.peek()
        raise InferplanError(
            f"request {rid} ({tokens} prompt tokens, {int(self.workload.output_tokens[rid])} "
            f"output) can never be scheduled: it needs more KV blocks than the "
            f"{replica.cfg.num_blocks} of a replica or more tokens than the step budget "
            f"({replica.cfg.max_num_batched_tokens}); lower --max-model-len or add memory"
        )

    def _note_clock(self, replica: Replica) -> None:
        """Record ``replica``'s clock (inf while it has no work) after its clock or work
        changed: only the replica that advanced, or that an arrival was routed to, changes."""
        self._clocks[replica.index] = replica.now if replica.has_work else math.inf

    def _earliest_busy(self) -> Replica | None:
        """The replica with work whose clock is earliest (ties to the lowest index)."""
        clocks = self._clocks
        earliest = min(clocks)
        if earliest == math.inf:
            return None
        # Clocks within rounding of each other are equal: the lowest index goes first.
        bound = earliest + same_time_s(earliest)
        for index, now in enumerate(clocks):
            if now <= bound:
                return self.replicas[index]
        raise AssertionError("the earliest clock is within its own bound")

    def _result(self) -> SimulationResult:
        """What the run returns (``run_result.py``)."""
        return run_result(self.replicas, self.records, self.itl, self.time_offset_s, self.ledger)
