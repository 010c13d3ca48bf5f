"""Speculative decoding in the simulator: drafts scheduled, verified, accepted and emitted.

vLLM v1 (``vllm/v1/core/sched/scheduler.py``, ``kv_cache_manager.py``; ``docs/simulator.md``
has the summary and sources), one step of a running request with ``k`` speculative
tokens:

- **Scheduled tokens.** A decoding request is scheduled for its last sampled token plus its
  ``k`` drafts (``num_tokens_with_spec - num_computed_tokens = 1 + k``), against the token
  budget like any token; a budget that runs out trims the drafts. The position may not pass
  ``max_model_len - 1``. A prefill chunk has no drafts.
- **KV slots.** ``allocate_slots`` covers ``computed + scheduled + lookahead`` tokens (capped
  at ``max_model_len``), ``lookahead = k`` for EAGLE, EAGLE-3, MTP and draft models
  (``num_lookahead_tokens``), for every request the running pass schedules. A request the
  waiting pass admits (``num_computed_tokens == 0``) reserves no lookahead.
- **Acceptance.** The target verifies the drafts in one forward; the accepted prefix plus the
  bonus token are emitted together, and ``num_computed_tokens`` rolls back by the rejected
  drafts (their blocks stay allocated). Tokens past ``max_tokens`` are dropped.
- **Time.** The step is the target's forward with ``1 + k`` query rows per verifying sequence
  (``StepBatch.num_draft_tokens``) plus ``k`` drafter passes over the sequences that sampled
  (``perf/speculative.py``, the same numbers as ``inferplan roofline --speculative-method``).
  Rows whose drafts were trimmed are timed as chunks of their scheduled tokens.
- **Streaming.** The tokens of one step reach the client in one chunk: one ITL sample per
  step per request, as ``vllm bench serve`` counts chunks
  (``benchmarks/lib/endpoint_request_func.py``), and TPOT = (E2EL - TTFT) / (output - 1).

How many drafts a verify accepts is drawn, per request, from a named seeded stream
(``numpy.random.default_rng([seed, SPEC_STREAM, request id])``): draw ``j`` of request ``r`` is
the ``j``-th verify of ``r`` whatever the schedule, so fast and exact mode, routing and
preemption see the same acceptances. Each draft is accepted with probability ``a`` given the
ones before it were (Leviathan, Kalman & Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023, §3.1; the EAGLE papers' acceptance rate ``alpha``): the
accepted count is geometric truncated at the drafts verified, ``P(m >= j) = a^j``, drawn as
``floor(log(v) / log(a))`` with ``v`` uniform on ``(0, 1]``; its mean plus the bonus token is
``E = (1 - a^(k+1)) / (1 - a)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from inferplan.engine.running import RunningSet
from inferplan.errors import InferplanError
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.speculative import SpeculativeConfig, SpeculativeModel
from inferplan.perf.step_seconds import StepSeconds

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica
    from inferplan.engine.simulator import SimulationConfig

IntArray = npt.NDArray[np.int64]

SPEC_STREAM = 0x5BEC  # names the acceptance streams in their seed sequences
DRAWS_PER_BLOCK = 64  # acceptances drawn at a time per request


@dataclass(frozen=True)
class SimSpeculation:
    """Speculative decoding in a simulation: the method, ``k`` and ``a``; the seed of the
    acceptance streams."""

    config: SpeculativeConfig
    seed: int = 0

    @property
    def max_extra_slots(self) -> int:
        """Slots a request's last verify holds beyond its last token: ``k`` drafts and ``k``
        lookahead slots (the rejection-at-arrival bound)."""
        return 2 * self.config.num_speculative_tokens


def accepted_drafts(uniform: np.ndarray, acceptance: float, num_drafts: int) -> IntArray:
    """Drafts accepted per verify of ``num_drafts``, from ``uniform`` draws on ``(0, 1]``:
    ``floor(log(v) / log(a))`` capped at ``num_drafts``, so ``P(m >= j) = a^j``."""
    if acceptance <= 0.0:
        return np.zeros(len(uniform), dtype=np.int64)
    if acceptance >= 1.0:
        return np.full(len(uniform), num_drafts, dtype=np.int64)
    counts = np.floor(np.log(uniform) / np.log(acceptance))
    return np.minimum(counts, num_drafts).astype(np.int64)


class AcceptanceStreams:
    """Per request, its verifies' accepted drafts in order (see the module docstring)."""

    def __init__(self, seed: int, acceptance: float, num_drafts: int) -> None:
        self.seed, self.acceptance, self.num_drafts = seed, acceptance, num_drafts
        # request id -> [its generator, draws made and not yet used (a list), the next one's
        # index in it]. Draws come in blocks of ``DRAWS_PER_BLOCK`` from the generator, so
        # the sequence does not depend on how far ahead anyone looked.
        self._streams: dict[int, list[Any]] = {}

    def _stream(self, rid: int, count: int) -> list[Any]:
        """``rid``'s stream with at least ``count`` draws ready."""
        stream = self._streams.get(rid)
        if stream is None:
            stream = [np.random.default_rng([self.seed, SPEC_STREAM, rid]), [], 0]
            self._streams[rid] = stream
        gen, ready, cursor = stream
        if len(ready) - cursor < count:
            ready = ready[cursor:]
            while len(ready) < count:
                uniform = 1.0 - gen.random(DRAWS_PER_BLOCK)  # (0, 1]: log is finite
                ready += accepted_drafts(uniform, self.acceptance, self.num_drafts).tolist()
            stream[1], stream[2] = ready, 0
        return stream

    def draw(self, rid: int) -> int:
        """The accepted drafts of ``rid``'s next verify of ``num_drafts`` drafts."""
        stream = self._stream(rid, 1)
        stream[2] += 1
        value: int = stream[1][stream[2] - 1]
        return value

    def peek(self, rid: int, count: int) -> list[int]:
        """``rid``'s next ``count`` draws, not used up (``advance`` uses them)."""
        stream = self._stream(rid, count)
        ahead: list[int] = stream[1][stream[2] : stream[2] + count]
        return ahead

    def advance(self, rid: int, count: int) -> None:
        """Use up ``rid``'s next ``count`` draws (after ``peek``)."""
        self._stream(rid, count)[2] += count

    def forget(self, rid: int) -> None:
        """A finished request draws no more."""
        self._streams.pop(rid, None)


