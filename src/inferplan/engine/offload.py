"""KV offload to tiers below HBM, reload on resume, and backpressure (one replica's component).

The tiers are plain data (``memory/tiers.py``); this module owns what is in them and the link
that moves KV to and from them. Model:

- **What goes down.** A sequence preempted by vLLM v1's running pass (recompute mode) has its
  computed KV written to the fastest tier (by read bandwidth) with room for it, instead of being
  dropped; if no tier has room, or recomputing is faster (below), it is recomputed as before.
  The KV of running sequences never leaves HBM. With prefix caching, a cached entry that vLLM's
  LRU evicts (its blocks reused) is written down too, under the same rule, and a tier makes
  room for a sequence by dropping its oldest entry copies (they are only a cache).
- **The link.** One write queue and one read queue per replica (the GPU's host link is full
  duplex), each first come first served (Lindley's recursion, as ``cluster/kv_transfer.py``):
  a transfer of ``B`` bytes to tier ``t`` takes ``B / bandwidth`` once the queue reaches it;
  writes run at the tier's write bandwidth capped by the eviction cap
  (``--kv-eviction-bandwidth``). Tiers share the queues (every tier sits behind the GPU's PCIe
  link).
- **Writes hold HBM.** The victim's blocks return to the pool at once (the scheduler's
  bookkeeping is vLLM's), but a block can only be overwritten once its copy is out: the blocks
  of writes still in flight are *unsafe*, drained linearly over each write's transfer. A step
  that hands out unsafe blocks (the pool's free count after scheduling is below the unsafe
  count) ends no earlier than when enough of them are written. The invariant: at every step
  start, unsafe blocks <= free blocks.
- **Recompute or move.** A victim is written only where moving it is faster than recomputing
  it: its write (behind the queue, at the capped bandwidth) plus its read take less than a
  prefill of its tokens alone (the step-time model's). A slow or capped link therefore cannot
  make the steps that reuse a victim's blocks wait longer than the recomputation it saves.
- **Reload.** A request whose KV is in a tier (its preempted sequence, or prompt entries after
  those cached in HBM) is admitted like any other (the same admission test, those tokens
  counting as a hit), gets its blocks, and waits off the batch until its
  read lands (vLLM v1's asynchronous KV-connector loads: ``WAITING_FOR_REMOTE_KVS``), then joins
  the running set with its KV computed. A read starts no earlier than its write landed. Where
  an engine does not overlap transfers with compute (``overlaps_compute`` False), a step that
  waits for writes or starts reads is lengthened by them instead.
- **Backpressure.** Admission only takes blocks whose copy out is done (running rows may take
  the others, and their step waits). While the write queue holds more than the link drains in
  one step (its backlog in seconds exceeds a decode step of the running batch), the link is
  *saturated* and new requests are not admitted (the admission test says no); requests whose
  KV is in a tier still are. Running requests keep their pace: the link's saturation slows
  admission upstream rather than every step.

Time is the replica's own clock (a step's start while the scheduler runs), so exact and fast
mode agree as long as the closed-form stretch runs only while the offload is idle (``is_idle``:
no write or read in flight) and stops before a step that would evict a cached free block
(whose copy down is timed at that step).
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplan.memory.tiers import OffloadConfig
from inferplan.metrics.stats import json_number
from inferplan.perf.batch import StepBatch

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica
    from inferplan.memory.prefixcache import PrefixCache

SERIES_BINS = 50  # link utilization series: intervals over the run


@dataclass(frozen=True)
class StoredKv:
    """A preempted sequence's KV in a tier: ``blocks`` pool blocks of ``computed`` tokens."""

    tier: int
    blocks: int
    computed: int
    landed_s: float  # when its write completes


@dataclass(frozen=True)
class LoadingKv:
    """An admitted request waiting off the batch for its KV to come back."""

    request_id: int
    computed: int
    tokens: int
    held_blocks: int  # HBM blocks it was given at admission
    tier: int
    tier_blocks: int  # tier blocks it frees when it lands (0: a prefix copy, which stays)
    ready_s: float
    register_entries: int = 0  # prefix entries it caches when it lands


