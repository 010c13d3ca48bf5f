"""``trtllm-bench``'s own engine limits for a published offline row: its ``max_batch_size`` and
``max_num_tokens`` heuristic (``tensorrt_llm/bench/build/tuning.py``), which sizes the KV cache
from a generic multi-head formula and the checkpoint's parameter count on the reported memory,
and the padded decode CUDA graphs its perf-overview runs configure (``perf/cudagraph.py``).
Two readings of those runs are built (``docs/validation.md``, ``trtput3``): the packed
parameter count of NVFP4 checkpoints (off), and the v1.0 MoE rows as DEP (on since ``dep15``)."""

from __future__ import annotations

import math
from functools import cache

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.cudagraph import CudaGraphs, trtllm_bench_graphs
from inferplan.plan.published import PublishedRow
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import GIB, load_gpu
from inferplan.specs.params import count_params

# docs/validation.md: the packed count alone cross-validates worse than off (`trtput4`: 8.0 /
# 23.5 %); the DEP read alone better on the 808 closed-form rows (`dep15`: 8.0 / 26.1 / 164.6
# -> 7.8 / 22.2 / 118.0 %, median / p90 / max), so it is on.
PACKED_PARAM_COUNT = False  # count NVFP4 weights as the checkpoint stores them (bench_param_count)
READ_STATED_ATTENTION_DP = True  # v1.0 MoE rows as DEP (stated_attention_dp)


def _bytes_per_value(dtype: str) -> float:
    return {"nvfp4": 0.5, "mxfp4": 0.5, "fp8": 1.0}.get(dtype, 2.0)


# NVFP4 checkpoints store two 4-bit values in one ``U8`` element and one FP8 scale per 16
# values: a quantized linear weight of ``n`` values is ``n / 2 + n / 16`` stored elements.
_NVFP4_ELEMENTS_PER_VALUE = 0.5 + 1 / 16


@cache
def _bench_model_facts(model: str) -> tuple[int, int, int, int]:
    """(attention layers, KV heads, head size, parameters) as ``trtllm-bench`` counts them."""
    spec = load_model(model)
    attention = [g for g in spec.layer_groups if g.attention.kind != "linear"]
    att = attention[0].attention
    layers = sum(g.num_layers for g in attention)
    return layers, att.num_kv_heads, att.head_dim, count_params(spec).total


@cache
def bench_param_count(model: str, weights_dtype: str) -> float:
    """The parameter count ``trtllm-bench`` sizes the engine with: the sum of the checkpoint's
    safetensors elements (``bench/build/dataclasses.py`` ``get_param_count``:
    ``parameter_count`` of the safetensors metadata). An NVFP4 (ModelOpt) checkpoint packs its
    linear weights (attention, dense MLP, experts; not the embedding, router, norms or
    ``lm_head``), so it counts about 0.56 elements for each of their values, and its engine
    looks about half its real size to the ``max_batch_size`` heuristic; other formats store
    one element per value."""
    params = count_params(load_model(model))
    if weights_dtype != "nvfp4":
        return float(params.total)
    packed = params.attention + params.dense_mlp + params.routed_experts + params.shared_experts
    return params.total - packed + packed * _NVFP4_ELEMENTS_PER_VALUE


def trtllm_bench_limits(
    row: PublishedRow, model: str, kv_bytes: float, fraction: float
) -> tuple[int, int]:
    """``trtllm-bench``'s (max_batch_size, max_num_tokens) for fixed lengths without chunked
    context (its ``tuning.py`` heuristic, on the device's reported total)."""
    layers, kv_heads, head_dim, total = _bench_model_facts(model)
    params = bench_param_count(model, row.weights_dtype) if PACKED_PARAM_COUNT else total
    isl, osl = row.input_len or 1, row.output_len or 1
    kv_gib_per_token = 2 * layers * max(row.tp, kv_heads) * head_dim * kv_bytes / GIB
    weights_gib = params * _bytes_per_value(row.weights_dtype) / GIB
    total_gib = (load_gpu(row.gpu).memory_bytes + 0.5 * GIB) / GIB * row.tp * row.pp
    cache_gib = max(total_gib - weights_gib, 0.0) * fraction
    batch = min(cache_gib / (kv_gib_per_token * (isl + osl)), 4096) / row.pp
    tokens = min(batch * (1 + isl / osl), 32768)
    if batch < 256:
        max_batch = max(64, 32 * math.ceil(batch / 32))
    elif batch < 1024:
        max_batch = 128 * math.ceil(batch / 128)
    else:
        max_batch = 256 * math.ceil(batch / 256)
    if tokens < 4096:
        max_tokens = max(2048, 256 * math.ceil(tokens / 256))
    elif tokens < 8192:
        max_tokens = 512 * math.ceil(tokens / 512)
    else:
        max_tokens = 1024 * math.ceil(tokens / 1024)
    return max_batch, max(max_tokens, isl + max_batch)


def stated_attention_dp(row: PublishedRow) -> bool:
    """Whether a ``trtllm-bench`` row's published ``llm_options`` turn attention DP on where its
    table gives only ``TPn`` (TensorRT-LLM v1.0's MoE rows: the perf overview's MoE command is
    ``--tp $tp_size --ep $ep_size`` with ``enable_attention_dp: true`` in its ``llm_options.yml``,
    printed inside ``cuda_graph_config``; ``published.md``). Read as DEP: attention data-parallel
    over the TP group, experts across it. Needs more than one GPU in the group; False when
    ``READ_STATED_ATTENTION_DP`` is off."""
    stated = row.settings.get("enable_attention_dp", "").startswith("true")
    bench = row.settings.get("harness") == "trtllm-bench throughput"
    return READ_STATED_ATTENTION_DP and stated and row.tp > 1 and bench


def bench_graphs(row: PublishedRow, plan: MemoryPlan) -> CudaGraphs | None:
    """The decode graphs of a ``trtllm-bench`` row whose settings turn CUDA-graph padding on
    (the PyTorch backend's perf-overview runs, v0.19 on): ``trtllm_bench_graphs`` on the run's
    own limits. None (the generic rule: every batch up to 512 captured, no padding) for the
    C++ engine rows, which state no graph settings, and under pipeline parallelism, whose
    per-micro-batch graphs are not modelled."""
    if row.settings.get("cuda_graph_padding") != "true" or plan.parallelism.pp > 1:
        return None
    return trtllm_bench_graphs(plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
