"""Pruning before simulation: the memory axis first, then bounds on the compute axis.

Memory: the replica's memory plan (``memory.plan``) must fit with ``max_model_len`` set to the
longest request the traffic can send, so that no request is ever refused for length.

Compute (all from the step-time model, so they hold for the simulation that uses that model):

- *Throughput upper bound* per replica, in requests/s of the traffic mix: decode can give at most
  ``B / t_decode(B)`` tokens/s with ``B = min(max_num_seqs, KV tokens / mean context)``
  sequences at the mix's mean context, and prefill at most ``budget / t_prefill(budget)``
  tokens/s; each alone bounds the rate (``min`` of the two, since a mixed step may share weight
  reads between them). Hence a *lower bound* on replicas and on cost.
- *KV bound* (Little's law): a request holds at least ``input + output / 2`` tokens of KV on
  average over its ``output`` decode steps, each at least ``t_decode(1)`` long, so the KV a
  replica holds on average is at least ``sum_c rate_c x E[(in + out/2) x out] x t_decode(1)``;
  it cannot exceed the KV capacity, which bounds the rate per replica from the memory axis.
- *Latency lower bounds*: a decode step is never faster than one sequence alone
  (``t_decode(1)``), so TPOT and ITL percentiles are at least that, E2EL's at least the output
  length's percentile times it; TTFT's at least the prefill of the input length's percentile
  alone. A configuration whose bound misses an SLO can never meet it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.engine_moe import with_engine_moe
from inferplan.plan.request import PlanRequest
from inferplan.plan.slo import class_targets
from inferplan.plan.space import ReplicaConfig
from inferplan.plan.traffic import LengthStats
from inferplan.plan.trtllm_runtime import runtime_efficiency, runtime_graphs
from inferplan.specs.catalog import load_model
from inferplan.specs.engines import (
    TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION,
    engine_defaults,
    sglang_mem_fraction_static,
    vllm_expert_padding,
)
from inferplan.specs.hardware import load_gpu
from inferplan.specs.model import ModelSpec


@dataclass(frozen=True)
class Bounds:
    max_rate_req_s: float  # per replica, requests/s of the traffic mix
    decode_batch: int
    decode_step_s: float
    min_decode_step_s: float  # one sequence alone
    bound: str  # what limits the decode step: compute, memory, communication, overhead
    slo_violation: str | None  # a target no load can meet, or None


def build_plan(
    model_name: str, cfg: ReplicaConfig, max_model_len: int, fraction: float | None
) -> MemoryPlan:
    """The memory plan of one replica of ``cfg`` under its engine's own memory rule (and block
    size): ``fraction`` is the request's ``gpu_memory_utilization`` where it gave one, else
    None for the engine's default (``memory_fraction``)."""
    gpu = load_gpu(cfg.gpu)
    defaults = engine_defaults(cfg.engine, gpu)
    spec = _spec(model_name)
    padding = vllm_expert_padding(spec, gpu, cfg.quantization) if cfg.engine == "vllm" else None
    memory = MemoryConfig(
        quantization=cfg.quantization,
        kv_cache_dtype=cfg.kv_cache_dtype,
        max_model_len=max_model_len,
        gpu_memory_utilization=defaults.gpu_memory_utilization,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_seqs=cfg.max_num_seqs,
        block_size=defaults.block_size,
        expert_padding=padding,
    )
    value = memory_fraction(cfg, fraction)
    if cfg.engine == "trtllm":  # of the memory still free after the weights
        memory = replace(memory, kv_cache_free_gpu_mem_fraction=value)
    elif cfg.engine == "sglang":  # of the device, for weights and KV
        memory = replace(memory, mem_fraction_static=value)
    else:
        memory = replace(memory, gpu_memory_utilization=value)
    return plan_memory(spec, gpu, cfg.parallelism, memory)


def memory_fraction(cfg: ReplicaConfig, fraction: float | None) -> float:
    """The value of ``cfg.engine``'s memory flag: ``fraction`` where the request gave one, else
    the engine's default: vLLM's ``gpu_memory_utilization`` 0.9, TensorRT-LLM's
    ``kv_cache_free_gpu_mem_fraction`` 0.9, SGLang's ``mem_fraction_static`` rule
    (``specs/engines.py``)."""
    if fraction is not None:
        return fraction
    if cfg.engine == "trtllm":
        return TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION
    gpu = load_gpu(cfg.gpu)
    if cfg.engine == "sglang":
        return sglang_mem_fraction_static(gpu, cfg.tp, cfg.pp, cfg.parallelism.attention_dp)
    return engine_defaults(cfg.engine, gpu).gpu_memory_utilization


@cache
def _spec(model_name: str) -> ModelSpec:
    return load_model(model_name)


