"""Validation against published measurements: each bundled case simulated end to end.

A case (``data/validation_cases.yaml``, copied from published sources with each one named) gives
a model, GPUs, parallelism, precision, workload and what was measured. This module turns every
measurement into a simulated run with the same settings, runs it, and reports measured vs
predicted and the relative error. Where the source is silent the run states what it assumed,
and those assumptions are printed with the results (``inferplan validate``).

Settings per engine, following the project notes on each engine's defaults:
- TensorRT-LLM ``trtllm-bench throughput``: ``max_batch_size`` and ``max_num_tokens`` from the
  benchmark's own heuristic on the dataset's lengths, 32-token blocks, KV = 0.9 of the memory left
  after weights, FP8 KV cache with an FP8 (ModelOpt) checkpoint.
- vLLM 0.6.0 (``benchmark_serving`` with ShareGPT): 256 sequences, a 8,192-token budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, partial
from importlib import resources
from typing import Any

import numpy as np
import yaml

from inferplan.engine.session import ServingOptions, simulate
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.metrics.summary import summarize
from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.engine_moe import with_engine_moe
from inferplan.plan.served import release_cpu_costs
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import GIB, load_gpu
from inferplan.specs.parallel import Parallelism
from inferplan.specs.params import count_params
from inferplan.workload import synthetic
from inferplan.workload.request import Workload

SHAREGPT_SIGMA = 1.0  # log-space spread assumed for ShareGPT-like lengths
SHAREGPT_MAX_TOKENS = 2048
MLPERF_SERVER_QUERIES = 45_000  # 600 s at 75 req/s: MLPerf's minimum server run


@dataclass(frozen=True)
class Deployment:
    model: str
    gpu: str
    tp: int
    dp: int
    quantization: str | None
    kv_cache_dtype: str
    memory: MemoryConfig
    engine: str = "vllm"
    scheduler: str = "continuous"  # or "prefill-first" (vLLM V0 without chunked prefill)
    num_scheduler_steps: int = 1  # vLLM V0 multi-step scheduling (prefill-first)
    cpu_costs: str | None = None  # an engine release of data/engine_cpu_costs.yaml
    pp: int = 1
    enable_expert_parallel: bool = False


@dataclass(frozen=True)
class Run:
    """One measured number and the simulation that predicts it."""

    case_id: str
    label: str
    metric: str  # a key of ``_METRICS``
    measured: float
    deployment: Deployment
    workload: Callable[[], Workload]
    assumptions: tuple[str, ...]
    max_concurrency: int | None = None  # the client's limit, as vllm bench serve applies it


@dataclass(frozen=True)
class Result:
    run: Run
    predicted: float

    @property
    def error(self) -> float:
        """Signed relative error, (predicted - measured) / measured."""
        return (self.predicted - self.run.measured) / self.run.measured


@cache
def bundled_cases() -> list[dict[str, Any]]:
    text = resources.files("inferplan.plan").joinpath("data/validation_cases.yaml").read_text()
    cases: list[dict[str, Any]] = yaml.safe_load(text)
    return cases


def fixed_workload(num_requests: int, input_tokens: int, output_tokens: int) -> Workload:
    """``num_requests`` identical requests, all at t = 0 (an offline benchmark)."""
    return Workload(
        arrival_s=np.zeros(num_requests),
        input_tokens=np.full(num_requests, input_tokens, dtype=np.int64),
        output_tokens=np.full(num_requests, output_tokens, dtype=np.int64),
        class_ids=np.zeros(num_requests, dtype=np.int64),
        source="fixed",
    )


def sharegpt_like(
    num_requests: int, mean_input: float, mean_output: float, rate: float, seed: int = 0
) -> Workload:
    """Lognormal lengths with the published means; Poisson arrivals at ``rate`` (inf: t = 0)."""
    rng = np.random.default_rng(seed)
    inputs = synthetic.lognormal_lengths(
        num_requests, mean_input, SHAREGPT_SIGMA, SHAREGPT_MAX_TOKENS, rng
    )
    outputs = synthetic.lognormal_lengths(
        num_requests, mean_output, SHAREGPT_SIGMA, SHAREGPT_MAX_TOKENS, rng
    )
    arrivals = synthetic.arrival_times_s(num_requests, rate, 1.0, rng)
    return Workload(
        arrival_s=arrivals,
        input_tokens=inputs,
        output_tokens=outputs,
        class_ids=np.zeros(num_requests, dtype=np.int64),
        source="sharegpt-like",
    )


def _round_up(value: float, step: int) -> int:
    return int(step * math.ceil(value / step))


def trtllm_bench_limits(
    model: str, gpu: str, tp: int, input_len: int, output_len: int, *, value_bytes: float = 1.0
) -> tuple[int, int]:
    """``trtllm-bench``'s (max_batch_size, max_num_tokens) for fixed lengths with chunked context
    off (its 1.0-era ``tuning.py`` heuristic); ``value_bytes`` is the weight and KV element size
    (1 for FP8, 2 for BF16)."""
    spec = load_model(model)
    attention = [g for g in spec.layer_groups if g.attention.kind != "linear"]
    head_dim = attention[0].attention.head_dim
    kv_heads = attention[0].attention.num_kv_heads
    layers = sum(g.num_layers for g in attention)
    kv_gib_per_token = 2 * layers * max(tp, kv_heads) * head_dim * value_bytes / GIB
    weights_gib = count_params(spec).total * value_bytes / GIB
    total_gib = load_gpu(gpu).memory_bytes / GIB * tp
    cache_gib = (total_gib - weights_gib) * 0.9
    max_requests = cache_gib / (kv_gib_per_token * (input_len + output_len))
    batch = min(max_requests, 4096)
    tokens = min(batch * (1 + input_len / output_len), 32768)
    if batch < 256:
        max_batch = max(64, _round_up(batch, 32))
    elif batch < 1024:
        max_batch = _round_up(batch, 128)
    else:
        max_batch = _round_up(batch, 256)
    if tokens < 4096:
        max_tokens = max(2048, _round_up(tokens, 256))
    elif tokens < 8192:
        max_tokens = _round_up(tokens, 512)
    else:
        max_tokens = _round_up(tokens, 1024)
    return max_batch, max(max_tokens, input_len + max_batch)


def _trtllm_runs(case: dict[str, Any]) -> list[Run]:
    runs = []
    tp = int(case["tensor_parallel_size"])
    for input_len, output_len, num_requests, measured in case["rows"]:
        max_batch, max_tokens = trtllm_bench_limits(
            case["model"], case["gpu"], tp, input_len, output_len
        )
        memory = MemoryConfig(
            quantization="fp8",
            kv_cache_dtype="fp8",
            max_num_batched_tokens=max_tokens,
            max_num_seqs=max_batch,
            block_size=32,
            max_model_len=input_len + output_len,
        )
        deployment = Deployment(
            case["model"],
            case["gpu"],
            tp,
            1,
            "fp8",
            "fp8",
            memory,
            engine="trtllm",
            cpu_costs="trtllm-pytorch",  # the perf overview's PyTorch backend
        )
        runs.append(
            Run(
                case_id=case["id"],
                label=f"{input_len}/{output_len} x{num_requests}",
                metric="output_throughput_tok_s",
                measured=float(measured),
                deployment=deployment,
                workload=partial(fixed_workload, num_requests, input_len, output_len),
                assumptions=(
                    f"trtllm-bench limits: max_batch_size {max_batch}, max_num_tokens {max_tokens}",
                    "FP8 KV cache (ModelOpt FP8 checkpoint)",
                    "KV = 0.9 of memory after weights",
                    "TensorRT-LLM scheduling: guaranteed-no-evict admission, no chunked "
                    "context, in-flight batching; no overlap scheduler",
                ),
            )
        )
    return runs


def _vllm060_runs(case: dict[str, Any]) -> list[Run]:
    measured = case["measured"]
    tp = int(case["tensor_parallel_size"])
    # V0 without chunked prefill (off below a 32k context): budget max(max_model_len, 2048).
    memory = MemoryConfig(max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192)
    deployment = Deployment(
        case["model"],
        case["gpu"],
        tp,
        1,
        None,
        "auto",
        memory,
        scheduler="prefill-first",
        num_scheduler_steps=10,
        cpu_costs="vllm-0.6.0",
    )
    assumptions = (
        f"ShareGPT lengths: lognormal, sigma {SHAREGPT_SIGMA}, means 202 / 179, "
        f"capped at {SHAREGPT_MAX_TOKENS}",
        "vLLM 0.6.0 (V0 engine) defaults: 256 sequences, no chunked prefill below a 32k "
        "context, so new prompts run in prefill-only steps (--scheduler prefill-first) with an "
        "8,192-token budget",
        "multi-step scheduling as the blog ran it (--num-scheduler-steps 10): new prompts are "
        "admitted between blocks of 10 decode steps",
        "vLLM 0.6.0's per-step CPU costs (V0 engine) from engine_cpu_costs.yaml, fitted to "
        "these two cases",
    )
    runs = []
    for key, metric, rate in (
        ("request_throughput_req_s_at_inf_rate", "request_throughput_req_s", math.inf),
        ("tpot_mean_s_at_2_qps", "tpot_mean_s", 2.0),
        ("tpot_mean_s_at_32_qps", "tpot_mean_s", 32.0),
    ):
        runs.append(
            Run(
                case["id"],
                key,
                metric,
                float(measured[key]),
                deployment,
                partial(sharegpt_like, 500, 202, 179, rate),
                assumptions,
            )
        )
    return runs


def _mlperf_runs(case: dict[str, Any]) -> list[Run]:
    measured = case["measured"]
    memory = MemoryConfig(
        max_num_batched_tokens=8192, max_num_seqs=2048, block_size=32, max_model_len=4096
    )
    deployment = Deployment(
        case["model"],
        case["gpu"],
        int(case["tensor_parallel_size"]),
        int(case["data_parallel_size"]),
        "fp8",
        "fp8",
        memory,
        engine="trtllm",
        cpu_costs="trtllm-cpp",  # the MLPerf harness runs TensorRT engines from C++
    )
    output_mean = synthetic.lognormal_mean_for_capped(290.0, 1.0, 1024)
    assumptions = (
        "OpenOrca lengths: lognormal, sigma 1.0, input mean 200 (not published in the case), "
        f"outputs capped at 1,024 with a mean of 290 after the cap ({output_mean:.0f} before)",
        f"{MLPERF_SERVER_QUERIES:,} queries: the 600 s MLPerf's server scenario runs at least, "
        "at 75 req/s, drain included as in the real run",
        "FP8 KV cache; TensorRT-LLM scheduling with its default 8,192-token budget and 2,048 "
        "sequences (the MLPerf harness's tuning unknown)",
    )

    def workload() -> Workload:
        rng = np.random.default_rng(0)
        num = MLPERF_SERVER_QUERIES
        return Workload(
            arrival_s=synthetic.arrival_times_s(num, 75.0, 1.0, rng),
            input_tokens=synthetic.lognormal_lengths(num, 200, 1.0, 2048, rng),
            output_tokens=synthetic.lognormal_lengths(num, output_mean, 1.0, 1024, rng),
            class_ids=np.zeros(num, dtype=np.int64),
            source="openorca-like",
        )

    runs = [
        Run(
            case["id"],
            "output_throughput_tok_s",
            "output_throughput_tok_s",
            float(measured["output_throughput_tok_s"]),
            deployment,
            workload,
            assumptions,
        )
    ]
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for stat in ("mean", "p99"):
            runs.append(
                Run(
                    case["id"],
                    f"{metric} {stat}",
                    f"{metric.split('_')[0]}_{stat}_s",
                    float(measured[metric][stat]),
                    deployment,
                    workload,
                    assumptions,
                )
            )
    return runs


def runs_for(case: dict[str, Any]) -> list[Run]:
    """The simulated runs that reproduce one case's measurements."""
    case_id = str(case.get("id", ""))
    if case_id.startswith("trtllm-"):
        return _trtllm_runs(case)
    if case_id.startswith("vllm060-"):
        return _vllm060_runs(case)
    if case_id.startswith("mlperf"):
        return _mlperf_runs(case)
    raise InferplanError(f"validation case {case_id!r}: no runner for this kind of case")


