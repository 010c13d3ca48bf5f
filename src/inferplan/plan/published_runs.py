"""Predicting published measurements: each run's deployment, workload and predicted numbers.

A run (rows sharing a configuration and workload point, ``published.py``) becomes a memory plan
with its engine's memory rule and limits, and one of two predictions:

- **Steady state, closed form**, for ``trtllm-bench`` offline throughput on fixed lengths (every
  request the same, all queued at t = 0, EOS ignored). TensorRT-LLM's guaranteed-no-evict
  scheduler runs ``B = min(max_batch_size, requests, KV blocks / blocks of ISL + OSL)``
  requests at once (it reserves each request's full ``max_tokens``). A wave of ``B`` requests
  takes its prefill steps (``max_num_tokens // ISL`` prompts each, without chunking, beside the
  decodes of the prompts already in) plus ``OSL - 1`` decode steps of ``B`` sequences at the mean
  context ``ISL + OSL / 2``; ``N / B`` waves make the run (under pipeline parallelism both
  limits are per micro-batch, so ``pp`` times them are in flight). Step times come from the same
  step-time model the simulator uses; the run costs a few step evaluations, not a simulation.
- **Simulation**, for everything with latencies, arrivals or varying lengths (``vllm bench
  serve`` runs, online serving tables): the event-driven engine with the engine's scheduler
  (vLLM v1, TensorRT-LLM, SGLang's ``engine/sglang.py``) and, for vLLM and SGLang, the host
  costs fitted to their latency rows (``perf/engine_overheads.py``).

Where the source is silent: ``kv_cache_free_gpu_mem_fraction`` 0.95 where the table says most
runs used it, else 0.9; FP8 KV with TensorRT-LLM's FP8 and FP4 (ModelOpt) checkpoints; ShareGPT
lengths drawn from ShareGPT's measured (prompt, output) pairs, scaled to the run's published
totals (``sharegpt.sharegpt_lengths``; the pairs as counted where a row states no mean);
``random`` inputs at the published mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from inferplan.engine.frontend import FrontEnd, FrontEndTimes, behind_frontend, shift_itl
from inferplan.engine.session import ServingOptions
from inferplan.engine.simulator import SimulationResult
from inferplan.engine.tokenizer_stage import simulate_tokenized
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.metrics.records import RequestStatus
from inferplan.metrics.summary import summarize
from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.perf.overlap import on_host
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.chat_stream import (
    empty_chunks,
    merged_gaps,
    with_empty_chunks,
    with_merged_gaps,
)
from inferplan.plan.closed_form import steady_state_throughput
from inferplan.plan.engine_moe import with_engine_moe
from inferplan.plan.published import (
    ENGINES,
    WEIGHT_DTYPES,
    PublishedRow,
    bundled_model_name,
    skip_reason,
)
from inferplan.plan.published_serving import dp_attention, row_frontend
from inferplan.plan.published_workload import requests_of, run_workload, template_tokens
from inferplan.plan.served import (
    decode_floor_s,
    host_efficiency,
    served_efficiency,
    served_graphs,
    trtllm_release,
    with_async_scheduling,
    with_overlap_schedule,
    with_vllm_configs,
)
from inferplan.plan.trtllm_bench import stated_attention_dp, trtllm_bench_limits
from inferplan.plan.trtllm_serve import (
    chunked_prefill,
    is_trtllm_serve,
    serve_efficiency,
    with_overlap_scheduler,
)
from inferplan.specs.catalog import load_model
from inferplan.specs.engines import (
    engine_defaults,
    sglang_mem_fraction_static,
    vllm_expert_padding,
)
from inferplan.specs.hardware import load_gpu
from inferplan.specs.model import ModelSpec
from inferplan.specs.parallel import Parallelism

DEFAULT_CONTEXT_TOKENS = 8192  # the context a run that states none is planned with


def engine_release(row: PublishedRow) -> str | None:
    """Which host-side cost class a row's TensorRT-LLM release belongs to
    (``data/published_cpu_costs.yaml``, ``served.trtllm_release``); None for other engines."""
    if row.engine != "tensorrt-llm":
        return None
    return trtllm_release(row.engine_version)


def row_efficiency(row: PublishedRow, family: Efficiency) -> Efficiency:
    """``family`` with the row's engine-release host costs, where they were fitted."""
    return host_efficiency(family, ENGINES[row.engine], row.engine_version)


