"""An intake that shares its process with the output streams: SGLang's TokenizerManager.

SGLang's HTTP server, its OpenAI chat handler and its ``TokenizerManager`` are one asyncio
process (SGLang 0.5.5: ``entrypoints/http_server.py``, ``entrypoints/openai/serving_chat.py``,
``managers/tokenizer_manager.py``). The same event loop takes new requests in (``serving_chat``
applies the chat template and tokenises; ``generate_request`` -> ``_send_one_request`` hands the
request to the scheduler) and serves every output of every running request (``handle_loop``
receives one batch of outputs per scheduler step from the ``DetokenizerManager``;
``_handle_batch_output`` builds each request's output and wakes its coroutine, which formats one
SSE chunk and writes it). SGLang's maintainers name the three tasks and the single-core
bottleneck they make at high concurrency (sgl-project/sglang#6553, which led to
``--tokenizer-worker-num``, 1 by default). While many requests stream, the requests still to be
taken in reach the scheduler later: an intake slowed by the streams it serves.
``frontend.with_process_split`` keeps the intake apart from the token pass after the engine;
``FrontEnd.intake_stream_s`` (seconds of the process per streamed output token) couples them.

Model (``IntakeGate``): one process serves the streams first (each step's outputs are handled as
they come, a backlog carried) and the intake, first come first served, in the time they leave.
The tokens a replica has emitted are counted whenever the event loop asks for the next arrival
(``GatedSimulation._next_arrival_s``) and spread evenly since the last count. A request reaches
the scheduler when its intake ends; the end projected with no further stream work is a lower
bound, so the loop steps the replica first where that is later than its clock, and asks again:
causal, one engine run. Zero per-token cost: the tokenizer stage's FCFS delays, the same times.
One replica and no client concurrency limit only (``applies``); elsewhere the tokenizer stage.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from inferplan.engine.frontend import on_client_clock
from inferplan.engine.replica import Replica
from inferplan.engine.session import ServingOptions, served_workload, simulation_config
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.plan import MemoryPlan
from inferplan.metrics.records import FloatArray
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.request import Workload


class IntakeGate:
    """The API process's clock: FCFS intake of requests sent at ``sends_s`` (sorted) costing
    ``cost_s`` each, after ``per_token_s`` of stream work per emitted token."""

    def __init__(self, sends_s: FloatArray, cost_s: FloatArray, per_token_s: float) -> None:
        self.sends, self.cost, self.per_token_s = sends_s, cost_s, per_token_s
        self.ends = np.full(sends_s.size, math.inf)  # each request's intake end, once known
        self.clock = float(sends_s[0]) if sends_s.size else 0.0
        self.backlog = 0.0  # stream work not yet served at ``clock``
        self.tokens = 0  # tokens counted by ``clock``
        self.next = 0  # the first request whose intake has not ended
        self.worked = 0.0  # work done on it

    def account(self, now: float, tokens: int) -> None:
        """Advance to ``now``, ``tokens`` emitted in all by then (evenly since the last count):
        the streams' work first, the intake in the rest."""
        span = now - self.clock
        if span <= 0.0:
            return
        tokens = max(tokens, self.tokens)  # a retracted request's count restarts: never undone
        rate = (tokens - self.tokens) * self.per_token_s / span  # stream work per second
        self.tokens = tokens
        if rate >= 1.0:  # the streams take the whole span
            self.backlog += (rate - 1.0) * span
            self.clock = now
            return
        drain = min(span, self.backlog / (1.0 - rate))
        self.backlog -= drain * (1.0 - rate)
        self._intake(self.clock + drain, now, 1.0 - rate)
        self.clock = now

    def _intake(self, start: float, end: float, share: float) -> None:
        """Intake work from ``start`` to ``end`` at ``share`` of the process."""
        t = start
        while self.next < self.sends.size:
            t = max(t, float(self.sends[self.next]))  # idle until the request is sent
            if t >= end:
                return
            finish = t + (float(self.cost[self.next]) - self.worked) / share
            if finish > end:
                self.worked += (end - t) * share
                return
            self.ends[self.next], t = finish, finish
            self.next, self.worked = self.next + 1, 0.0

    def end_of(self, index: int) -> float:
        """Request ``index``'s intake end: known, or projected with no more stream work."""
        if index < self.next or index >= self.sends.size:
            return float(self.ends[index]) if index < self.sends.size else math.inf
        t = max(self.clock + self.backlog, float(self.sends[self.next]))
        t += float(self.cost[self.next]) - self.worked
        for i in range(self.next + 1, index + 1):
            t = max(t, float(self.sends[i])) + float(self.cost[i])
        return t


class GatedSimulation(Simulation):
    """``Simulation`` with the requests reaching its one replica through ``IntakeGate``."""

    def __init__(
        self,
        workload: Workload,
        cfg: SimulationConfig,
        model: StepTimeModel,
        per_token_s: float,
        cost_s: FloatArray,
    ) -> None:
        super().__init__(workload, cfg, model)
        sends = np.asarray(self._arrival_s, dtype=np.float64)
        self.gate = IntakeGate(sends, np.asarray(cost_s, dtype=np.float64), per_token_s)
        self.collected_tokens = 0  # output tokens of the finished requests collected so far

    def _collect(self, replica: Replica) -> int:
        """Count the finished requests' tokens once, as they are collected (a running total
        instead of summing every record at each count)."""
        if replica.on_finish:
            self.collected_tokens += int(self.records.output_tokens[replica.on_finish].sum())
        return super()._collect(replica)

    def _emitted(self) -> int:
        """Tokens emitted so far: the finished requests' (collected, and those finished since
        the last collection) and the running ones'."""
        replica = self.replicas[0]
        pending = int(self.records.output_tokens[replica.on_finish].sum())
        running = int(replica.running.num_generated.sum())
        return self.collected_tokens + pending + running

    def _next_arrival_s(self) -> float:
        if self.next_request >= self.workload.num_requests:
            return math.inf
        self.gate.account(self.replicas[0].now, self._emitted())
        return self.gate.end_of(self.next_request)


def applies(options: ServingOptions) -> bool:
    """Whether the gate models the run: one replica, no client concurrency limit."""
    return options.data_parallel_size == 1 and not options.max_concurrency


def simulate_gated(
    plan: MemoryPlan,
    model: StepTimeModel,
    workload: Workload,
    options: ServingOptions,
    cost_s: FloatArray,
    per_token_s: float,
) -> SimulationResult:
    """One engine run behind the gate, its records on the client's clock (arrivals at the
    sends; the duration from the first send)."""
    sim_cfg = simulation_config(plan, options)
    served = served_workload(workload, options, sim_cfg)
    result = GatedSimulation(served, sim_cfg, model, per_token_s, cost_s).run()
    rec = result.records
    return on_client_clock(result, replace(rec, arrival_s=rec.dispatch_s.copy()))