def _plan(deployment: Deployment) -> MemoryPlan:
    par = Parallelism(
        tp=deployment.tp,
        pp=deployment.pp,
        dp=deployment.dp,
        enable_expert_parallel=deployment.enable_expert_parallel,
    )
    memory = replace(
        deployment.memory,
        quantization=deployment.quantization,
        kv_cache_dtype=deployment.kv_cache_dtype,
    )
    plan = plan_memory(load_model(deployment.model), load_gpu(deployment.gpu), par, memory)
    if deployment.engine == "trtllm":  # TensorRT-LLM: 0.9 of what is left after weights
        stage = plan.worst_stage
        used = stage.weights.total_bytes + stage.activation_bytes + stage.reserve_bytes
        utilization = 0.9 + 0.1 * used / plan.gpu.memory_bytes
        plan = plan_memory(
            plan.spec, plan.gpu, par, replace(memory, gpu_memory_utilization=utilization)
        )
    return plan


_METRICS: dict[str, Callable[[dict[str, Any]], float]] = {
    "output_throughput_tok_s": lambda s: float(s["output_throughput"]),
    "request_throughput_req_s": lambda s: float(s["request_throughput"]),
    "tpot_mean_s": lambda s: float(s["mean_tpot_ms"]) / 1e3,
    "tpot_p99_s": lambda s: float(s["p99_tpot_ms"]) / 1e3,
    "ttft_mean_s": lambda s: float(s["mean_ttft_ms"]) / 1e3,
    "ttft_p99_s": lambda s: float(s["p99_ttft_ms"]) / 1e3,
    "e2e_mean_s": lambda s: float(s["mean_e2el_ms"]) / 1e3,
    "e2e_p99_s": lambda s: float(s["p99_e2el_ms"]) / 1e3,
}


