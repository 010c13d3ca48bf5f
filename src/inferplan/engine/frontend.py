"""A serving engine's HTTP front end as its own stage: the CPU work outside the engine loop.

vLLM v1 runs its OpenAI API server (HTTP, chat template, tokenisation, incremental
detokenisation, SSE streaming) in a process apart from ``EngineCore`` (``vllm/v1/engine/
async_llm.py``: ``AsyncLLM`` and its ``output_handler`` task, ``core_client.py``: ZMQ to the core
process); SGLang splits it into ``TokenizerManager`` and ``DetokenizerManager`` processes
(``python/sglang/srt/managers``); ``trtllm-serve`` is a FastAPI server in front of its executor.
Their work overlaps the GPU: it bounds a run only when it is larger (a max, not a sum), and it
delays every token it has to wait for. ``vllm bench serve``'s client (one asyncio loop parsing
every SSE chunk) is a stage of the same kind in series; the fitted constants hold both.

Model: one single-threaded server per replica, first come first served (a Python event loop;
N replicas' servers are pooled into one N times faster, which keeps their joint throughput
bound), that does

- ``per_request_s + per_input_token_s * prompt`` for each request when it arrives (parse, chat
  template, tokenise, hand to the engine), and
- ``per_token_s`` for each output token of each request (detokenise, one SSE chunk, the
  client's parse of it), when the engine emits it.

Where the engine takes requests in apart from its output stream (``requests_apart``: SGLang's
TokenizerManager and DetokenizerManager processes), the per-request work is the tokenizer stage
in front of the engine alone and this server serves output tokens only.

The client sees a token when the server has finished it. It runs after the engine simulation
on the records (the engine is not slowed by its front end: outputs queue in the API process),
with each request's tokens spread evenly between its simulated first token and finish. ITL
statistics move by the difference the stage makes to those evenly spread gaps, so the engine's
own gap shape (prefill interruptions) is kept. Above ``MAX_TOKEN_JOBS`` output tokens a
request's tokens after its first are served in equal groups, so memory follows requests, not
tokens: the server works on a group as its tokens come and the client sees the group when
its last token is out and served (the throughput bound and an idle server's delay are kept;
the queueing among tokens emitted in the same step is lost); only the ITL mean, median and p99
move (other ``--metric-percentiles`` of ITL keep the engine's values). Zero costs leave a run
unchanged.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import numpy as np
import yaml

from inferplan.engine.simulator import SimulationResult
from inferplan.errors import InferplanError
from inferplan.metrics.records import FloatArray, IntArray, RequestRecords, RequestStatus

# Keys of a summary (``metrics/summary.py``) that the ITL shift applies to: (statistic, key).
_ITL_STATS = ("mean", "median", "p99")
# Token jobs the stage holds at once (ten arrays of 8 bytes each: ~0.3 GB). A run with more
# output tokens groups each request's tokens after its first into jobs of equal size.
MAX_TOKEN_JOBS = 4_000_000


@dataclass(frozen=True)
class FrontEnd:
    """Seconds of front-end CPU per request, per prompt token and per output token."""

    per_request_s: float = 0.0
    per_input_token_s: float = 0.0
    per_token_s: float = 0.0
    # The per-request work runs in a process apart from the output tokens' (SGLang: the
    # TokenizerManager takes requests in, the DetokenizerManager detokenises, and the client
    # parses the stream): the pass after the engine serves the tokens alone, and the requests'
    # cost is the tokenizer stage in front of the engine (``tokenizer_stage.py``) only.
    requests_apart: bool = False
    # The per-request work runs synchronously before the request handler's first ``await``
    # (vLLM 0.11's chat-template parse, ``engine/chat_template.py``): asyncio's FIFO ready
    # queue runs it for every request already waiting before any of them goes on to the engine
    # (``tokenizer_stage.interleaved_delays``).
    intake_interleaved: bool = False
    # Seconds of the API process per streamed output token while it takes requests in: where
    # the intake and the streams share one process (SGLang's TokenizerManager), the streams
    # slow the intake of the requests still to come (``stream_intake.py``). 0: apart.
    intake_stream_s: float = 0.0
    # Seconds of each request's intake that run before its handler's first ``await`` that
    # yields, ahead of the ``per_request_s`` that takes it on to the scheduler (SGLang: the
    # HTTP request read, JSON decoding and FastAPI's validation of the chat request before
    # ``serving_chat``'s template, tokenisation and send): one event loop runs its ready tasks
    # first in, first out, so a burst runs this part for every request before any goes on
    # (``two_phase_finish``). 0: all of the intake in one part.
    interleaved_s: float = 0.0

    @property
    def is_zero(self) -> bool:
        return self.per_request_s == self.per_input_token_s == self.per_token_s == 0.0


@dataclass(frozen=True)
class FrontEndTimes:
    """What the client sees: each request's first token and finish, and the ITL gaps' statistics
    (mean, median, p99 in seconds) before and after the stage, over the evenly spread tokens."""

    first_token_s: FloatArray
    finish_s: FloatArray
    itl_before_s: dict[str, float]
    itl_after_s: dict[str, float]


def _fcfs_finish(arrive_s: FloatArray, cost_s: FloatArray) -> FloatArray:
    """Finish times of jobs served one at a time in the given order (``arrive_s`` sorted):
    ``f_k = max(a_k, f_{k-1}) + c_k``, in closed form ``S_k + max_{j<=k}(a_j - S_{j-1})``."""
    done = np.cumsum(cost_s)
    return done + np.maximum.accumulate(arrive_s - (done - cost_s))


# The same FCFS rule for the tokenizer stage in front of the engine (``tokenizer_stage.py``).
fcfs_finish = _fcfs_finish


def two_phase_finish(arrive_s: FloatArray, first_s: float, then_s: FloatArray) -> FloatArray:
    """When each request's intake ends where it runs in two parts on one event loop: the first
    (``first_s``) when the request arrives, the second (``then_s``) queued behind whatever was
    ready when its first part ended. One process, jobs served in the order they became ready
    (a request's first part before a second part that became ready at the same instant: the
    new request was in the ready queue first). A burst at t = 0 of ``n`` requests ends its
    first parts at ``n * first_s`` and its intakes at ``n * first_s + (i + 1) * then_s``;
    spaced arrivals pay ``first_s + then_s`` each, as FCFS does. ``arrive_s`` sorted."""
    num = arrive_s.size
    ends = np.empty(num)
    ready: deque[tuple[float, int]] = deque()  # second parts, in the order they became ready
    clock, nxt = 0.0, 0
    while nxt < num or ready:
        if ready and (nxt == num or ready[0][0] < arrive_s[nxt]):
            at, i = ready.popleft()
            clock = max(clock, at) + float(then_s[i])
            ends[i] = clock
        else:
            clock = max(clock, float(arrive_s[nxt])) + first_s
            ready.append((clock, nxt))
            nxt += 1
    return ends


def _gap_stats(gaps_s: FloatArray, weights: IntArray | None = None) -> dict[str, float]:
    """Mean, median and p99 of the gaps; ``weights``: how many tokens each gap stands for
    (grouped tokens, ``MAX_TOKEN_JOBS``), percentiles then by the inverted CDF."""
    if gaps_s.size == 0:
        return {stat: 0.0 for stat in _ITL_STATS}
    if weights is None:
        median, p99 = np.percentile(gaps_s, [50, 99])
        return {"mean": float(gaps_s.mean()), "median": float(median), "p99": float(p99)}
    order = np.argsort(gaps_s, kind="stable")
    cum = np.cumsum(weights[order])
    at = np.searchsorted(cum, [0.5 * cum[-1], 0.99 * cum[-1]])
    median, p99 = gaps_s[order][np.minimum(at, gaps_s.size - 1)]
    mean = float(np.dot(gaps_s, weights) / cum[-1])
    return {"mean": mean, "median": float(median), "p99": float(p99)}


def _token_jobs(num: IntArray, chunk: int) -> tuple[IntArray, IntArray, IntArray]:
    """The front end's token jobs: each request's first token alone, then its other tokens in
    groups of ``chunk``. (owner request, index of the job's first token, tokens in the job)."""
    per_request = 1 + -(-(num - 1) // chunk)
    owner = np.repeat(np.arange(num.size), per_request)
    job = np.arange(owner.size) - (np.cumsum(per_request) - per_request)[owner]
    if chunk == 1:  # one job per token (what the general case gives, in fewer passes)
        return owner, job, np.ones_like(job)
    first_index = np.where(job == 0, 0, 1 + (job - 1) * chunk)
    size = np.where(job == 0, 1, np.minimum(chunk, num[owner] - first_index))
    return owner, first_index, size


def frontend_times(
    records: RequestRecords, fe: FrontEnd, servers: int = 1, *, with_itl: bool = True
) -> FrontEndTimes:
    """The client-side times of the completed requests of ``records`` behind ``fe``, with
    ``servers`` front ends (one per replica) pooled into one ``servers`` times faster.
    ``with_itl=False`` skips the ITL statistics (zeros; the planner reads only the times)."""
    done = np.flatnonzero(
        (records.status == RequestStatus.COMPLETED) & np.isfinite(records.finish_s)
    )
    if not done.size:  # nothing completed: nothing reaches the client
        none = _gap_stats(np.empty(0))
        return FrontEndTimes(records.first_token_s.copy(), records.finish_s.copy(), none, none)
    first, finish = records.first_token_s[done], records.finish_s[done]
    num = np.maximum(records.output_tokens[done], 1)
    chunk = max(1, -(-int(num.sum()) // MAX_TOKEN_JOBS))
    owner, index, size = _token_jobs(num, chunk)
    step = np.where(num > 1, (finish - first) / np.maximum(num - 1, 1), 0.0)
    per_token_s = fe.per_token_s / servers
    first_at, step_at = first[owner], step[owner]
    token_s = first_at + index * step_at  # the job's first token
    # The job's last token: its first when jobs are single tokens (the same sum, bit for bit).
    last_s = token_s if chunk == 1 else first_at + (index + size - 1) * step_at
    del first_at, step_at
    request_cost = (fe.per_request_s + fe.per_input_token_s * records.input_tokens[done]) / servers
    if fe.requests_apart:  # served by the tokenizer stage, not here
        request_cost = np.zeros(done.size)
    arrive = np.concatenate([records.arrival_s[done], token_s])
    cost = np.concatenate([request_cost, size * per_token_s])
    order = np.argsort(arrive, kind="stable")  # at ties: requests first, then in token order
    seen = np.empty(arrive.size)
    if chunk == 1:
        seen[order] = _fcfs_finish(arrive[order], cost[order])
    else:  # the server works on a group as its tokens come; the client sees the group when
        # its last token is out and served
        due = np.concatenate([arrive[: done.size] + request_cost, last_s + per_token_s])
        seen[order] = np.maximum(_fcfs_finish(arrive[order], cost[order]), due[order])
    del arrive, cost, order
    seen_jobs = seen[done.size :]
    starts = np.flatnonzero(index == 0)
    out_first, out_finish = records.first_token_s.copy(), records.finish_s.copy()
    out_first[done] = seen_jobs[starts]
    out_finish[done] = seen_jobs[np.append(starts[1:], seen_jobs.size) - 1]
    if not with_itl:
        none = _gap_stats(np.empty(0))
        return FrontEndTimes(out_first, out_finish, none, none)
    is_gap = index > 0
    weights = None if chunk == 1 else size[is_gap]
    before = np.diff(last_s, prepend=0.0)[is_gap] / size[is_gap]
    after = np.diff(seen_jobs, prepend=0.0)[is_gap] / size[is_gap]
    return FrontEndTimes(
        out_first, out_finish, _gap_stats(before, weights), _gap_stats(after, weights)
    )


def behind_frontend(
    records: RequestRecords,
    duration_s: float,
    fe: FrontEnd,
    servers: int = 1,
    *,
    with_itl: bool = True,
) -> tuple[RequestRecords, float, FrontEndTimes | None]:
    """``records`` and the run's duration as the client sees them behind ``fe`` (unchanged,
    and no times, when ``fe`` costs nothing); ``servers``: replicas, one front end each;
    ``with_itl``: as ``frontend_times``."""
    if fe.is_zero:
        return records, duration_s, None
    times = frontend_times(records, fe, servers, with_itl=with_itl)
    ends = records.finish_s[np.isfinite(records.finish_s)]
    seen_ends = times.finish_s[np.isfinite(times.finish_s)]
    if ends.size:
        duration_s += float(seen_ends.max() - ends.max())
    seen = replace(records, first_token_s=times.first_token_s, finish_s=times.finish_s)
    return seen, duration_s, times


def seen_result(
    result: SimulationResult, fe: FrontEnd, servers: int = 1, *, with_itl: bool = True
) -> tuple[SimulationResult, FrontEndTimes | None]:
    """``result`` with its records and duration as the client sees them behind ``fe`` (one per
    replica: ``servers``), and the times for ``shift_itl`` (``result`` itself and None when
    ``fe`` costs nothing); ``with_itl``: as ``frontend_times``."""
    records, duration_s, times = behind_frontend(
        result.records, result.duration_s, fe, servers, with_itl=with_itl
    )
    if times is None:
        return result, None
    return replace(result, records=records, duration_s=duration_s), times


def on_client_clock(result: SimulationResult, records: RequestRecords) -> SimulationResult:
    """``result`` with ``records`` (their arrivals and dispatches as the client sent them), its
    duration from the first dispatch to the last finish."""
    ends = records.finish_s[np.isfinite(records.finish_s)]
    start = float(records.dispatch_s.min()) if records.num_requests else 0.0
    duration = float(ends.max()) - start if ends.size else 0.0
    return replace(result, records=records, duration_s=duration)


def shift_itl(summary: dict[str, object], times: FrontEndTimes | None) -> dict[str, object]:
    """``summary`` with its ITL mean, median and p99 moved by what the front end adds to the
    evenly spread gaps (never below 0)."""
    if times is None:
        return summary
    out = dict(summary)
    for stat in _ITL_STATS:
        key = f"{stat}_itl_ms"
        value = out.get(key)
        if isinstance(value, int | float):
            delta_ms = (times.itl_after_s[stat] - times.itl_before_s[stat]) * 1e3
            out[key] = max(float(value) + delta_ms, 0.0)
    return out


FRONTEND_FIELDS = (
    "per_request_s",
    "per_input_token_s",
    "per_token_s",
    "intake_stream_s",
    "interleaved_s",
)


def frontend_class(engine: str, version: str = "") -> str | None:
    """The front-end class of a served engine (``--engine`` spelling), or None: vLLM v1's API
    server, SGLang's tokenizer/detokenizer managers, ``trtllm-serve``."""
    if engine == "vllm":
        return "vllm-v1" if not version.startswith(("0.5", "0.6", "vllm-ascend")) else None
    if engine == "sglang":
        return "sglang"
    if engine in ("trtllm", "tensorrt-llm"):
        return "trtllm-serve"
    return None


def parse_frontends(data: object, source: str) -> dict[str, FrontEnd]:
    """``{class: FrontEnd}``; a bad file is one error naming the key."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InferplanError(f"{source}: expected a mapping of front-end classes")
    out: dict[str, FrontEnd] = {}
    for name, costs in data.items():
        if not isinstance(costs, dict) or not set(costs) <= set(FRONTEND_FIELDS):
            raise InferplanError(
                f"{source}: {name}: keys must be among {', '.join(FRONTEND_FIELDS)}"
            )
        values = {str(k): float(v) for k, v in costs.items()}
        if any(not 0.0 <= v <= 1.0 for v in values.values()):
            raise InferplanError(f"{source}: {name}: seconds must lie in [0, 1]")
        out[str(name)] = FrontEnd(
            per_request_s=values.get("per_request_s", 0.0),
            per_input_token_s=values.get("per_input_token_s", 0.0),
            per_token_s=values.get("per_token_s", 0.0),
            intake_stream_s=values.get("intake_stream_s", 0.0),
            interleaved_s=values.get("interleaved_s", 0.0),
        )
    return out


@cache
def bundled_frontends() -> dict[str, FrontEnd]:
    text = resources.files("inferplan.engine").joinpath("data/frontend.yaml").read_text()
    return parse_frontends(yaml.safe_load(text), "frontend.yaml")


def engine_frontend(engine: str, version: str = "") -> FrontEnd:
    """The fitted front end of an engine release (zero costs where none is fitted); SGLang's
    takes requests in apart from its output stream (``with_process_split``)."""
    name = frontend_class(engine, version)
    fe = bundled_frontends().get(name, FrontEnd()) if name else FrontEnd()
    return with_process_split(fe, name)


def with_process_split(fe: FrontEnd, name: str | None) -> FrontEnd:
    """``fe`` as front-end class ``name`` runs it. SGLang's HTTP server and TokenizerManager
    (chat template, tokenisation) run in the main process, its incremental detokenisation in
    a ``DetokenizerManager`` process of its own (``sglang/srt/entrypoints/engine.py``
    ``_launch_subprocesses``, ``managers/detokenizer_manager.py``), so a burst of arriving
    requests does not hold back the tokens already streaming: ``requests_apart``. Measured:
    SGLang's ``128/4`` runs of 1,000 requests sent at once spread their first tokens over the
    run (Qwen3-14B-FP8 on one H100: TTFT median 4.06 s, p99 7.24 s in a 7.8 s run), where one
    queue would deliver them all after the last request's intake. Others: ``fe``."""
    return replace(fe, requests_apart=True) if name == "sglang" else fe