@dataclass(frozen=True)
class RunSetup:
    """One run's deployment as inferplan models it."""

    model: str
    gpu: str
    engine: str
    par: Parallelism
    memory: MemoryConfig
    closed_form: bool
    full_attention: bool = False  # the engine ignores the config's sliding window


# Model families whose HF ``sliding_window`` TensorRT-LLM did not apply in the releases the
# table covers: its engine flow applies windows only through the runtime
# ``max_attention_window`` (NVIDIA/TensorRT-LLM issues #543, #1404), which ``trtllm-bench`` does
# not set, and its PyTorch backend passed Mistral/Mixtral's window to the attention kernel only
# from PR #12597 (merged 2026-03-30): before, full attention and a full-length KV cache.
_TRTLLM_WINDOWLESS_FAMILIES = ("mistral", "mixtral")


def _parallelism(row: PublishedRow) -> Parallelism:
    ep = row.ep or int(row.settings.get("ep_size", "1") or 1)
    if dp_attention(row) or stated_attention_dp(row):  # attention DP over the group, EP across it
        return Parallelism(tp=1, pp=row.pp, dp=row.tp, enable_expert_parallel=True)
    return Parallelism(tp=row.tp, pp=row.pp, enable_expert_parallel=ep > 1)


def _kv_dtype(row: PublishedRow) -> str:
    """The row's KV dtype where stated (gpt-oss on Hopper: ``auto``, BF16, as TensorRT-LLM's
    perf overview configures it), else TensorRT-LLM's ModelOpt default. ``trtllm-serve`` rows
    serve the model's own checkpoint (``Qwen/Qwen3-32B-FP8``, ``deepseek-ai/DeepSeek-R1-0528``:
    block-scaled FP8 weights, no ``kv_cache_quant_algo``), whose KV stays in the model dtype."""
    if row.kv_cache_dtype in ("fp8", "auto"):
        return row.kv_cache_dtype
    modelopt = row.engine == "tensorrt-llm" and not is_trtllm_serve(row)
    if modelopt and row.weights_dtype in ("fp8", "nvfp4"):
        return "fp8"  # ModelOpt checkpoints declare FP8 KV; TensorRT-LLM follows them
    return "auto"


def _quantization(row: PublishedRow, model: str) -> str | None:
    wanted = WEIGHT_DTYPES[row.weights_dtype]
    native = load_model(model).quantization
    if wanted is not None and native is not None and native.method == wanted:
        return None  # the checkpoint's own format (gpt-oss MXFP4, DeepSeek FP8)
    if native is not None and native.method == "mxfp4" and wanted == "fp8":
        # gpt-oss on Hopper, labelled "FP8" by TensorRT-LLM: its checkpoints carry MXFP4 experts
        # (published.md), which Hopper dequantises to BF16 tensor cores; nothing is FP8 there.
        return None
    return wanted