class KvOffload:
    """A replica's tiers, the KV stored in them, and the write and read queues."""

    def __init__(self, cfg: OffloadConfig, replica: Replica) -> None:
        self.cfg, self.replica = cfg, replica
        tiers = cfg.tiers
        self.capacity_blocks = [cfg.capacity_blocks(t) for t in tiers]
        # The fastest tier first (read bandwidth), ties in the order given.
        self.order = sorted(range(len(tiers)), key=lambda i: -tiers[i].read_bytes_s)
        self.used_blocks = [0] * len(tiers)
        self.peak_blocks = [0] * len(tiers)
        self.written_bytes = [0.0] * len(tiers)
        self.read_bytes = [0.0] * len(tiers)
        self.stored: dict[int, StoredKv] = {}
        # Evicted prefix-cache entries kept in a tier: hash -> (tier, landed_s), oldest first.
        self.prefix: OrderedDict[int, tuple[int, float]] = OrderedDict()
        self.cache: PrefixCache | None = None
        self.entry_tokens = 0
        self.num_prefix_offloaded = 0
        self.num_prefix_reloaded = 0
        self.loading: list[LoadingKv] = []
        self.pending_writes: deque[tuple[float, float, int]] = deque()  # start, end, blocks
        self.write_free_s = 0.0
        self.read_free_s = 0.0
        self.write_busy: list[tuple[float, float]] = []
        self.read_busy: list[tuple[float, float]] = []
        self.drain_window_s = 0.0  # a decode step of the batch at this step's start
        self.step_reads_end_s = 0.0  # latest read begun this step (non-overlapping engines)
        self.num_offloaded = 0
        self.num_not_offloaded = 0  # preempted with every tier full: recomputed
        self.num_recompute_cheaper = 0  # moving the KV would take longer: recomputed
        self.num_reloaded = 0
        self.reloaded_tokens = 0  # recompute avoided
        self.backpressure_s = 0.0  # step time during which admission was held back
        self._held_back = False

    # ---- state ------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """The replica's clock (a step's start while it is scheduled)."""
        return self.replica.now

    def is_idle(self, now: float) -> bool:
        """No transfer in flight and nobody waiting for one. A closed-form stretch must also
        not evict a cached free block (its copy would be timed at the stretch's start instead
        of at the step that evicts it): the stretch stops before the step whose new blocks
        reach the cached-free ones (``evictable_blocks``, ``DecodeStretches.stretch_steps``)."""
        return not self.loading and self.write_free_s <= now and self.read_free_s <= now

    def evictable_blocks(self) -> int:
        """Cached free blocks whose eviction would be written to a tier (0: no prefix cache)."""
        return 0 if self.cache is None else self.cache.lru_blocks

    def next_event_s(self, now: float) -> float | None:
        """When something changes by itself after ``now``: a read lands or the writes drain."""
        times = [x.ready_s for x in self.loading if x.ready_s > now]
        if self.write_free_s > now:
            times.append(self.write_free_s)
        return min(times) if times else None

    def loading_blocks(self) -> int:
        return sum(x.held_blocks for x in self.loading)

    def unsafe_blocks(self, t: float) -> float:
        """Blocks back in the pool whose copy out is still in flight at ``t``."""
        total = 0.0
        for start, end, blocks in self.pending_writes:
            if end > t:
                total += blocks if t <= start else blocks * (end - t) / (end - start)
        return total

    def safe_free(self, free_blocks: int) -> int:
        """Free blocks an admission may take at this step's start: those already written."""
        return free_blocks - math.ceil(self.unsafe_blocks(self.now) - 1e-9)

    # ---- the step's verbs ---------------------------------------------------------------------

    def begin_step(self, replica: Replica) -> None:
        """At a step's start: forget finished writes, move landed loads into the batch."""
        now = replica.now
        self._held_back = False
        self.step_reads_end_s = now
        while self.pending_writes and self.pending_writes[0][1] <= now:
            self.pending_writes.popleft()
        run, cfg = replica.running, replica.cfg
        keep: list[LoadingKv] = []
        for x in self.loading:
            if x.ready_s > now or len(run) >= cfg.max_num_seqs:
                keep.append(x)
                continue
            generated = int(x.tokens - replica.prompt_tokens[x.request_id])
            target = int(replica.target_tokens[x.request_id])
            run.append(x.request_id, x.computed, x.tokens, generated, target, x.held_blocks, now)
            self.used_blocks[x.tier] -= x.tier_blocks
            if self.cache is not None and x.register_entries:
                self.cache.register(x.request_id, x.register_entries)
                self.cache.evict_to(replica.pool.free)
        self.loading = keep
        n = len(run)
        if n:
            a, b, _ = replica.model.decode_line(n, int(run.num_computed.sum()) + n)
            self.drain_window_s = a + b * (int(run.num_computed.sum()) + n)
        else:
            self.drain_window_s = 0.0

    def is_saturated(self) -> bool:
        """The write queue holds more than the link drains in one decode step of the running
        batch (nothing running: nothing to protect)."""
        return bool(self.drain_window_s) and self.write_free_s - self.now > self.drain_window_s

    def holds_back(self, request_id: int) -> bool:
        """Backpressure: a request whose KV is not in a tier waits while the link is
        saturated."""
        if request_id in self.stored or not self.is_saturated():
            return False
        self._held_back = True
        return True

    def store(self, request_id: int, computed: int, blocks: int) -> bool:
        """A preempted sequence's ``blocks`` of ``computed`` tokens go to the fastest tier with
        room; False (recompute) when none has room, when moving it (its write behind the queue
        at the capped bandwidth, then its read) would take longer than recomputing it (a
        prefill of its tokens), or when there is nothing to keep."""
        if computed <= 0 or blocks <= 0:
            return False
        tier = self._place(blocks, computed)
        if tier is None:
            return False
        end = self._write(tier, blocks)
        self.stored[request_id] = StoredKv(tier, blocks, computed, end)
        self.num_offloaded += 1
        return True

    def _place(self, blocks: int, tokens: int) -> int | None:
        """The fastest tier that can take ``blocks`` (dropping its oldest prefix copies if that
        makes room: they are only a cache) and where moving them beats recomputing their
        ``tokens``; None (counted) if there is none."""
        has_room = False
        for i in self.order:
            spare = self.capacity_blocks[i] - self.used_blocks[i]
            mine = (
                [h for h, (tier, _) in self.prefix.items() if tier == i] if spare < blocks else []
            )
            if spare + len(mine) * self.cache_entry_blocks < blocks:
                continue
            has_room = True
            if not self._worth_moving(i, blocks, tokens):
                continue
            for h in mine:  # oldest first
                if self.capacity_blocks[i] - self.used_blocks[i] >= blocks:
                    break
                del self.prefix[h]
                self.used_blocks[i] -= self.cache_entry_blocks
            return i
        if has_room:
            self.num_recompute_cheaper += 1
        else:
            self.num_not_offloaded += 1
        return None

    def _worth_moving(self, tier: int, blocks: int, tokens: int) -> bool:
        """Writing ``blocks`` to ``tier`` behind the queue, at the capped bandwidth, and reading
        them back take less than a prefill of their ``tokens`` alone."""
        num_bytes = blocks * self.cfg.block_bytes
        start = max(self.now, self.write_free_s)
        end = start + num_bytes / self.cfg.write_bytes_s(self.cfg.tiers[tier])
        read_s = num_bytes / self.cfg.tiers[tier].read_bytes_s
        return end - self.now + read_s < self._recompute_s(tokens)

    def _write(self, tier: int, blocks: int) -> float:
        """Queue the write of ``blocks`` to ``tier``; when it lands."""
        num_bytes = blocks * self.cfg.block_bytes
        start = max(self.now, self.write_free_s)
        end = start + num_bytes / self.cfg.write_bytes_s(self.cfg.tiers[tier])
        self.write_free_s = end
        self.pending_writes.append((start, end, blocks))
        self.write_busy.append((start, end))
        self.used_blocks[tier] += blocks
        self.peak_blocks[tier] = max(self.peak_blocks[tier], self.used_blocks[tier])
        self.written_bytes[tier] += num_bytes
        return end

    # ---- prefix-cache entries ------------------------------------------------------------------

    @property
    def cache_entry_blocks(self) -> int:
        return 0 if self.cache is None else self.cache.entry_blocks

    def attach_cache(self, cache: PrefixCache, block_size: int) -> None:
        """Keep copies of the entries ``cache`` evicts (vLLM v1's LRU of freed blocks)."""
        self.cache = cache
        self.entry_tokens = cache.entry_kv_blocks * block_size
        cache.on_evict = self.store_prefix

    def store_prefix(self, entry_hash: int) -> None:
        """An evicted prefix entry goes to the fastest tier with room, if moving it beats
        recomputing it (a prefill of its tokens alone: a lower bound)."""
        blocks = self.cache_entry_blocks
        if entry_hash in self.prefix:  # a copy is already down there
            self.prefix.move_to_end(entry_hash)
            return
        counts = self.num_recompute_cheaper, self.num_not_offloaded
        tier = self._place(blocks, self.entry_tokens)
        self.num_recompute_cheaper, self.num_not_offloaded = counts  # those count victims
        if tier is not None:
            self.prefix[entry_hash] = (tier, self._write(tier, blocks))
            self.num_prefix_offloaded += 1

    def prefix_tier_entries(self, hashes: tuple[int, ...]) -> int:
        """How many of ``hashes``, from the first, a tier holds."""
        count = 0
        for h in hashes:
            if h not in self.prefix:
                break
            count += 1
        return count

    def begin_prefix_load(
        self, request_id: int, hashes: tuple[int, ...], loaded: tuple[int, int], held: int
    ) -> None:
        """The request was admitted with ``held`` blocks, the prefix entries ``hashes`` coming
        back from their tiers (``loaded``: its computed tokens then, and its tokens); it caches
        its entries up to ``register_entries`` when they land."""
        computed, tokens = loaded
        end = self.now
        for h in hashes:
            tier, landed = self.prefix[h]
            self.prefix.move_to_end(h)
            end = self._read(tier, self.cache_entry_blocks, landed)
        entries = min(computed, int(self.replica.prompt_tokens[request_id])) // self.entry_tokens
        self.loading.append(
            LoadingKv(request_id, computed, tokens, held, 0, 0, end, register_entries=entries)
        )
        self.num_prefix_reloaded += len(hashes)
        self.reloaded_tokens += len(hashes) * self.entry_tokens

    def _read(self, tier: int, blocks: int, landed_s: float) -> float:
        num_bytes = blocks * self.cfg.block_bytes
        start = max(self.now, self.read_free_s, landed_s)
        end = start + num_bytes / self.cfg.tiers[tier].read_bytes_s
        self.read_free_s = end
        self.read_busy.append((start, end))
        self.read_bytes[tier] += num_bytes
        self.step_reads_end_s = max(self.step_reads_end_s, end)
        return end

    def _recompute_s(self, tokens: int) -> float:
        """A prefill of ``tokens`` alone: what recomputing a victim's KV costs."""
        batch = StepBatch(
            prefill_tokens=tokens,
            prefill_attention_pairs=tokens * (tokens + 1) / 2,
            num_prefill_seqs=1,
        )
        return self.replica.model.step_time(batch).total_s

    def hit_tokens(self, request_id: int, tokens: int) -> int | None:
        """Tokens of the request's KV a reload restores (None: nothing stored)."""
        entry = self.stored.get(request_id)
        return None if entry is None else min(entry.computed, tokens - 1)

    def begin_load(
        self, request_id: int, loaded: tuple[int, int], held_blocks: int, in_hbm_tokens: int = 0
    ) -> None:
        """The request was admitted with ``held_blocks`` (``loaded``: its computed tokens once
        back, and its tokens): read its KV back, less the first ``in_hbm_tokens`` that the
        prefix cache still holds (whole blocks); its prompt entries are cached when it lands."""
        computed, tokens = loaded
        entry = self.stored.pop(request_id)
        skip = in_hbm_tokens // self.replica.cfg.block_size
        end = self._read(entry.tier, max(entry.blocks - skip, 0), entry.landed_s)
        entries = 0
        if self.cache is not None:
            prompt = int(self.replica.prompt_tokens[request_id])
            entries = min(computed, prompt) // self.entry_tokens
        self.loading.append(
            LoadingKv(
                request_id, computed, tokens, held_blocks, entry.tier, entry.blocks, end, entries
            )
        )
        self.num_reloaded += 1
        self.reloaded_tokens += computed - in_hbm_tokens

    def write_wait_s(self, now: float, free_blocks: int) -> float:
        """How long after ``now`` until the unsafe blocks fit in ``free_blocks`` (every block
        handed out has been written). Writes are FIFO and back to back, so the unsafe count
        falls piecewise linearly: find the write during which it crosses ``free_blocks``."""
        if self.unsafe_blocks(now) <= free_blocks:
            return 0.0
        for start, end, _ in self.pending_writes:
            if end <= now:
                continue
            after = self.unsafe_blocks(end)
            if after <= free_blocks:
                at_start = self.unsafe_blocks(max(start, now))
                t0 = max(start, now)
                # Linear on [t0, end]: from at_start down to after.
                frac = (at_start - free_blocks) / (at_start - after) if at_start > after else 1.0
                return t0 + frac * (end - t0) - now
        return self.write_free_s - now

    def step_s(self, compute_s: float, free_blocks: int) -> float:
        """A step's duration: its compute beside (or, not overlapping, after) the writes it
        waits for and the reads it started."""
        wait_s = self.write_wait_s(self.now, free_blocks)
        if self.cfg.overlaps_compute:
            duration = max(compute_s, wait_s)
        else:
            duration = compute_s + max(wait_s, self.step_reads_end_s - self.now)
        self.end_step(duration)
        return duration

    def end_step(self, duration_s: float) -> None:
        if self._held_back:
            self.backpressure_s += duration_s

    # ---- checks and report --------------------------------------------------------------------

    def check(self, free_blocks: int, now: float) -> None:
        """Tier blocks are the stored and loading sequences'; writes never outrun the pool."""
        for i, used in enumerate(self.used_blocks):
            mine = sum(e.blocks for e in self.stored.values() if e.tier == i)
            mine += sum(x.tier_blocks for x in self.loading if x.tier == i)
            mine += self.cache_entry_blocks * sum(t == i for t, _ in self.prefix.values())
            assert used == mine, "tier blocks not conserved"
            assert 0 <= used <= self.capacity_blocks[i], "tier over capacity"
        assert not set(self.stored) & {x.request_id for x in self.loading}, "KV in two places"
        assert self.unsafe_blocks(now) <= free_blocks + 1e-6, "an unwritten block was reused"