@cache
def engine_cpu_costs() -> dict[str, dict[str, float]]:
    """Per-step CPU costs of engine releases that differ from the GPU family's."""
    text = resources.files("inferplan.plan").joinpath("data/engine_cpu_costs.yaml").read_text()
    costs: dict[str, dict[str, float]] = yaml.safe_load(text)
    # TensorRT-LLM's releases, fitted on the published table (scripts/fit_published.py).
    return {**release_cpu_costs(), **costs}


def deployment_efficiency(deployment: Deployment, efficiency: Efficiency) -> Efficiency:
    """``efficiency`` with the deployment's engine release CPU costs, where it names one."""
    if deployment.cpu_costs is None:
        return efficiency
    return replace(efficiency, **engine_cpu_costs()[deployment.cpu_costs])


@cache
def _summary(run_key: tuple[Any, ...], efficiency: Efficiency | None) -> dict[str, Any]:
    run: Run = run_key[0]
    plan = _plan(run.deployment)
    efficiency = deployment_efficiency(run.deployment, efficiency or efficiency_for(plan.gpu))
    model = build_step_model(plan, efficiency=efficiency)
    if isinstance(model, RooflineModel):  # the engine's MoE pieces, as ``simulate`` runs it
        with_engine_moe(model, plan, run.deployment.engine)
    options = ServingOptions(
        data_parallel_size=plan.parallelism.num_replicas,
        engine=run.deployment.engine,
        scheduler=run.deployment.scheduler,
        num_scheduler_steps=run.deployment.num_scheduler_steps,
        max_concurrency=run.max_concurrency,
    )
    result = simulate(plan, model, run.workload(), options)
    return summarize(result.records, result.itl, duration_s=result.duration_s)


def predict(run: Run, efficiency: Efficiency | None = None) -> float:
    """The simulated value of ``run.metric`` (runs sharing a workload share one simulation)."""
    key = (replace(run, label="", metric="", measured=0.0),)
    summary = _summary(key, efficiency)
    if not summary["completed"]:  # every metric would be None
        raise InferplanError(
            f"{run.case_id}: none of the {summary['num_requests']} re-simulated requests "
            f"completed ({summary['rejected']} rejected: prompt and output above the max model "
            "length?), so there is nothing to compare with the measurement"
        )
    return _METRICS[run.metric](summary)


def validate(
    case_ids: list[str] | None = None, efficiency: Efficiency | None = None
) -> list[Result]:
    cases = bundled_cases()
    known = [str(c["id"]) for c in cases]
    for case_id in case_ids or []:
        if case_id not in known:
            raise InferplanError(f"--case: unknown case {case_id!r}; valid: {', '.join(known)}")
    chosen = [c for c in cases if not case_ids or c["id"] in case_ids]
    return [Result(run, predict(run, efficiency)) for case in chosen for run in runs_for(case)]
