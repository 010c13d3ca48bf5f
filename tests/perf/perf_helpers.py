"""Factory helpers for the step-time model tests: bundled models on catalog GPUs, unit efficiency,
a toy accelerator, the batches the tests use, and the decode-line check shared by the roofline
and table models.

Kept out of ``conftest.py`` on purpose: the tests import these by name, and a second
``conftest`` module in ``tests/`` would clash with ``tests/metrics/conftest.py`` under mypy.
"""

from __future__ import annotations

import math
from functools import cache

import pytest

from inferplan.errors import InferplanError
from inferplan.memory.plan import (
    MemoryConfig,
    MemoryPlan,
    check_sharding,
    plan_memory,
    weight_formats_for,
)
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.moe import Routing
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.catalog import load_model
from inferplan.specs.dtypes import kv_format
from inferplan.specs.hardware import GpuSpec, load_gpu
from inferplan.specs.model import ModelSpec
from inferplan.specs.parallel import Parallelism

# One of each architecture the model distinguishes: dense GQA (8B, 70B), MoE (Qwen3-30B-A3B),
# MLA + MoE with shared experts and dense-first layers (DeepSeek-V3), sliding-window MoE with
# mxfp4 experts (gpt-oss-120b), sliding/global interleave (gemma-3), hybrid linear attention
# (Qwen3-Next), Mamba-2 + attention + MoE blocks of one sublayer each (Nemotron-H).
MODELS = (
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Qwen3-30B-A3B",
    "DeepSeek-V3",
    "gpt-oss-120b",
    "gemma-3-27b-it",
    "Qwen3-Next-80B-A3B-Thinking",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
)
GPUS = ("h100", "h200", "b200", "mi300x", "a100")
LINE_RTOL = 1e-9  # decode_line vs step_time: exact up to float rounding


@cache
def spec_of(name: str) -> ModelSpec:
    return load_model(name)


def is_valid_split(name: str, par: Parallelism) -> bool:
    """Whether vLLM would accept this split of ``name`` (head and width divisibility)."""
    try:
        check_sharding(spec_of(name), par)
    except InferplanError:
        return False
    return True


@cache
def roofline(
    name: str,
    gpu: str = "h100",
    *,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    ep: bool = False,
    zipf: float = 0.0,
    placement: str = "linear",
    cuda_graphs: bool = True,
) -> RooflineModel:
    """The analytic model of ``name`` in its checkpoint's formats, with the bundled efficiencies."""
    spec = spec_of(name)
    device = load_gpu(gpu)
    return RooflineModel(
        spec,
        device,
        Parallelism(tp=tp, pp=pp, dp=dp, enable_expert_parallel=ep),
        weight_formats_for(spec, None),
        kv_format("auto", model_dtype=spec.dtype),
        efficiency_for(device),
        routing=Routing(zipf, placement=placement),
        cuda_graphs=cuda_graphs,
    )


def unit_efficiency(**changes: float) -> Efficiency:
    """Every fraction 1, every overhead 0, no half-speed GEMM ramp: the bare roofline."""
    values = {
        "gemm_compute": 1.0,
        "gemm_half_tokens": 0.0,
        "memory_bandwidth": 1.0,
        "attention_compute": 1.0,
        "attention_memory": 1.0,
        "collective_bandwidth": 1.0,
        "collective_latency_s": 0.0,
        "step_overhead_s": 0.0,
        "per_seq_overhead_s": 0.0,
        "eager_layer_overhead_s": 0.0,
        "elementwise_passes": 0.0,
    }
    values.update(changes)
    return Efficiency(**values)


def toy_gpu(
    *,
    bandwidth_bytes_s: float = 1e12,
    bf16_flops: float = 1e13,
    scale_up_bytes_s: float | None = 1e11,
    scale_up_domain_size: int = 8,
    scale_out_bytes_s: float | None = 1e10,
) -> GpuSpec:
    """A made-up accelerator with round numbers, so hand computations stay readable."""
    return GpuSpec(
        key="toy",
        name="toy",
        vendor="none",
        architecture="unknown",
        memory_bytes=1e11,
        memory_bandwidth_bytes_s=bandwidth_bytes_s,
        peak_flops={"bf16": bf16_flops},
        scale_up_bytes_s=scale_up_bytes_s,
        scale_up_domain_size=scale_up_domain_size,
        host_link_bytes_s=None,
        scale_out_bytes_s=scale_out_bytes_s,
        tdp_w=None,
        price_usd_per_hour=None,
    )


def decode(num_seqs: int, context_per_seq: int) -> StepBatch:
    """A pure decode step: ``num_seqs`` sequences, each attending to ``context_per_seq`` tokens."""
    return StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=num_seqs * context_per_seq)


def prefill(prompt_tokens: int) -> StepBatch:
    """One whole prompt in one step, nothing cached."""
    return StepBatch(
        prefill_tokens=prompt_tokens,
        prefill_attention_pairs=chunk_attention_pairs(prompt_tokens, 0),
        num_prefill_seqs=1,
    )


def decode_step_s(model: StepTimeModel, num_seqs: int, context: int) -> float:
    return model.step_time(
        StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context)
    ).total_s


def probe_points(context: int, limit: float, num_seqs: int) -> list[int]:
    """``C`` itself, the next steps of the stretch, and points spread up to just below limit."""
    points = [context, context + 1, context + num_seqs, context + 17 * num_seqs]
    end = limit if math.isfinite(limit) else context + num_seqs * 200_000
    for fraction in (0.1, 0.37, 0.5, 0.9, 0.999):
        points.append(int(context + fraction * (end - context)))
    if math.isfinite(limit):
        points.append(math.ceil(limit) - 1)
    return [p for p in points if context <= p < limit]


def assert_line_matches(model: StepTimeModel, num_seqs: int, context: int) -> float:
    """Check ``decode_line(n, C)`` against ``step_time`` on ``[C, limit)``; return the limit."""
    a, b, limit = model.decode_line(num_seqs, context)
    assert limit > context
    points = probe_points(context, limit, num_seqs)
    assert points[0] == context
    for point in points:
        assert a + b * point == pytest.approx(decode_step_s(model, num_seqs, point), rel=LINE_RTOL)
    return limit


def mixed_batch(
    chunks: list[tuple[int, int]], num_decode: int, context_per_seq: int, drafts: int = 0
) -> StepBatch:
    """Prefill chunks ``(q, o)`` (``q`` tokens after ``o`` cached) beside ``num_decode``
    decodes of ``context_per_seq`` tokens each (and ``drafts`` speculative tokens each), as the
    engine's mixed steps sum them."""
    return StepBatch(
        prefill_tokens=sum(q for q, _ in chunks),
        prefill_attention_pairs=float(sum(chunk_attention_pairs(q, o) for q, o in chunks)),
        prefill_context_tokens=sum(o for _, o in chunks),
        num_prefill_seqs=len(chunks),
        num_decode_seqs=num_decode,
        decode_context_tokens=num_decode * context_per_seq,
        num_draft_tokens=drafts,
    )


def tp_plan(model: str, gpu: str, tp: int, quantization: str | None = None) -> MemoryPlan:
    """A bundled model's memory plan on ``tp`` GPUs at a 4,096-token context."""
    return plan_memory(
        load_model(model),
        load_gpu(gpu),
        Parallelism(tp=tp),
        MemoryConfig(quantization=quantization, max_model_len=4096),
    )
