"""The memory plan as JSON (units in key names) and as terminal tables."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from inferplan.memory.plan import MemoryPlan
from inferplan.specs.hardware import GIB
from inferplan.specs.topology import topology_json


def memory_json(plan: MemoryPlan) -> dict[str, Any]:
    """Machine-readable plan; the stage with the fewest KV blocks stands for "the device"."""
    stage = plan.worst_stage
    heaviest = max(plan.stages, key=lambda s: s.weights.total_bytes)
    par = plan.parallelism
    return {
        "model": plan.spec.name,
        "gpu": plan.gpu.key,
        "tensor_parallel_size": par.tp,
        "pipeline_parallel_size": par.pp,
        "enable_expert_parallel": par.enable_expert_parallel,
        "data_parallel_size": par.dp,
        "attention_data_parallel_size": par.attention_dp,
        "expert_parallel_size": par.ep,
        "devices_per_replica": par.devices_per_replica,
        "quantization": {
            "linear": plan.weight_formats.linear.name,
            "experts": plan.weight_formats.experts.name,
            "other": plan.weight_formats.other.name,
        },
        "kv_cache_dtype": plan.kv_format.name,
        "max_model_len": plan.max_model_len,
        "block_size": plan.config.block_size,
        "gpu_memory_utilization": plan.config.gpu_memory_utilization,
        "params_total": plan.params.total,
        "params_active": plan.params.active,
        "params_active_compute": plan.params.active_compute,
        "params_mtp": plan.params.mtp,
        "params_by_component": plan.params.as_dict(),
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "device_memory_bytes": plan.gpu.memory_bytes,
        "budget_bytes_per_device": plan.budget_bytes,
        "weights_bytes_per_device": heaviest.weights.total_bytes,
        "weights_bytes_by_component": dict(sorted(heaviest.weights.by_component_bytes.items())),
        "activation_bytes_per_device": stage.activation_bytes,
        "reserve_bytes_per_device": stage.reserve_bytes,
        "kv_bytes_per_device": max(stage.kv_bytes, 0.0),
        "kv_capacity_tokens": plan.kv_capacity_tokens,
        "kv_capacity_blocks": plan.num_blocks,
        "max_concurrent_seqs": {str(k): v for k, v in plan.max_concurrent_seqs.items()},
        "fits": plan.fits,
        "num_redundant_experts": par.num_redundant_experts,
        "topology": topology_json(plan.topology, par),
    }


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.2f}"


def memory_tables(plan: MemoryPlan) -> Group:
    """Both axes side by side: parameters (total vs active) and the per-device budget."""
    params = Table(title=f"{plan.spec.name}: parameters", title_justify="left")
    params.add_column("component")
    params.add_column("params", justify="right")
    for name, count in plan.params.as_dict().items():
        if count:
            params.add_row(name, f"{count:,}")
    params.add_row("[bold]total (memory axis)", f"[bold]{plan.params.total:,}")
    params.add_row("[bold]active per token (compute axis)", f"[bold]{plan.params.active:,}")

    stage = plan.worst_stage
    heaviest = max(plan.stages, key=lambda s: s.weights.total_bytes)
    par = plan.parallelism
    title = (
        f"per device: {plan.gpu.name}, tp={par.tp} pp={par.pp}"
        f"{' ep=' + str(par.ep) if par.enable_expert_parallel else ''}"
    )
    budget = Table(title=title, title_justify="left")
    budget.add_column("item")
    budget.add_column("GiB", justify="right")
    budget.add_row("device memory", _gib(plan.gpu.memory_bytes))
    budget.add_row(_budget_label(plan), _gib(plan.budget_bytes))
    for name, value in sorted(heaviest.weights.by_component_bytes.items()):
        if value:
            budget.add_row(f"  weights: {name}", _gib(value))
    budget.add_row("weights", _gib(heaviest.weights.total_bytes))
    budget.add_row("activation peak", _gib(stage.activation_bytes))
    budget.add_row("runtime + comm reserve", _gib(stage.reserve_bytes))
    budget.add_row("[bold]KV cache", f"[bold]{_gib(max(stage.kv_bytes, 0))}")

    kv = Table(title="per replica: KV capacity", title_justify="left")
    kv.add_column("item")
    kv.add_column("value", justify="right")
    kv.add_row(f"KV bytes per token ({plan.kv_format.name})", f"{plan.kv_bytes_per_token:,.0f}")
    kv.add_row(f"KV blocks ({plan.config.block_size} tokens)", f"{plan.num_blocks:,}")
    kv.add_row("KV capacity (tokens)", f"{plan.kv_capacity_tokens:,}")
    for context, seqs in plan.max_concurrent_seqs.items():
        kv.add_row(f"max concurrent seqs @ {context:,} tokens", f"{seqs:,}")
    return Group(params, budget, kv)


def _budget_label(plan: MemoryPlan) -> str:
    """The engine rule's name for what it claims (``memory/plan.py``)."""
    cfg = plan.config
    if cfg.mem_fraction_static is not None:
        return f"budget (mem_fraction_static {cfg.mem_fraction_static:g})"
    if cfg.kv_cache_free_gpu_mem_fraction is not None:
        return f"used (KV {cfg.kv_cache_free_gpu_mem_fraction:g} of what is free)"
    return f"budget (x{cfg.gpu_memory_utilization:g})"