def step_model(plan: MemoryPlan, engine: str, trtllm_runtime: str | None = None) -> StepTimeModel:
    """The step-time model of ``engine`` serving ``plan``: its host costs, kernel factor,
    decode CUDA graphs (``plan/served.py``; TensorRT-LLM's by runtime,
    ``plan/trtllm_runtime.py``) and MoE pieces (``plan/engine_moe.py``), as ``inferplan
    simulate --engine`` predicts."""
    efficiency = runtime_efficiency(efficiency_for(plan.gpu), plan, engine, trtllm_runtime)
    model = build_step_model(plan, efficiency=efficiency)
    if isinstance(model, RooflineModel):
        model.graphs = runtime_graphs(plan, engine, trtllm_runtime)
        with_engine_moe(model, plan, engine)  # as ``validate`` and ``simulate`` run it
    return model


def mix_means(request: PlanRequest, stats: list[LengthStats]) -> tuple[float, float]:
    """Rate-weighted mean (input, output) tokens of the traffic mix."""
    rates = np.array([c.request_rate for c in request.traffic])
    weights = rates / rates.sum()
    mean_in = float(sum(w * s.mean_input for w, s in zip(weights, stats, strict=True)))
    mean_out = float(sum(w * s.mean_output for w, s in zip(weights, stats, strict=True)))
    return mean_in, mean_out


def compute_bounds(
    plan: MemoryPlan, model: StepTimeModel, request: PlanRequest, stats: list[LengthStats]
) -> Bounds:
    mean_in, mean_out = mix_means(request, stats)
    context = max(1.0, mean_in + mean_out / 2)
    kv_seqs = max(1, int(plan.kv_capacity_tokens // context))
    batch = max(1, min(plan.config.max_num_seqs, kv_seqs))
    decode = model.step_time(
        StepBatch(num_decode_seqs=batch, decode_context_tokens=int(batch * context))
    )
    budget = plan.config.max_num_batched_tokens
    prefill = model.step_time(
        StepBatch(
            prefill_tokens=budget,
            prefill_attention_pairs=chunk_attention_pairs(budget, 0),
            num_prefill_seqs=1,
        )
    )
    # Speculative decoding emits up to 1 + k tokens a step, and a step costs no less than the
    # plain one: the bounds divide the plain decode's time per token by 1 + k.
    spec = request.speculative
    per_step = 1 if spec is None else 1 + spec.num_speculative_tokens
    decode_rate = batch / decode.total_s / max(mean_out, 1.0) * per_step
    prefill_rate = budget / prefill.total_s / max(mean_in, 1.0)
    single = model.step_time(StepBatch(num_decode_seqs=1, decode_context_tokens=1)).total_s
    rates = np.array([c.request_rate for c in request.traffic])
    token_steps = float(np.dot(rates / rates.sum(), [s.kv_token_steps for s in stats]))
    kv_rate = plan.kv_capacity_tokens / (token_steps * single) * per_step
    return Bounds(
        max_rate_req_s=min(decode_rate, prefill_rate, kv_rate),
        decode_batch=batch,
        decode_step_s=decode.total_s,
        min_decode_step_s=single,
        bound=decode.bound,
        slo_violation=_latency_violation(model, request, stats, single, per_step),
    )


def _latency_violation(
    model: StepTimeModel,
    request: PlanRequest,
    stats: list[LengthStats],
    single_s: float,
    tokens_per_step: int = 1,
) -> str | None:
    for cls, st in zip(request.traffic, stats, strict=True):
        for target in class_targets(cls.slo):
            if target.limit_s is None or target.percentile is None:
                continue
            pct = target.percentile
            if target.metric == "itl":  # one step, whatever it emits
                floor_s = single_s
            elif target.metric == "tpot":
                floor_s = single_s / tokens_per_step
            elif target.metric == "e2el":
                tokens = max(float(np.percentile(st.outputs, pct)) - 1, 0)
                floor_s = tokens * single_s / tokens_per_step
            else:
                tokens = int(np.percentile(st.inputs, pct))
                floor_s = model.step_time(
                    StepBatch(
                        prefill_tokens=tokens,
                        prefill_attention_pairs=chunk_attention_pairs(tokens, 0),
                        num_prefill_seqs=1,
                    )
                ).total_s
            if floor_s > target.limit_s:
                return f"{cls.name}:{target.key} >= {floor_s * 1000:.0f} ms even unloaded"
    return None


def replicas_lower_bound(bounds: Bounds, total_rate_req_s: float) -> int:
    return max(1, math.ceil(total_rate_req_s / bounds.max_rate_req_s))


def memory_prune(
    model_name: str, cfg: ReplicaConfig, max_model_len: int, utilization: float | None
) -> str | None:
    """Why the configuration cannot hold the model and one longest request, or None."""
    try:
        plan = build_plan(model_name, cfg, max_model_len, utilization)
    except InferplanError as err:
        return str(err)
    if not plan.fits:
        return "weights + one longest request's KV exceed the memory"
    return None
