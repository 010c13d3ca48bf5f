"""The request path in front of the engine: requests reach the scheduler one tokenizer at a time.

An HTTP serving engine parses, templates and tokenises each request in its API process before
its scheduler sees it: SGLang's ``TokenizerManager`` (``sglang/srt/managers/
tokenizer_manager.py``: ``generate_request`` -> ``_tokenize_one_request`` ->
``_send_one_request``, one asyncio process that also streams every output token), vLLM v1's
``AsyncLLM`` (``vllm/v1/engine/async_llm.py``: ``add_request`` processes the prompt before it is
sent to ``EngineCore``), ``trtllm-serve``'s FastAPI server. When a benchmark sends its requests
at once (``vllm bench serve`` with rate ``inf``), they reach the scheduler spread over ``N x`` the
per-request cost, not at t = 0: the scheduler forms its first batches from the few that have
arrived. The front end's per-request cost (``engine/frontend.py``: ``per_request_s +
per_input_token_s x prompt``) is that work; here it delays the engine's arrivals, served first
come first served by one process per replica (``servers`` pooled into one ``servers`` times
faster, as the front end does). Where the work ends in an ``await`` before the request goes on
(``FrontEnd.intake_interleaved``: vLLM 0.11's chat-template parse, ``engine/chat_template.py``)
the event loop's FIFO ready queue holds every request behind the work of all that arrived
before its own work ended: a burst reaches the scheduler together, after the whole burst's work
(``interleaved_delays``).

The simulation runs on the delayed arrivals; its records are then put back on the client's
clock (``arrival_s`` and ``dispatch_s`` earlier by each request's delay), so TTFT counts the
wait in the tokenizer. The front end's pass after the engine (``frontend.behind_frontend``)
replays the same per-request jobs at the client's arrivals beside the output tokens' jobs, so
the API process's time is charged once per job; where the front end takes requests in
apart from its output stream (``FrontEnd.requests_apart``, SGLang) that pass serves the tokens
only. Zero per-request costs change nothing (the
same workload object is simulated). Behind a client-side concurrency limit each request pays its
own work only: the client sends one as another finishes, so no burst queues in the tokenizer
(at most ``max_concurrency`` requests wait; charging the limited sends as one burst at t = 0 put
request ``i`` of a 100-request run behind ``i`` others' work, a delay the limit never lets form).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from inferplan.engine.frontend import FrontEnd, fcfs_finish, on_client_clock, two_phase_finish
from inferplan.engine.session import ServingOptions, simulate
from inferplan.engine.simulator import SimulationResult
from inferplan.engine.stream_intake import applies, simulate_gated
from inferplan.memory.plan import MemoryPlan
from inferplan.metrics.records import FloatArray
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.request import Workload


def tokenizer_delays(
    workload: Workload, fe: FrontEnd, servers: int = 1, max_concurrency: int | None = None
) -> FloatArray:
    """Seconds each request spends in the tokenizer stage (queue and its own work) before the
    scheduler sees it; zeros where the front end has no per-request cost. An interleaved intake
    behind a client's concurrency limit charges each request its own work only: the client
    sends one as another finishes, so no burst forms (at most ``max_concurrency`` wait); so
    does a first-come-first-served one there, for the same reason."""
    cost = (fe.per_request_s + fe.per_input_token_s * workload.input_tokens) / max(servers, 1)
    arrivals = np.asarray(workload.arrival_s, dtype=np.float64)
    first_s = fe.interleaved_s / max(servers, 1)
    if not np.any(cost > 0) and first_s <= 0:
        return np.zeros(arrivals.size)
    cost = np.broadcast_to(np.asarray(cost, dtype=np.float64), arrivals.shape)
    if first_s > 0 and not max_concurrency:  # SGLang: ``FrontEnd.interleaved_s``
        return two_phase_finish(arrivals, first_s, cost) - arrivals
    cost = cost + first_s
    if max_concurrency:
        return np.array(cost, dtype=np.float64)
    if fe.intake_interleaved:
        return interleaved_delays(arrivals, cost)
    return fcfs_finish(arrivals, cost) - arrivals


def interleaved_delays(arrivals_s: FloatArray, cost_s: FloatArray) -> FloatArray:
    """Delays when each request's work ends in an ``await`` before it reaches the engine: one
    event loop runs ready tasks in FIFO order, so request ``i``'s next step is queued behind the
    work of every request that arrived by the time its own work ended. Its work ends at the FCFS
    finish ``f_i``; it reaches the engine at ``max(f_i, f_k)``, ``k`` the last request to arrive
    at or before ``f_i`` (the step after the ``await`` costs nothing here). A burst at t = 0 reaches
    the engine all at once, after the whole burst's work; spaced arrivals wait ``f_i - a_i``
    as in FCFS. (``arrivals_s`` sorted, as the workload's.)"""
    finish = fcfs_finish(arrivals_s, cost_s)
    last_before = np.searchsorted(arrivals_s, finish, side="right") - 1
    return np.maximum(finish, finish[last_before]) - arrivals_s


def at_client_times(result: SimulationResult, delays: FloatArray) -> SimulationResult:
    """``result`` of a run on delayed arrivals, on the client's clock: every request arrived
    (and was dispatched) ``delays`` earlier; the duration runs from the first dispatch."""
    if not np.any(delays > 0):
        return result
    rec = result.records
    records = replace(rec, arrival_s=rec.arrival_s - delays, dispatch_s=rec.dispatch_s - delays)
    return on_client_clock(result, records)


def simulate_tokenized(
    plan: MemoryPlan,
    model: StepTimeModel,
    workload: Workload,
    options: ServingOptions,
    fe: FrontEnd,
    on_progress: Callable[[int], None] | None = None,
) -> SimulationResult:
    """``session.simulate`` with the requests passing the tokenizer stage of ``fe`` first (one
    per replica), the records on the client's clock; where the intake shares its process with
    the output streams (``FrontEnd.intake_stream_s``), through ``stream_intake.py``'s gate."""
    delayed, delays = tokenized(workload, fe, options)
    if not np.any(delays > 0):
        return simulate(plan, model, workload, options, on_progress)
    if fe.intake_stream_s > 0 and applies(options):  # the streams slow the intake
        work = fe.per_request_s + fe.per_input_token_s * workload.input_tokens
        cost = np.array(np.broadcast_to(work, delays.shape), dtype=np.float64)
        return simulate_gated(plan, model, workload, options, cost, fe.intake_stream_s)
    return at_client_times(simulate(plan, model, delayed, options, on_progress), delays)


def tokenized(
    workload: Workload, fe: FrontEnd, options: ServingOptions
) -> tuple[Workload, FloatArray]:
    """``workload`` as it reaches the engine behind ``fe``'s tokenizer stage (one per replica),
    and each request's delay (``at_client_times`` puts a run of it back on the client's clock).
    The stream gate (``FrontEnd.intake_stream_s``) is not in it: ``simulate_tokenized`` only."""
    delays = tokenizer_delays(workload, fe, options.data_parallel_size, options.max_concurrency)
    return replace(workload, arrival_s=workload.arrival_s + delays), delays
