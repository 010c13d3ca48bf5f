"""``trtllm-bench``'s own engine limits for a published offline row: its ``max_batch_size`` and
``max_num_tokens`` heuristic (``tensorrt_llm/bench/build/tuning.py``), which sizes the KV cache
from a generic multi-head formula and the checkpoint's parameter count on the reported memory,
and the padded decode CUDA graphs its perf-overview runs configure (``perf/cudagraph.py``)."""

from __future__ import annotations

import math
from functools import cache

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.cudagraph import CudaGraphs, trtllm_bench_graphs
from inferplan.plan.published import PublishedRow
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import GIB, load_gpu
from inferplan.specs.params import count_params


def _bytes_per_value(dtype: str) -> float:
    return {"nvfp4": 0.5, "mxfp4": 0.5, "fp8": 1.0}.get(dtype, 2.0)


@cache
def _bench_model_facts(model: str) -> tuple[int, int, int, int]:
    """(attention layers, KV heads, head size, parameters) as ``trtllm-bench`` counts them."""
    spec = load_model(model)
    attention = [g for g in spec.layer_groups if g.attention.kind != "linear"]
    att = attention[0].attention
    layers = sum(g.num_layers for g in attention)
    return layers, att.num_kv_heads, att.head_dim, count_params(spec).total


def trtllm_bench_limits(
    row: PublishedRow, model: str, kv_bytes: float, fraction: float
) -> tuple[int, int]:
    """``trtllm-bench``'s (max_batch_size, max_num_tokens) for fixed lengths without chunked
    context (its ``tuning.py`` heuristic, on the device's reported total)."""
    layers, kv_heads, head_dim, params = _bench_model_facts(model)
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


def bench_graphs(row: PublishedRow, plan: MemoryPlan) -> CudaGraphs | None:
    """The decode graphs of a ``trtllm-bench`` row whose settings turn CUDA-graph padding on
    (the PyTorch backend's perf-overview runs, v0.19 on): ``trtllm_bench_graphs`` on the run's
    own limits. None (the generic rule: every batch up to 512 captured, no padding) for the
    C++ engine rows, which state no graph settings, and under pipeline parallelism, whose
    per-micro-batch graphs are not modelled."""
    if row.settings.get("cuda_graph_padding") != "true" or plan.parallelism.pp > 1:
        return None
    return trtllm_bench_graphs(plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
