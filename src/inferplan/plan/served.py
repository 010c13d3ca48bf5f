"""One engine's costs on a deployment, the same for ``inferplan simulate`` and ``validate``.

What an engine release adds to the GPU family's constants (``perf/efficiency.py``):

- **Host costs per step and sequence**: TensorRT-LLM's, by release, fitted to its throughput
  rows by ``scripts/fit_published.py`` (``data/published_cpu_costs.yaml``); vLLM v1's and
  SGLang's fitted to their served latency rows (``perf/engine_overheads.py``).
- **Kernel factor** by kernel class (``perf/engine_kernels.py``), vLLM and SGLang only, a
  BF16 dense run's GEMMs no faster than the engine's FP8 ones (``perf/fp8_gemm.py``); vLLM's
  BF16 MoE runs are their own class, and without a tuned fused-MoE config for the shape their
  experts run at half the rate (``perf/vllm_moe.py``).
- **vLLM's attention kernel on Ampere and Ada** (FlashAttention-2): a decode row in a step with a
  prefill chunk runs a whole 64-row query tile per head (``perf/vllm_attention.py``).
- **SGLang's overlap scheduler** (on by default): its host work hides behind the GPU's
  (``with_overlap_schedule``).
- **Decode CUDA graphs**: the engine's default capture sizes (``perf/cudagraph.py``), except
  TensorRT-LLM's C++ engine flow (0.14, 0.17), whose graphs keep the generic rule.

``simulate --engine E`` uses E's default release (vLLM v1, SGLang 0.5, TensorRT-LLM's PyTorch
backend); a ``--calibration`` file replaces the constants, not the graphs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.cudagraph import CudaGraphs, engine_graphs
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.engine_kernels import (
    bundled_kernels,
    engine_factor,
    plan_kernel_class,
    with_engine_kernels,
)
from inferplan.perf.engine_overheads import overhead_class, with_engine_overheads
from inferplan.perf.fp8_gemm import with_bf16_bound
from inferplan.perf.sglang_moe import sglang_kernel_class
from inferplan.perf.vllm_attention import with_vllm_attention
from inferplan.perf.vllm_fp8 import with_vllm_fp8
from inferplan.perf.vllm_moe import vllm_kernel_class, with_fused_moe_configs
from inferplan.specs.engines import sglang_cuda_graph_max_bs


def trtllm_release(version: str) -> str:
    """TensorRT-LLM's host-cost class: its C++ engine flow (0.14, 0.17) or its PyTorch backend
    (0.19 on, and the default where no version is given), whose Python executor does
    per-request work on every step."""
    return "trtllm-cpp" if version.split("@")[0].startswith(("0.14", "0.17")) else "trtllm-pytorch"


@cache
def release_cpu_costs() -> dict[str, dict[str, float]]:
    """Fitted per-step and per-sequence host costs by engine release (scripts/fit_published.py)."""
    path = resources.files("inferplan.plan").joinpath("data/published_cpu_costs.yaml")
    if not path.is_file():
        return {}
    costs: dict[str, dict[str, float]] = yaml.safe_load(path.read_text()) or {}
    return costs


def host_efficiency(family: Efficiency, engine: str, version: str = "") -> Efficiency:
    """``family`` with the engine release's fitted host costs (``engine``: the ``--engine``
    spelling: vllm, sglang, trtllm)."""
    if engine == "trtllm":
        costs = release_cpu_costs().get(trtllm_release(version), {})
        return replace(family, **costs) if costs else family
    return with_engine_overheads(family, engine, version)


def served_efficiency(
    family: Efficiency,
    plan: MemoryPlan,
    engine: str,
    version: str = "",
    async_scheduling: bool = False,
) -> Efficiency:
    """``family`` as ``engine`` runs ``plan``: its host costs and its kernel factor (and, with
    ``async_scheduling``, vLLM v1's host work behind the GPU's: ``with_async_scheduling``)."""
    eff = host_efficiency(family, engine, version)
    kernel = plan_kernel_class(plan)
    if engine == "vllm":
        kernel = vllm_kernel_class(plan, kernel)
    elif engine == "sglang":
        kernel = sglang_kernel_class(plan, kernel)
    engine_class = overhead_class(engine, version)
    eff = with_engine_kernels(eff, engine_class, kernel)
    if engine_class is not None:  # its BF16 GEMMs no faster than its FP8 ones (fp8_gemm.py)
        fp8_factor = engine_factor(bundled_kernels().get(engine_class, {}), "fp8")
        eff = with_bf16_bound(eff, plan, kernel, fp8_factor)
    eff = with_vllm_configs(eff, plan, engine)
    eff = with_overlap_schedule(eff, engine)
    return with_async_scheduling(eff, engine) if async_scheduling else eff


def with_vllm_configs(eff: Efficiency, plan: MemoryPlan, engine: str) -> Efficiency:
    """``eff`` with vLLM's fused-MoE configs as it ships them (``perf/vllm_moe.py``
    ``with_fused_moe_configs``), its block-scaled FP8 GEMMs at the BF16 rate
    (``perf/vllm_fp8.py`` ``with_vllm_fp8``) and FlashAttention-2's query tile per decode row
    in mixed steps on Ampere and Ada (``perf/vllm_attention.py``); other engines: ``eff``
    unchanged."""
    if engine != "vllm":
        return eff
    return with_vllm_attention(with_vllm_fp8(with_fused_moe_configs(eff, plan), plan), plan)


def with_overlap_schedule(eff: Efficiency, engine: str, disabled: bool = False) -> Efficiency:
    """``eff`` as SGLang 0.5 runs by default: its overlap scheduler (``event_loop_overlap``;
    ``server_args.py`` ``disable_overlap_schedule=False``) launches batch n + 1 on the GPU
    before it processes batch n's results on the CPU (``scheduler.py``: the result queue of
    one batch; lmsys.org/blog/2024-12-04-sglang-v0-4, "zero-overhead batch scheduler"), so its
    per-step and per-sequence host work hides behind the GPU's as far as that lasts
    (``perf/overlap.py``: ``host_overlap`` 1). ``disabled``: ``--disable-overlap-schedule``
    (the host and the GPU take turns, ``host_overlap`` 0). Other engines: ``eff`` unchanged."""
    if engine != "sglang":
        return eff
    return replace(eff, host_overlap=0.0 if disabled else 1.0)


def with_async_scheduling(eff: Efficiency, engine: str) -> Efficiency:
    """``eff`` as vLLM v1 runs with ``--async-scheduling`` (off by default in 0.10-0.13): its
    ``AsyncScheduler`` schedules step n + 1 while the GPU runs step n and takes step n's
    outputs meanwhile (``vllm/v1/engine/core.py`` ``step_with_batch_queue``, batch queue of 2;
    vllm-project/vllm#19970, and #23569 overlapping input preparation too), so the host's
    per-step and per-sequence work hides behind the GPU's as far as that lasts
    (``perf/overlap.py``: ``host_overlap`` 1). Other engines: ``eff`` unchanged (SGLang
    overlaps by default and TensorRT-LLM's overlap is in its fitted costs)."""
    return replace(eff, host_overlap=1.0) if engine == "vllm" else eff


def served_graphs(plan: MemoryPlan, engine: str, version: str = "") -> CudaGraphs | None:
    """The engine's default decode CUDA graphs; None (the generic rule) for TensorRT-LLM's C++
    engine flow."""
    if engine == "trtllm" and trtllm_release(version) == "trtllm-cpp":
        return None
    cfg = plan.config
    par = plan.parallelism  # SGLang's ``--tp`` spans the DP-attention ranks, as its memory rule
    max_bs = sglang_cuda_graph_max_bs(plan.gpu, par.tp * par.attention_dp)
    return engine_graphs(engine, cfg.max_num_seqs, cfg.max_num_batched_tokens, max_bs)


def decode_floor_s(plan: MemoryPlan) -> float:
    """The shortest a decode step can be: the active weights (embeddings aside), in the
    smallest of the run's weight formats, read once at peak HBM bandwidth, shared by the
    replica's devices. A measured inter-token gap below it is not a step: the server
    delivered several tokens in one burst (``validate`` lists such rows)."""
    formats = plan.weight_formats
    smallest = min(f.bytes_per_value for f in (formats.linear, formats.experts, formats.other))
    weight_bytes = plan.params.active_compute * smallest
    devices = plan.parallelism.devices_per_replica
    return weight_bytes / (devices * plan.gpu.memory_bandwidth_bytes_s)