class SpecStepTimes:
    """The step seconds of a speculative replica: the target with ``k`` drafts per decoding
    sequence, and the drafter's passes (``perf/speculative.py``); one per simulation."""

    def __init__(self, model: StepTimeModel, config: SpeculativeConfig) -> None:
        if not isinstance(model, RooflineModel):
            raise InferplanError(
                "--speculative-method: not available with --operator-table (the roofline only)"
            )
        self.k = config.num_speculative_tokens
        self.verify = StepSeconds(model, num_draft_tokens=self.k)
        self.drafter = StepSeconds(SpeculativeModel(model, config).drafter)

    def draft_s(self, num_seqs: int, context_tokens: int) -> float:
        """``k`` drafter passes over ``num_seqs`` sequences, pass ``i`` one token further into
        each (``SpeculativeModel.draft_time_s``)."""
        total = 0.0
        for i in range(self.k):
            total += self.drafter.seconds(0, 0.0, 0, 0, num_seqs, context_tokens + i * num_seqs)
        return total


class SpecDecode:
    """A replica's speculative decoding: the scheduler's need and slots, the step's time, the
    acceptances and emissions, and vLLM's spec-decode counters."""

    def __init__(self, sim: SimSpeculation, times: SpecStepTimes, max_model_len: int) -> None:
        config = sim.config
        self.config, self.times, self.max_model_len = config, times, max_model_len
        self.k = config.num_speculative_tokens
        self.lookahead = self.k  # vLLM: EAGLE, EAGLE-3, MTP and draft models reserve k slots
        self.streams = AcceptanceStreams(sim.seed, config.acceptance_rate, self.k)
        # vLLM's SpecDecodingStats: verifies with drafts, drafts, accepted, per position.
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_position = np.zeros(self.k, dtype=np.int64)
        self.num_emitted_tokens = 0  # by verifies (finishes may drop accepted tokens)

    def attach(self, replica: Replica) -> None:
        """Make this the replica's speculative decoding: its scheduler asks it for the tokens
        and slots of the running rows, and every step runs the general path (the replica's
        vector step emits one token per row)."""
        replica.spec = self
        replica.scheduler.spec = self
        replica.vector_steps = False

    # ---- the scheduler's side ---------------------------------------------------------------

    def decoding(self, run: RunningSet) -> np.ndarray:
        """Rows that have sampled and need one token: they verify drafts this step."""
        return (run.num_tokens - run.num_computed == 1) & (run.num_generated > 0)

    def need(self, run: RunningSet) -> IntArray:
        """Tokens each running row asks for: a decoding row its token and ``k`` drafts, below
        ``max_model_len - 1`` (vLLM's cap on the position), a prefill the rest of its prompt."""
        computed = run.num_computed
        need = run.num_tokens - computed
        with_drafts = np.minimum(need + self.k, self.max_model_len - 1 - computed)
        return np.where(self.decoding(run), np.maximum(with_drafts, 1), need)

    def slots(self, computed: IntArray, sched: IntArray) -> IntArray:
        """KV slots the rows' blocks must cover: computed, scheduled and ``k`` lookahead for
        each scheduled row, at most ``max_model_len``."""
        lookahead = np.where(sched > 0, self.lookahead, 0)
        return np.minimum(computed + sched + lookahead, self.max_model_len)

    # ---- one step ---------------------------------------------------------------------------

    def step_seconds(self, run: RunningSet, sched: IntArray) -> float:
        """The step's seconds: verifying rows (``1 + k`` scheduled) through the target's
        verify, other scheduled rows as chunks of their tokens, then the drafter over every
        row that samples (verifies, and chunks that end their prompt)."""
        computed, times = run.num_computed, self.times
        verify = self.decoding(run) & (sched == 1 + self.k)
        chunk = (sched > 0) & ~verify
        q, o = sched[chunk], computed[chunk]
        n = int(np.count_nonzero(verify))
        context = int(computed[verify].sum()) + n
        target_s = times.verify.seconds(
            int(q.sum()), float((q * o + q * (q + 1) / 2).sum()), int(o.sum()), len(q), n, context
        )
        sampling = chunk & (computed + sched >= run.num_tokens)
        num_sampling = n + int(np.count_nonzero(sampling))
        if num_sampling == 0:
            return target_s
        sampling_context = context + int((computed[sampling] + sched[sampling]).sum())
        return target_s + times.draft_s(num_sampling, sampling_context)

    def finish_step(self, replica: Replica, sched: IntArray, duration: float) -> None:
        """After the step: verifying rows keep the drafts they accepted and emit them with the
        bonus token; chunks advance, and those ending their prompt emit one token."""
        run = replica.running
        decoding = self.decoding(run) & (sched > 0)
        accepted = np.zeros(len(run), dtype=np.int64)
        for row in np.flatnonzero(decoding & (sched > 1)).tolist():
            drafts = int(sched[row]) - 1
            accepted[row] = min(self.streams.draw(int(run.ids[row])), drafts)
            self._count(drafts, int(accepted[row]))
        rejected = np.where(decoding, sched - 1 - accepted, 0)
        np.add(run.num_computed, sched - rejected, out=run.num_computed)
        counts = np.minimum(np.where(decoding, 1 + accepted, 1), run.target - run.num_generated)
        self.num_emitted_tokens += int(counts[decoding & (sched > 1)].sum())
        rows = np.flatnonzero((sched > 0) & (run.num_computed >= run.num_tokens))
        self._emit(replica, rows, counts[rows], duration)

    def _count(self, drafts: int, accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += drafts
        self.num_accepted_tokens += accepted
        self.accepted_per_position[:accepted] += 1

    def _emit(self, replica: Replica, rows: IntArray, counts: IntArray, duration: float) -> None:
        """Rows sample ``counts`` tokens each at ``now`` (none beyond the request's output),
        in one chunk per row: one ITL gap."""
        if len(rows) == 0:
            return
        run, rec, now = replica.running, replica.records, replica.now
        ids, generated = run.ids[rows], run.num_generated[rows]
        first = generated == 0
        if not first.all():
            later = ~first
            last = run.last_token_s[rows][later]
            same = last == now - duration
            gaps = np.where(same, duration, now - last)
            replica._record_gaps(ids[later], gaps, same, duration)
        rec.first_token_s[ids[first]] = now
        run.num_generated[rows] = generated + counts
        run.num_tokens[rows] += counts
        run.last_token_s[rows] = now
        done = generated + counts >= run.target[rows]
        if done.any():
            for rid in ids[done].tolist():
                self.streams.forget(rid)
            replica.finish(rows[done])


def speculate(
    replicas: list[Replica],
    model: StepTimeModel,
    speculative: SimSpeculation | None,
    max_model_len: int,
) -> None:
    """Speculative decoding on every replica (none when ``speculative`` is None), one cache
    of step plans for all."""
    if speculative is None:
        return
    times = SpecStepTimes(model, speculative.config)
    for replica in replicas:
        SpecDecode(speculative, times, max_model_len).attach(replica)


def last_slots(tokens: IntArray, cfg: SimulationConfig) -> IntArray:
    """KV slots requests of ``tokens`` hold at their largest: with speculation, their last
    verify's ``k`` drafts and ``k`` lookahead slots too, at most ``max_model_len`` (the
    simulation's rejection at arrival)."""
    if cfg.speculative is None:
        return tokens
    return np.minimum(tokens + cfg.speculative.max_extra_slots, cfg.max_model_len)


def speculation_summary(replicas: list[Replica]) -> dict[str, Any] | None:
    """The summary's ``speculative`` section over the replicas (None without speculation):
    vLLM's spec-decode metrics (draft acceptance rate = accepted / drafted, mean acceptance
    length = 1 + accepted / verifies, acceptance per draft position) beside the configured
    ``a`` and its ``E``."""
    specs = [r.spec for r in replicas if r.spec is not None]
    if not specs:
        return None
    config = specs[0].config
    drafts = sum(s.num_drafts for s in specs)
    draft_tokens = sum(s.num_draft_tokens for s in specs)
    accepted = sum(s.num_accepted_tokens for s in specs)
    per_position = np.sum([s.accepted_per_position for s in specs], axis=0).tolist()
    emitted = sum(s.num_emitted_tokens for s in specs)
    return {
        "method": config.method,
        "num_speculative_tokens": config.num_speculative_tokens,
        "acceptance_rate": config.acceptance_rate,
        "expected_acceptance_length": config.accept_length,
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "tokens_per_verify": emitted / drafts if drafts else None,
        "acceptance_per_position": [x / drafts if drafts else None for x in per_position],
    }
