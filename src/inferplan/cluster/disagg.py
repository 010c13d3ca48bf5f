"""Prefill/decode disaggregation: a prefill pool, a KV link, a decode pool (DESIGN §3, 3c).

A request runs in three stages, each on its own resources:

1. **Prefill pool** (its own GPUs, memory plan and step-time model): the request is routed to a
   prefill replica and scheduled there by vLLM v1's scheduler with ``max_tokens = 1``, as vLLM's
   P/D proxy and SGLang's prefill servers do; the prefill's final chunk samples the first token.
   Its KV blocks are freed when the prefill ends (the transfer is assumed to read them before
   they are reused: optimistic for the prefill pool's memory).
2. **KV transfer** (``cluster/kv_transfer.py``): the prompt's KV bytes (``prompt_kv_bytes``:
   ``kv_bytes_per_token x prompt`` for full attention; a sliding-window layer sends only its
   window) over the link between the pools, first come first served in the order prefills end.
3. **Decode pool**: the request arrives at a decode replica when its last KV byte does, and is
   admitted by vLLM v1's scheduler with its prompt already computed (``KvArrivedScheduler``):
   its KV blocks (prompt + the first token's slot) are allocated at admission, not earlier, and
   it decodes from its second token on. A request preempted on the decode pool recomputes its
   prompt and output there (vLLM v1 recomputes; nothing goes back to the prefill pool).

**Prefix caching** (vLLM v1's, on by default) runs on both pools (``memory/prefixcache.py``).
A prefill replica caches the prompt blocks it computed, so a hit shortens the prefill's
compute. A decode replica does what vLLM's NIXL connector does on a decode instance
(``nixl_connector.py``: ``get_num_new_matched_tokens`` asks for the prompt tokens past the
local hit, ``update_state_after_alloc`` pulls into the unhashed blocks only, and the scheduler
caches the received blocks in ``_update_waiting_for_remote_kv``): at admission the prompt's
blocks its own cache holds are mapped, not allocated, and the received prompt's full blocks
are cached (``KvArrivedScheduler._map_received``); generated blocks too where the hashes cover
them (session traces). The link still ships each whole prompt's KV: in vLLM the decode side
pulls after its admission, so the bytes depend on its cache at that moment, while here the
transfer precedes admission (the stages run in order, below). With shared prefixes the link's
load is therefore an upper bound.

**TTFT** follows SGLang's disaggregated mode: the client streams from the decode server, which
returns the prefill's first token once the KV transfer has completed, so the first token counts
at the transfer's end (prefill + transfer wait + wire time). The gap to the second token counts
the wait for decode admission. A request asking for one token ends on the prefill pool (nothing
to decode; no transfer). A request longer than the decode pool's ``max_model_len`` is refused at
arrival (SGLang's router sends it to both servers, and the decode server's frontend refuses it).

The stages are simulated one after the other: the prefill pool does not depend on the decode
pool (no back-pressure: SGLang bounds decode pre-allocation by the decode pool's free KV, which
is not modelled; prefill requests never wait for decode memory), so its run fixes each
request's transfer start, the link fixes each arrival at the decode pool, and the decode pool
replays those arrivals. A client-side concurrency limit would couple the stages and is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from inferplan.cluster.kv_transfer import KvLink, KvTransferQueue
from inferplan.engine.replica import Replica
from inferplan.engine.schedulers import Scheduler
from inferplan.engine.simsetup import records_for
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.errors import InferplanError
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.request import Workload


class KvArrivedScheduler(Scheduler):
    """vLLM v1's scheduler on a decode instance. A request never scheduled here arrives with
    its prompt's KV: admission allocates the blocks of prompt + 1 tokens (the first output
    token's KV is written by the next step) and schedules one decode token; a request
    preempted here re-enters as vLLM v1's recompute does (the base class)."""

    vector_step = False  # the vector step admits rows with nothing computed

    def _kv_arrived(self, rid: int) -> bool:
        return math.isnan(self.records.first_scheduled_s[rid])

    def head_chunk(self, budget: int, available: int) -> int | None:
        rid, tokens = self.waiting.peek()
        if not self._kv_arrived(rid):
            return super().head_chunk(budget, available)
        if self.offload is not None and self.offload.holds_back(rid):
            return None  # backpressure: the tiers' write link is saturated
        _, shared = self._local_hit(rid, tokens)  # running requests' blocks are not allocated
        fits = budget >= 1 and self.pool.blocks_for_one(tokens + 1) - shared <= available
        return 1 if fits else None

    def _local_hit(self, rid: int, tokens: int) -> tuple[int, int]:
        """Tokens of a received prompt this replica's HBM prefix cache holds, and the blocks of
        them running requests map (``prefix_hit`` without the tiers: the KV came over the
        link)."""
        cache = self.pool.cache
        hits, shared, _ = self.hbm_hit_entries(rid, tokens)
        if cache is None or hits == 0:
            return 0, shared
        return hits * cache.entry_kv_blocks * self.pool.block_size, shared

    def _map_received(self, rid: int, tokens: int, held: int) -> None:
        """Give a request whose KV arrived its ``held`` blocks. With prefix caching, as vLLM's
        NIXL connector does on a decode instance: the prompt's blocks this replica's cache
        holds are mapped (a local hit), only the others are allocated (and pulled), and every
        full prompt block is cached once received (``Scheduler._update_waiting_for_remote_kv``;
        the last one when the first decode step fills it, which follows at once)."""
        pool, cache, rec = self.pool, self.pool.cache, self.records
        if cache is None:
            pool.free -= held
            return
        entry_tokens = cache.entry_kv_blocks * pool.block_size
        hit, _ = self._local_hit(rid, tokens)
        entries = hit // entry_tokens
        pool.free -= cache.acquire(rid, entries)
        pool.free -= held - entries * cache.entry_blocks
        rec.cached_tokens[rid] += hit  # type: ignore[index]
        rec.prefix_queried_tokens[rid] += tokens  # type: ignore[index]
        cache.cached_tokens += hit
        cache.queried_tokens += tokens
        cache.register(rid, tokens // entry_tokens)
        cache.evict_to(pool.free)

    def admit_waiting(self, budget: int, sched: list[int], now: float) -> None:
        """vLLM v1's waiting pass; a request whose KV arrived joins with its prompt computed,
        its last-token clock at its arrival (the first token reached this server then)."""
        run, waiting, pool, rec = self.running, self.waiting, self.pool, self.records
        while len(waiting) and len(run) < self.cfg.max_num_seqs and budget > 0:
            chunk = self.head_chunk(budget, self.available_blocks())
            if chunk is None:
                break
            rid, tokens = waiting.peek()
            waiting.pop()
            target = int(self.target_tokens[rid])
            if self._kv_arrived(rid):
                held = pool.blocks_for_one(tokens + 1)
                self._map_received(rid, tokens, held)
                rec.first_scheduled_s[rid] = now
                arrived = float(rec.arrival_s[rid])
                run.append(rid, tokens, tokens + 1, 1, target, held, arrived)
            elif not self.admit_popped(rid, tokens, chunk, now):  # preempted here: the base's
                continue  # its KV comes back from a tier first
            sched.append(chunk)
            budget -= chunk


@dataclass(frozen=True)
class Pool:
    """One pool's replicas: scheduler limits and run knobs, and their step-time model."""

    name: str
    config: SimulationConfig
    model: StepTimeModel


@dataclass
class DisaggResult:
    """The combined per-request records (times from the first arrival) and each stage."""

    records: RequestRecords
    itl: ItlHistogram
    prefill: SimulationResult
    decode: SimulationResult
    link: KvTransferQueue
    duration_s: float
    time_offset_s: float


def _subset(
    workload: Workload,
    ids: np.ndarray,
    arrival_s: np.ndarray,
    output: np.ndarray,
    *,
    keep_hashes: bool = False,
    decodes: bool = False,
) -> Workload:
    """Rows ``ids`` of a workload, with new arrival times and output lengths (and their
    prompt-block hashes if ``keep_hashes``: the pools' prefix caches use them; only where the
    pool ``decodes`` do hashes of generated blocks count)."""
    hashes = workload.prefix_hashes if keep_hashes else None
    return Workload(
        arrival_s=arrival_s,
        input_tokens=workload.input_tokens[ids],
        output_tokens=output,
        class_ids=workload.class_ids[ids],
        class_names=workload.class_names,
        priorities=None if workload.priorities is None else workload.priorities[ids],
        prefix_hashes=None if hashes is None else tuple(hashes[i] for i in ids.tolist()),
        prefix_block_tokens=None if hashes is None else workload.prefix_block_tokens,
        source=workload.source,
        prefix_hashes_cover_output=decodes and workload.prefix_hashes_cover_output,
    )


def _stage_times(result: SimulationResult, origin_s: float) -> dict[str, np.ndarray]:
    """A stage's times on the combined clock (seconds after the first arrival), from a stage
    whose workload's clock starts at ``origin_s`` on it (the trace's first arrival for the
    prefill stage; 0 for the decode stage, whose arrivals are on the combined clock)."""
    shift = result.time_offset_s - origin_s
    rec = result.records
    return {
        name: getattr(rec, name) + shift
        for name in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s")
    }


def simulate_disaggregated(
    workload: Workload,
    prefill: Pool,
    decode: Pool,
    link: KvLink,
    prompt_kv_bytes: Callable[[int], float],
    check: Callable[[Replica], None] | None = None,
) -> DisaggResult:
    """Run ``workload`` through the prefill pool, the KV link and the decode pool
    (``check``: called after every step of either pool, for tests' invariants)."""
    for pool in (prefill, decode):
        if pool.config.max_concurrency is not None:
            raise InferplanError(
                "--max-concurrency: a client-side limit couples the prefill and decode pools; "
                "not supported with --disaggregate"
            )
    n = workload.num_requests
    t0 = float(workload.arrival_s[0]) if n else 0.0
    rec = _empty_records(workload, t0)
    total = workload.input_tokens + workload.output_tokens
    accepted = np.flatnonzero(total <= decode.config.max_model_len)

    # 1. Prefill: every accepted request, one output token.
    ones = np.ones(len(accepted), np.int64)
    p_wl = _subset(workload, accepted, workload.arrival_s[accepted], ones, keep_hashes=True)
    p_res = Simulation(p_wl, prefill.config, prefill.model).run(check=check)
    rec = _with_prefix_cache(rec, accepted, p_res.records)
    p_rec, p_times = p_res.records, _merge_prefill(rec, accepted, p_res, t0)

    # 2. KV transfer, in the order prefills end (ties: request order).
    done = p_rec.status == int(RequestStatus.COMPLETED)
    moving = done & (workload.output_tokens[accepted] > 1)
    rows = np.flatnonzero(moving)
    rows = rows[np.argsort(p_times["finish_s"][rows], kind="stable")]
    ids = accepted[rows]
    queue = KvTransferQueue(link)
    arrived = np.array(
        [
            queue.submit(
                float(p_times["finish_s"][row]),
                prompt_kv_bytes(int(workload.input_tokens[rid])),
            )
            for row, rid in zip(rows, ids, strict=True)
        ],
        dtype=np.float64,
    )
    rec.status[ids] = int(RequestStatus.REJECTED)  # until the decode pool completes them

    # 3. Decode: arrivals when the KV has arrived.
    d_wl = _subset(
        workload, ids, arrived, workload.output_tokens[ids], keep_hashes=True, decodes=True
    )
    d_res = _run_decode(d_wl, decode, check)
    _merge_decode(rec, ids, arrived, d_res)
    ends = rec.finish_s[np.isfinite(rec.finish_s)]
    duration = float(ends.max()) if len(ends) else 0.0
    return DisaggResult(rec, d_res.itl, p_res, d_res, queue, duration, t0)


def _empty_records(workload: Workload, t0: float) -> RequestRecords:
    """Every request's row, rejected until a stage completes it."""
    rec = records_for(workload, t0)
    rec.status[:] = int(RequestStatus.REJECTED)
    return rec


def _with_prefix_cache(
    rec: RequestRecords, accepted: np.ndarray, p_rec: RequestRecords
) -> RequestRecords:
    """The combined records with the prefill pool's prefix-cache counts, when it cached."""
    if p_rec.cached_tokens is None or p_rec.prefix_queried_tokens is None:
        return rec
    cached = np.zeros(rec.num_requests, dtype=np.int64)
    queried = np.zeros(rec.num_requests, dtype=np.int64)
    cached[accepted] = p_rec.cached_tokens
    queried[accepted] = p_rec.prefix_queried_tokens
    return replace(rec, cached_tokens=cached, prefix_queried_tokens=queried)


def _merge_prefill(
    rec: RequestRecords, accepted: np.ndarray, p_res: SimulationResult, t0: float
) -> dict[str, np.ndarray]:
    """The prefill stage's outcome into the combined records; its times on that clock."""
    p_rec, p_times = p_res.records, _stage_times(p_res, t0)
    for name in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s"):
        getattr(rec, name)[accepted] = p_times[name]
    rec.status[accepted] = p_rec.status
    rec.output_tokens[accepted] = p_rec.output_tokens
    for name in ("num_preemptions", "recomputed_tokens", "swapped_bytes"):
        getattr(rec, name)[accepted] += getattr(p_rec, name)
    return p_times


def _run_decode(
    d_wl: Workload, decode: Pool, check: Callable[[Replica], None] | None = None
) -> SimulationResult:
    """The decode pool's replicas with ``KvArrivedScheduler`` in place of vLLM v1's."""
    d_sim = Simulation(d_wl, decode.config, decode.model)
    for replica in d_sim.replicas:
        replica.scheduler = KvArrivedScheduler(
            replica.cfg,
            replica.running,
            replica.waiting,
            replica.swapped,
            replica.pool,
            replica.records,
            replica.prompt_tokens,
        )
        replica.scheduler.offload = replica.offload  # KV tiers of the decode pool's replicas
    return d_sim.run(check=check)


def _merge_decode(
    rec: RequestRecords, ids: np.ndarray, arrived: np.ndarray, d_res: SimulationResult
) -> None:
    """The decode stage's outcome into the combined records: the first token counts when the
    KV (and the token with it) reached the decode server; the rest is the decode pool's."""
    d_rec, d_times = d_res.records, _stage_times(d_res, 0.0)
    completed = d_rec.status == int(RequestStatus.COMPLETED)
    rec.status[ids] = d_rec.status
    rec.first_token_s[ids] = np.where(completed, arrived, np.nan)
    rec.finish_s[ids] = d_times["finish_s"]
    rec.output_tokens[ids] = d_rec.output_tokens
    rec.max_itl_s[ids] = d_rec.max_itl_s
    for name in ("num_preemptions", "recomputed_tokens", "swapped_bytes"):
        getattr(rec, name)[ids] += getattr(d_rec, name)
