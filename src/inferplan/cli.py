"""The ``inferplan`` command: parse flags (vLLM's names), call the library, print.

Every user error surfaces as one line on stderr (``error: ...``) and a non-zero exit; a model
that does not fit exits 1, bad input exits 2.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from inferplan.engine.policies import POLICIES, ROUTERS
from inferplan.engine.session import PREEMPTION_MODES, SCHEDULERS, ServingOptions
from inferplan.engine.session import simulate as run_simulation
from inferplan.errors import DoesNotFitError, InferplanError
from inferplan.memory.advice import does_not_fit_message
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.metrics.summary import summarize
from inferplan.perf.factory import build_step_model
from inferplan.perf.moe import Routing
from inferplan.perf.sweep import compute_bound_batch_size, decode_row, prefill_row
from inferplan.report.catalog import gpus_json, gpus_table, models_json, models_table
from inferplan.report.console import console
from inferplan.report.memory import memory_json, memory_tables
from inferplan.report.progress import progress_bar
from inferplan.report.roofline import roofline_tables
from inferplan.report.simulate import simulate_tables
from inferplan.specs.catalog import load_model
from inferplan.specs.engines import ENGINES, engine_defaults
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism
from inferplan.workload import build_workload


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    no_args_is_help=True,
)
@click.version_option(package_name="inferplan")
def app() -> None:
    """Capacity planner and serving simulator for LLM inference."""


def deployment_options(func: Any) -> Any:
    """Model, GPU, parallelism and memory flags, with vLLM's names (shared by commands)."""
    options = [
        click.option(
            "--model", required=True, help="Bundled model (HF id or short name) or config.json path"
        ),
        click.option("--gpu", required=True, help="Catalog GPU (h100, h200, ...) or YAML file"),
        click.option("--tensor-parallel-size", "-tp", "tp", type=int, default=1, show_default=True),
        click.option(
            "--pipeline-parallel-size", "-pp", "pp", type=int, default=1, show_default=True
        ),
        click.option(
            "--enable-expert-parallel", is_flag=True, help="Spread whole experts over the ranks"
        ),
        click.option(
            "--quantization",
            "-q",
            default=None,
            help="Weights: bf16|fp16|fp8|int8|int4|nvfp4|mxfp4 (default: checkpoint's)",
        ),
        click.option(
            "--kv-cache-dtype",
            default="auto",
            show_default=True,
            help="auto|bf16|fp16|fp8|fp8_e4m3|fp8_e5m2|int8|int4",
        ),
        click.option(
            "--max-model-len",
            type=int,
            default=None,
            help="Max context length (default: the model's)",
        ),
        click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True),
        click.option(
            "--max-num-batched-tokens",
            type=int,
            default=None,
            help="Token budget per step (default: the engine's)",
        ),
        click.option(
            "--max-num-seqs",
            type=int,
            default=None,
            help="Max running sequences (default: the engine's)",
        ),
        click.option("--block-size", type=int, default=None, help="KV block size in tokens"),
        click.option(
            "--engine",
            type=click.Choice(ENGINES),
            default="vllm",
            show_default=True,
            help="Whose defaults and scheduling to emulate",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


json_option = click.option(
    "--json", "json_out", is_flag=True, help="Machine-readable output on stdout"
)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def build_memory_plan(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    ep: bool,
    quantization: str | None,
    kv_cache_dtype: str,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    block_size: int | None,
    engine: str = "vllm",
) -> MemoryPlan:
    """Resolve flags (engine defaults where unset) into a memory plan."""
    spec = load_model(model)
    device = load_gpu(gpu)
    defaults = engine_defaults(engine, device)
    cfg = MemoryConfig(
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=(
            defaults.max_num_batched_tokens
            if max_num_batched_tokens is None
            else max_num_batched_tokens
        ),
        max_num_seqs=defaults.max_num_seqs if max_num_seqs is None else max_num_seqs,
        block_size=defaults.block_size if block_size is None else block_size,
    )
    if max_num_batched_tokens is not None and max_num_batched_tokens < 1:
        raise InferplanError(
            f"--max-num-batched-tokens: must be >= 1, got {max_num_batched_tokens}"
        )
    return plan_memory(spec, device, Parallelism(tp=tp, pp=pp, enable_expert_parallel=ep), cfg)


@app.command()
@deployment_options
@json_option
def memory(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    enable_expert_parallel: bool,
    quantization: str | None,
    kv_cache_dtype: str,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    block_size: int | None,
    engine: str,
    json_out: bool,
) -> None:
    """Per-device memory plan: weights, activations, KV cache, and max concurrency."""
    plan = build_memory_plan(
        model,
        gpu,
        tp,
        pp,
        enable_expert_parallel,
        quantization,
        kv_cache_dtype,
        max_model_len,
        gpu_memory_utilization,
        max_num_batched_tokens,
        max_num_seqs,
        block_size,
        engine,
    )
    if json_out:
        _print_json(memory_json(plan))
    else:
        console().print(memory_tables(plan))
    if not plan.fits:
        raise DoesNotFitError(does_not_fit_message(plan))


def _int_list(flag: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InferplanError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InferplanError(f"{flag}: every value must be an integer >= 1, got {text!r}")
    return values


@app.command()
@deployment_options
@click.option(
    "--batch-sizes",
    default="1,8,32,128,512",
    show_default=True,
    help="Decode batch sizes (comma-separated)",
)
@click.option(
    "--input-len",
    default="128,1024,4096,16384",
    show_default=True,
    help="Prefill prompt lengths (comma-separated)",
)
@click.option(
    "--context-len",
    default="1024",
    show_default=True,
    help="Decode context lengths per sequence (comma-separated)",
)
@click.option(
    "--moe-skew",
    type=float,
    default=0.0,
    show_default=True,
    help="Zipf exponent of expert popularity (0 = uniform routing)",
)
@click.option("--no-cuda-graphs", is_flag=True, help="Model eager execution (enforce-eager)")
@json_option
def roofline(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    enable_expert_parallel: bool,
    quantization: str | None,
    kv_cache_dtype: str,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    block_size: int | None,
    engine: str,
    batch_sizes: str,
    input_len: str,
    context_len: str,
    moe_skew: float,
    no_cuda_graphs: bool,
    json_out: bool,
) -> None:
    """Step-time model: prefill and decode speed, and which bound dominates."""
    plan = build_memory_plan(
        model,
        gpu,
        tp,
        pp,
        enable_expert_parallel,
        quantization,
        kv_cache_dtype,
        max_model_len,
        gpu_memory_utilization,
        max_num_batched_tokens,
        max_num_seqs,
        block_size,
        engine,
    )
    step_model = build_step_model(plan, routing=Routing(moe_skew), cuda_graphs=not no_cuda_graphs)
    contexts = _int_list("--context-len", context_len)
    result = {
        "model": plan.spec.name,
        "gpu": plan.gpu.key,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "prefill": [prefill_row(step_model, n) for n in _int_list("--input-len", input_len)],
        "decode": [
            decode_row(step_model, b, c)
            for c in contexts
            for b in _int_list("--batch-sizes", batch_sizes)
        ],
        "compute_bound_batch_size": compute_bound_batch_size(step_model),
    }
    if json_out:
        _print_json(result)
    else:
        console().print(roofline_tables(result))


def workload_options(func: Any) -> Any:
    """``vllm bench serve``'s dataset and load flags."""
    options = [
        click.option(
            "--dataset-name",
            default="random",
            show_default=True,
            help="random|trace|servegen|reasoning",
        ),
        click.option(
            "--dataset-path",
            default=None,
            help="Trace file or bundled trace name (see README)",
        ),
        click.option("--num-prompts", type=int, default=None, help="Requests (default 1000)"),
        click.option("--random-input-len", type=int, default=None),
        click.option("--random-output-len", type=int, default=None),
        click.option("--random-range-ratio", type=float, default=None),
        click.option(
            "--request-rate",
            type=float,
            default=None,
            help="Requests/s (default inf: all at once; traces keep their times)",
        ),
        click.option(
            "--burstiness",
            type=float,
            default=1.0,
            show_default=True,
            help="Gamma shape of inter-arrivals (1 = Poisson)",
        ),
        click.option(
            "--max-concurrency",
            type=int,
            default=None,
            help="Client-side cap on requests in flight",
        ),
        click.option("--seed", type=int, default=0, show_default=True),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _goodput(pairs: tuple[str, ...]) -> dict[str, float] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        try:
            out[key] = float(value)
        except ValueError:
            raise InferplanError(
                f"--goodput: expected metric:ms (e.g. ttft:500), got {pair!r}"
            ) from None
        if not sep:
            raise InferplanError(f"--goodput: expected metric:ms (e.g. ttft:500), got {pair!r}")
    return out


@app.command()
@deployment_options
@workload_options
@click.option(
    "--scheduler",
    type=click.Choice(SCHEDULERS),
    default="continuous",
    show_default=True,
    help="Continuous (iteration-level) or static batching",
)
@click.option(
    "--preemption-mode", type=click.Choice(PREEMPTION_MODES), default="recompute", show_default=True
)
@click.option("--scheduling-policy", type=click.Choice(POLICIES), default="fcfs", show_default=True)
@click.option("--data-parallel-size", "-dp", type=int, default=1, show_default=True)
@click.option(
    "--router", type=click.Choice(tuple(ROUTERS)), default="round_robin", show_default=True
)
@click.option("--exact", is_flag=True, help="Step every iteration (the reference mode)")
@click.option("--metric-percentiles", default="99", show_default=True)
@click.option("--goodput", multiple=True, help="SLO as metric:ms, e.g. --goodput ttft:500")
@click.option("--moe-skew", type=float, default=0.0, show_default=True)
@json_option
def simulate(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    enable_expert_parallel: bool,
    quantization: str | None,
    kv_cache_dtype: str,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    block_size: int | None,
    engine: str,
    dataset_name: str,
    dataset_path: str | None,
    num_prompts: int | None,
    random_input_len: int | None,
    random_output_len: int | None,
    random_range_ratio: float | None,
    request_rate: float | None,
    burstiness: float,
    max_concurrency: int | None,
    seed: int,
    scheduler: str,
    preemption_mode: str,
    scheduling_policy: str,
    data_parallel_size: int,
    router: str,
    exact: bool,
    metric_percentiles: str,
    goodput: tuple[str, ...],
    moe_skew: float,
    json_out: bool,
) -> None:
    """Replay a workload on replicas of a deployment; report what users would measure."""
    plan = build_memory_plan(
        model,
        gpu,
        tp,
        pp,
        enable_expert_parallel,
        quantization,
        kv_cache_dtype,
        max_model_len,
        gpu_memory_utilization,
        max_num_batched_tokens,
        max_num_seqs,
        block_size,
        engine,
    )
    if not plan.fits:
        raise DoesNotFitError(does_not_fit_message(plan))
    workload = build_workload(
        dataset_name,
        dataset_path=dataset_path,
        num_prompts=num_prompts,
        random_input_len=random_input_len,
        random_output_len=random_output_len,
        random_range_ratio=random_range_ratio,
        request_rate=request_rate,
        burstiness=burstiness,
        seed=seed,
    )
    options = ServingOptions(
        scheduler=scheduler,
        preemption_mode=preemption_mode,
        scheduling_policy=scheduling_policy,
        data_parallel_size=data_parallel_size,
        router=router,
        max_concurrency=max_concurrency,
        exact=exact,
    )
    step_model = build_step_model(plan, routing=Routing(moe_skew))
    percentiles = [float(p) for p in metric_percentiles.split(",") if p.strip()]
    with progress_bar(workload.num_requests, enabled=not json_out) as advance:
        result = run_simulation(plan, step_model, workload, options, advance)
    traces = result.traces
    summary = summarize(
        result.records,
        result.itl,
        duration_s=result.duration_s,
        percentiles=percentiles,
        goodput_slo_ms=_goodput(goodput),
        kv_usage=traces[0] if len(traces) == 1 else None,
    )
    summary["num_steps"] = result.num_steps
    summary["idle_slot_steps"] = result.idle_slot_steps
    summary["data_parallel_size"] = data_parallel_size
    if json_out:
        _print_json(summary)
    else:
        console().print(simulate_tables(summary))


@app.command()
@json_option
def models(json_out: bool) -> None:
    """List the bundled models with total and active parameters."""
    if json_out:
        _print_json(models_json())
    else:
        console().print(models_table())


@app.command()
@json_option
def gpus(json_out: bool) -> None:
    """List the bundled accelerators (published figures, sources in the catalog file)."""
    if json_out:
        _print_json(gpus_json())
    else:
        console().print(gpus_table())


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turn every user error into one line and an exit status."""
    try:
        result = app.main(args=argv, standalone_mode=False, prog_name="inferplan")
    except InferplanError as err:
        sys.stderr.write(f"error: {err}\n")
        return err.exit_code
    except click.exceptions.NoArgsIsHelpError as err:
        sys.stdout.write(err.ctx.get_help() + "\n")
        return 0
    except click.UsageError as err:
        sys.stderr.write(f"error: {err.format_message()}\n")
        return 2
    except click.exceptions.Abort:
        sys.stderr.write("error: aborted\n")
        return 130
    except click.exceptions.Exit as err:
        return int(err.exit_code)
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