def run_setup(row: PublishedRow) -> RunSetup:
    """The deployment of ``row``'s run (see the module docstring for what is assumed)."""
    model = bundled_model_name(row.model) or row.model
    gpu = load_gpu(row.gpu)
    engine = ENGINES[row.engine]
    par = _parallelism(row)
    defaults = engine_defaults(engine, gpu)
    closed_form = row.scenario == "offline" and row.dataset == "fixed" and engine == "trtllm"
    kv = _kv_dtype(row)
    longest = (row.input_len or 0) + (row.output_len or 0) + template_tokens(row)
    max_len = int(row.settings.get("max_model_len") or row.settings.get("max_seq_len") or 0)
    memory = MemoryConfig(
        quantization=_quantization(row, model),
        kv_cache_dtype=kv,
        max_model_len=max_len or max(longest, DEFAULT_CONTEXT_TOKENS),
        max_num_batched_tokens=defaults.max_num_batched_tokens,
        max_num_seqs=defaults.max_num_seqs,
        block_size=defaults.block_size,
    )
    if engine == "trtllm":
        fraction = 0.95 if "0.95" in row.settings.get("kv_cache_free_gpu_mem_fraction", "") else 0.9
        memory = replace(memory, kv_cache_free_gpu_mem_fraction=fraction)
        if closed_form:
            kv_bytes = 1.0 if kv == "fp8" else 2.0
            batch, tokens = trtllm_bench_limits(row, model, kv_bytes, fraction)
            memory = replace(memory, max_num_seqs=batch, max_num_batched_tokens=tokens)
    elif engine == "sglang":
        flag = row.settings.get("enable_dp_attention") == "true"
        fraction = sglang_mem_fraction_static(gpu, par.tp, par.pp, par.attention_dp, dp_flag=flag)
        memory = replace(memory, mem_fraction_static=fraction)
    else:
        utilization = float(row.settings.get("gpu_memory_utilization", "0.9"))
        padding = vllm_expert_padding(load_model(model), gpu, memory.quantization)
        memory = replace(memory, gpu_memory_utilization=utilization, expert_padding=padding)
    full = engine == "trtllm" and load_model(model).model_type in _TRTLLM_WINDOWLESS_FAMILIES
    return RunSetup(model, gpu.key, engine, par, memory, closed_form, full)


def _without_windows(spec: ModelSpec) -> ModelSpec:
    layers = tuple(
        replace(layer, attention=replace(layer.attention, window_tokens=None))
        for layer in spec.layers
    )
    return replace(spec, layers=layers)


@cache
def memory_plan(setup: RunSetup) -> MemoryPlan:
    spec = load_model(setup.model)
    if setup.full_attention:
        spec = _without_windows(spec)
    return plan_memory(spec, load_gpu(setup.gpu), setup.par, setup.memory)


def _summary_value(summary: dict[str, object], metric: str) -> float | None:
    if metric in ("output_throughput", "total_token_throughput", "request_throughput"):
        value = summary.get(metric)
    else:
        name, stat = metric.rsplit("_", 1)
        value = summary.get(f"{stat}_{name}_ms")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def run_step_model(
    first: PublishedRow, setup: RunSetup, plan: MemoryPlan, efficiency: Efficiency | None
) -> StepTimeModel:
    """The run's step-time model: its engine release's constants (TensorRT-LLM's host work at
    the host CPU's speed, ``perf/overlap.py`` ``on_host``), decode CUDA graphs and MoE exchange
    (``plan/engine_moe.py``)."""
    engine, version = ENGINES[first.engine], first.engine_version
    eff = efficiency or served_efficiency(efficiency_for(plan.gpu), plan, engine, version)
    if efficiency is not None:  # the deployment's fused-MoE configs, on fitted constants too
        eff = with_vllm_configs(eff, plan, engine)
    if first.settings.get("async_scheduling") == "true":  # on fitted constants too
        eff = with_async_scheduling(eff, engine)
    disabled = first.settings.get("disable_overlap_schedule") == "true"
    eff = with_overlap_schedule(eff, engine, disabled)  # SGLang's default, on fitted ones too
    if is_trtllm_serve(first):  # its own host costs, behind the overlap scheduler
        eff = with_overlap_scheduler(eff) if efficiency else serve_efficiency(eff, plan)
    if engine == "trtllm":  # its host work at the host CPU's speed, as ``simulate`` runs it
        eff = on_host(eff, plan.gpu)
    step = build_step_model(plan, efficiency=eff)
    if isinstance(step, RooflineModel):
        if not setup.closed_form:
            step.graphs = served_graphs(plan, engine, version)
        with_engine_moe(step, plan, engine)  # plan/engine_moe.py
    return step


