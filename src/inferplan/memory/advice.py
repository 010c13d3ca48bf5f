"""When a plan does not fit: by how much, and which single change would make it fit.

Alternatives are tried one at a time, each a change a user can make with one flag: more tensor
parallelism (within the GPU's scale-up domain), fp8 weights, fp8 KV cache, a larger GPU from the
catalog, or a shorter ``--max-model-len``.
"""

from __future__ import annotations

from dataclasses import replace

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory, sequence_bytes
from inferplan.specs.hardware import GIB, GpuSpec, bundled_gpus
from inferplan.specs.parallel import Parallelism


def _no_kv_left(plan: MemoryPlan, weights: float, activation: float, reserve: float) -> str:
    """What leaves no KV pool, by the engine's rule (``memory/plan.py``)."""
    cfg, total_gib = plan.config, plan.gpu.memory_bytes / GIB
    if cfg.mem_fraction_static is not None:  # SGLang: activations live outside the fraction
        need, what = (weights + reserve) / GIB, "weights and runtime"
        budget, rule = (
            cfg.mem_fraction_static * total_gib,
            f"mem_fraction_static {cfg.mem_fraction_static:g}",
        )
    elif cfg.kv_cache_free_gpu_mem_fraction is not None:  # TensorRT-LLM: what is free at all
        need, what = (weights + activation + reserve) / GIB, "weights, activations and runtime"
        budget, rule = total_gib, "the whole device"
    else:
        need, what = (weights + activation + reserve) / GIB, "weights, activations and runtime"
        budget = cfg.gpu_memory_utilization * total_gib
        rule = f"{cfg.gpu_memory_utilization:g} x {total_gib:.1f} GiB"
    return (
        f"{what} need {need:.1f} GiB per device, {need - budget + 0.0:.1f} GiB more than the "
        f"{budget:.1f} GiB budget ({rule})"
    )


def shortfall(plan: MemoryPlan) -> str:
    """One sentence: what does not fit and by how much (per device)."""
    stage = min(plan.stages, key=lambda s: s.kv_bytes)
    if stage.kv_bytes <= 0:
        return _no_kv_left(
            plan, stage.weights.total_bytes, stage.activation_bytes, stage.reserve_bytes
        )
    context, spec, par, cfg = plan.max_model_len, plan.spec, plan.parallelism, plan.config
    per_seq = max(sequence_bytes(s, context, spec, par, cfg, plan.kv_format) for s in plan.stages)
    return (
        f"one sequence of --max-model-len {plan.max_model_len} needs {per_seq / GIB:.1f} GiB of "
        f"KV cache per device, {(per_seq - stage.kv_bytes) / GIB:.1f} GiB more than the "
        f"{stage.kv_bytes / GIB:.1f} GiB left"
    )


def alternatives(plan: MemoryPlan) -> list[str]:
    """Single-flag changes that make the plan fit, most local first."""
    spec, gpu, par, cfg = plan.spec, plan.gpu, plan.parallelism, plan.config
    out: list[str] = []

    def fits(g: GpuSpec = gpu, p: Parallelism = par, c: MemoryConfig = cfg) -> bool:
        try:
            return plan_memory(spec, g, p, c).fits
        except InferplanError:
            return False

    for tp in (2, 4, 8, 16, 32, 64):
        if tp > par.tp and tp <= max(gpu.scale_up_domain_size, 1) and fits(p=replace(par, tp=tp)):
            out.append(f"-tp {tp}")
            break
    if plan.weight_formats.linear.bytes_per_value > 1.1 and fits(
        c=replace(cfg, quantization="fp8")
    ):
        out.append("--quantization fp8")
    if plan.kv_format.bytes_per_value > 1 and fits(c=replace(cfg, kv_cache_dtype="fp8")):
        out.append("--kv-cache-dtype fp8")
    for other in sorted(bundled_gpus().values(), key=lambda g: g.memory_bytes):
        if other.memory_bytes > gpu.memory_bytes and fits(g=other):
            out.append(f"--gpu {other.key}")
            break
    shorter = _longest_fitting_context(plan)
    if shorter:
        out.append(f"--max-model-len {shorter}")
    return out


def _longest_fitting_context(plan: MemoryPlan) -> int | None:
    """The largest max-model-len (a multiple of the block size) one sequence fits in, if any."""
    if any(s.kv_bytes <= 0 for s in plan.stages) or plan.fits:
        return None
    lo, hi = 0, plan.max_model_len
    while hi - lo > 1:
        mid = (lo + hi) // 2
        cfg = replace(plan.config, max_model_len=mid)
        if plan_memory(plan.spec, plan.gpu, plan.parallelism, cfg).fits:
            lo = mid
        else:
            hi = mid
    return lo - lo % plan.config.block_size or None


def does_not_fit_message(plan: MemoryPlan) -> str:
    """The one-line error for a plan that does not fit."""
    options = alternatives(plan)
    would = f"; would fit with {' or '.join(options)}" if options else "; no single change fits"
    where = f"{plan.gpu.key} x{plan.parallelism.devices_per_replica}"
    return f"{plan.spec.name} does not fit on {where}: {shortfall(plan)}{would}"