def offload_summary(offloads: list[KvOffload], horizon_s: float) -> dict[str, Any]:
    """The ``kv_tiers`` JSON section: per tier bytes moved, recompute avoided per GB moved,
    backpressure, and link utilization (total and per interval), summed over replicas
    (utilization: their mean)."""
    first = offloads[0]
    tiers = []
    for i, spec in enumerate(first.cfg.tiers):
        tiers.append(
            {
                "name": spec.name,
                "capacity_bytes": json_number(spec.capacity_bytes),
                "read_bytes_s": json_number(spec.read_bytes_s),
                "write_bytes_s": json_number(first.cfg.write_bytes_s(spec)),
                "written_bytes": json_number(sum(o.written_bytes[i] for o in offloads)),
                "read_bytes": json_number(sum(o.read_bytes[i] for o in offloads)),
                "peak_used_bytes": json_number(
                    max(o.peak_blocks[i] for o in offloads) * first.cfg.block_bytes
                ),
            }
        )
    moved = 0.0  # a loop: mypyc's compiled ``sum`` of float sums expected an int
    for o in offloads:
        moved += sum(o.written_bytes, 0.0) + sum(o.read_bytes, 0.0)
    avoided = sum(o.reloaded_tokens for o in offloads)
    edges = np.linspace(0.0, horizon_s, SERIES_BINS + 1) if horizon_s > 0 else np.zeros(1)
    write = np.mean([_busy_fraction(o.write_busy, edges) for o in offloads], axis=0)
    read = np.mean([_busy_fraction(o.read_busy, edges) for o in offloads], axis=0)
    return {
        "tiers": tiers,
        "eviction_cap_bytes_s": first.cfg.eviction_cap_bytes_s,
        "num_offloaded": sum(o.num_offloaded for o in offloads),
        "num_not_offloaded": sum(o.num_not_offloaded for o in offloads),
        "num_not_offloaded_recompute_cheaper": sum(o.num_recompute_cheaper for o in offloads),
        "num_reloaded": sum(o.num_reloaded for o in offloads),
        "num_prefix_entries_offloaded": sum(o.num_prefix_offloaded for o in offloads),
        "num_prefix_entries_reloaded": sum(o.num_prefix_reloaded for o in offloads),
        "recompute_avoided_tokens": avoided,
        "recompute_avoided_tokens_per_gb": json_number(avoided / (moved / 1e9)) if moved else None,
        "backpressure_s": json_number(sum(o.backpressure_s for o in offloads)),
        "write_link_utilization": _utilization([o.write_busy for o in offloads], horizon_s),
        "read_link_utilization": _utilization([o.read_busy for o in offloads], horizon_s),
        "link_utilization_series": {
            "time_s": [json_number(t) for t in edges[:-1]],
            "write": [json_number(v) for v in np.atleast_1d(write)],
            "read": [json_number(v) for v in np.atleast_1d(read)],
        },
    }


def _utilization(busy: list[list[tuple[float, float]]], horizon_s: float) -> float | None:
    if horizon_s <= 0:
        return None
    total = [sum(min(e, horizon_s) - min(s, horizon_s) for s, e in b) for b in busy]
    return json_number(float(np.mean(total)) / horizon_s)


def _busy_fraction(busy: list[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """The busy fraction of each interval between ``edges`` (intervals do not overlap)."""
    out = np.zeros(max(len(edges) - 1, 0))
    if len(out) == 0:
        return out
    width = edges[1] - edges[0]
    for start, end in busy:
        lo = max(bisect.bisect_right(edges, start) - 1, 0)
        hi = min(bisect.bisect_left(edges, end), len(out))
        for b in range(lo, hi):
            overlap = min(end, edges[b + 1]) - max(start, edges[b])
            if overlap > 0:
                out[b] += overlap
    return out / width