def simulate_run(
    rows: list[PublishedRow],
    efficiency: Efficiency | None,
    quick: bool,
    frontend: FrontEnd | None = None,
) -> SimulationResult:
    """The engine simulation of a served run (before its front end's output pass), its requests
    through the front end's tokenizer stage (``engine/tokenizer_stage.py``; ``frontend`` None:
    the run's, ``row_frontend``)."""
    first = rows[0]
    setup = run_setup(first)
    plan = memory_plan(setup)
    if plan.num_blocks <= 0:  # a row of the user's that the GPUs cannot hold: a reason, no crash
        raise InferplanError(
            f"the weights leave no KV cache on {first.gpu} at TP{first.tp} as planned"
        )
    step = run_step_model(first, setup, plan, efficiency)
    options = ServingOptions(
        engine=setup.engine,
        max_concurrency=first.max_concurrency,
        data_parallel_size=setup.par.num_replicas,
        trtllm_chunked_prefill=chunked_prefill(first),
    )
    fe = frontend if frontend is not None else row_frontend(first)
    return simulate_tokenized(plan, step, run_workload(first, quick), options, fe)


def served_summary(
    result: SimulationResult, fe: FrontEnd, empty_chunks: int = 0, merged_gaps: int = 0
) -> dict[str, object]:
    """The summary of a simulated run as the client sees it behind ``fe``; ``empty_chunks``:
    ITL gaps of about zero each completed request's stream adds, ``merged_gaps``: its token
    gaps the stream delivers as one sample (``chat_stream.py``)."""
    records, duration_s, times = behind_frontend(result.records, result.duration_s, fe)
    done = int(np.count_nonzero(records.status == RequestStatus.COMPLETED))
    gaps = with_empty_chunks(result.itl, done, empty_chunks)
    itl = with_merged_gaps(gaps, records, merged_gaps)
    summary = summarize(records, itl, duration_s=duration_s)
    if not summary.get("completed"):
        raise InferplanError(
            "no request completed in the simulation (each was rejected: longer than the "
            "token budget without chunked prefill, or than the KV pool)"
        )
    if times is not None and itl is not gaps and itl.total_weight > 0:
        times = _per_sample_shift(times, gaps.total_weight / itl.total_weight)
    return shift_itl(summary, times)


def _per_sample_shift(times: FrontEndTimes, gaps_per_sample: float) -> FrontEndTimes:
    """``times`` with the front end's shift of each ITL statistic scaled to samples that
    hold ``gaps_per_sample`` token gaps on average (a merged sample is the sum of its gaps, so
    it moves by the sum of their shifts: the client's mean is then ``gaps_per_sample`` times the
    mean gap it sees, as without merging)."""
    before = times.itl_before_s
    after = {k: v + gaps_per_sample * (times.itl_after_s[k] - v) for k, v in before.items()}
    return replace(times, itl_after_s=after)


def metric_values(rows: list[PublishedRow], summary: dict[str, object]) -> dict[str, float | None]:
    """Each row's metric from a run's summary, as published: per GPU where the row is."""
    out = {}
    extra = template_tokens(rows[0]) if rows else 0
    for row in rows:
        value = _summary_value(summary, row.metric)
        if value is not None and extra and row.metric == "total_token_throughput":
            rate = _summary_value(summary, "request_throughput") or 0.0
            value -= extra * rate  # the client counts its own prompt tokens only
        if value is not None and row.per == "gpu" and row.family == "throughput":
            value /= row.num_gpus
        out[row.metric] = value
    return out


def predict_run(
    rows: list[PublishedRow],
    efficiency: Efficiency | None,
    quick: bool,
    frontend: FrontEnd | None = None,
) -> dict[str, float | None]:
    """Predicted value of each metric of one run (rows share ``run_key``). ``frontend`` None:
    the run's engine's fitted front end where it was served (``row_frontend``)."""
    first = rows[0]
    setup = run_setup(first)
    if not setup.closed_form:
        fe = frontend if frontend is not None else row_frontend(first)
        result = simulate_run(rows, efficiency, quick, fe)
        stream = served_summary(result, fe, empty_chunks(first), merged_gaps(first))
        return metric_values(rows, stream)
    plan = memory_plan(setup)
    step = run_step_model(first, setup, plan, efficiency)
    isl = first.input_len or 1
    rates = steady_state_throughput(
        plan,
        step,
        isl,
        first.output_len or 1,
        requests_of(first),
        python_executor=engine_release(first) != "trtllm-cpp",
    )
    if rates is None:
        raise InferplanError("one request's KV does not fit in the pool as modelled")
    summary: dict[str, object] = {
        "output_throughput": rates[0],
        "request_throughput": rates[1],
        "total_token_throughput": rates[0] + rates[1] * isl,
    }
    return metric_values(rows, summary)


def burst_reason(row: PublishedRow) -> str | None:
    """Why an ITL row measured below one decode step's floor (``served.decode_floor_s``) is
    left out: the client saw tokens in bursts, which a token-level model does not reproduce."""
    if row.family != "latency" or not row.metric.startswith("itl_"):
        return None
    floor_ms = decode_floor_s(memory_plan(run_setup(row))) * 1e3
    if row.value >= floor_ms:
        return None
    return (
        f"measured ITL {row.value:g} ms is below one decode step's floor ({floor_ms:.2g} ms: "
        "active weights at peak HBM bandwidth): tokens arrived in bursts, not one per step"
    )


@dataclass(frozen=True)
class RowResult:
    """One published row: its prediction, or why there is none."""

    row: PublishedRow
    predicted: float | None
    reason: str | None = None

    @property
    def error(self) -> float | None:
        """Signed relative error, (predicted - measured) / measured."""
        if self.predicted is None:
            return None
        return (self.predicted - self.row.value) / self.row.value


def errors_by(
    results: list[RowResult], key: Callable[[PublishedRow], str]
) -> dict[str, np.ndarray]:
    """The signed relative errors of the predicted rows, grouped by ``key(row)``, groups in
    sorted order (the residual and fit scripts' breakdown tables)."""
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.error is not None:
            groups.setdefault(key(r.row), []).append(r.error)
    return {name: np.array(groups[name]) for name in sorted(groups)}


def group_runs(rows: list[PublishedRow]) -> dict[tuple[object, ...], list[PublishedRow]]:
    """Rows by run, in file order (each run is prepared and predicted once)."""
    runs: dict[tuple[object, ...], list[PublishedRow]] = {}
    for row in rows:
        runs.setdefault(row.run_key, []).append(row)
    return runs


def validate_rows(
    rows: list[PublishedRow],
    *,
    quick: bool = False,
    efficiency: Callable[[PublishedRow], Efficiency | None] | None = None,
) -> list[RowResult]:
    """Every row's prediction; rows that cannot be simulated carry the reason instead.
    ``efficiency`` picks a run's constants (None: the GPU family's bundled ones)."""
    out: list[RowResult] = []
    for run in group_runs(rows).values():
        reason = skip_reason(run[0])
        if reason is None:
            eff = efficiency(run[0]) if efficiency else None
            try:
                predicted = predict_run(run, eff, quick)
            except InferplanError as err:
                reason = str(err)
        for row in run:
            if reason is not None:
                out.append(RowResult(row, None, reason))
            elif predicted[row.metric] is None:
                out.append(RowResult(row, None, "the simulated run has no such value"))
            elif (burst := burst_reason(row)) is not None:
                out.append(RowResult(row, None, burst))
            else:
                out.append(RowResult(row, predicted[row.metric]))
    return out


def error_summary(results: list[RowResult]) -> dict[str, dict[str, float | int]]:
    """Per metric family: n, median, p90 and max absolute relative error."""
    summary: dict[str, dict[str, float | int]] = {}
    for family in ("throughput", "latency"):
        errors = np.array(
            [abs(r.error) for r in results if r.error is not None and r.row.family == family]
        )
        if errors.size:
            summary[family] = {
                "n": int(errors.size),
                "median_abs_error": float(np.median(errors)),
                "p90_abs_error": float(np.percentile(errors, 90)),
                "max_abs_error": float(errors.max()),
            }
    return summary
