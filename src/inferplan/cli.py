"""The ``inferplan`` command: parse flags (vLLM's names), call the library, print.

Every user error surfaces as one line on stderr (``error: ...``) and a non-zero exit; a model
that does not fit exits 1, bad input exits 2, a bug in inferplan exits 3 (``docs/errors.md``).
Flags are checked by ``cli_checks`` before any work.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import click

from inferplan.cli_admission import AdmissionFlags, admission_options
from inferplan.cli_checks import (
    Bound,
    bounded,
    check_output_path,
    goodput_slo,
    int_list,
    or_auto,
    percentile_list,
)
from inferplan.cli_classpools import ClassPoolFlags, classpool_options
from inferplan.cli_colocated import colocated_plan, simulate_colocated
from inferplan.cli_disagg import DisaggFlags, disagg_options, simulate_disaggregated
from inferplan.cli_fit import calibrate, validate
from inferplan.cli_flags import (
    DeploymentFlags,
    WorkloadFlags,
    deployment_options,
    json_option,
    workload_options,
)
from inferplan.cli_output import refuse_operator_table, show
from inferplan.cli_plan import plan
from inferplan.cli_prefix import PrefixFlags, prefix_options
from inferplan.cli_speculative import SpeculativeFlags, speculative_options
from inferplan.cli_tiers import KvTierFlags, kv_tier_options
from inferplan.cluster import pools
from inferplan.engine.policies import POLICIES, ROUTERS
from inferplan.engine.session import (
    PREEMPTION_MODES,
    SCHEDULERS,
    ServingOptions,
    rejection_counts,
    sglang_radix_note,
)
from inferplan.errors import DoesNotFitError, InferplanError
from inferplan.limits import (
    MAX_NUM_REQUESTS,
    MAX_NUM_SEQS,
    MAX_SCHEDULER_STEPS,
    MAX_SIM_WORKERS,
)
from inferplan.memory.advice import does_not_fit_message
from inferplan.perf.moe_report import expert_parallel_report
from inferplan.perf.speculative import speculative_report
from inferplan.perf.sweep import compute_bound_batch_size, decode_row, prefill_row
from inferplan.plan.trtllm_runtime import TRTLLM_RUNTIMES, check_trtllm_runtime
from inferplan.profile import DEVICES, profile_to_csv
from inferplan.report.catalog import gpus_json, gpus_table, models_json, models_table
from inferplan.report.memory import memory_json, memory_tables
from inferplan.report.profile import profile_json, profile_tables
from inferplan.report.roofline import roofline_tables
from inferplan.report.simulate import simulate_tables
from inferplan.specs.topology import topology_json

INTERNAL_ERROR_EXIT = 3  # a bug in inferplan, never a user's mistake (docs/errors.md)
MOE_SKEW = bounded(0, 5, is_int=False)  # perf.moe.Routing's range


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    no_args_is_help=True,
)
@click.version_option(package_name="inferplan")
def app() -> None:
    """Capacity planner and serving simulator for LLM inference."""


@app.command()
@deployment_options
@json_option
def memory(deployment: DeploymentFlags, json_out: bool) -> None:
    """Per-device memory plan: weights, activations, KV cache, and max concurrency."""
    plan = deployment.plan()
    show(memory_json(plan), json_out, lambda _: memory_tables(plan))
    if not plan.fits:
        raise DoesNotFitError(does_not_fit_message(plan))


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
    type=MOE_SKEW,
    default=0.0,
    show_default=True,
    help="Zipf exponent of expert popularity (0 = uniform routing)",
)
@click.option("--no-cuda-graphs", is_flag=True, help="Model eager execution (enforce-eager)")
@speculative_options
@json_option
def roofline(
    deployment: DeploymentFlags,
    batch_sizes: str,
    input_len: str,
    context_len: str,
    moe_skew: float,
    no_cuda_graphs: bool,
    speculative: SpeculativeFlags,
    json_out: bool,
) -> None:
    """Step-time model: prefill and decode speed, and which bound dominates."""
    contexts = int_list("--context-len", context_len)
    prompts = int_list("--input-len", input_len)
    batches = int_list("--batch-sizes", batch_sizes, Bound(1, MAX_NUM_SEQS, limit="MAX_NUM_SEQS"))
    plan = deployment.plan()
    step_model = deployment.step_model(plan, moe_skew=moe_skew, cuda_graphs=not no_cuda_graphs)
    result = {
        "model": plan.spec.name,
        "gpu": plan.gpu.key,
        "tensor_parallel_size": deployment.tp,
        "pipeline_parallel_size": deployment.pp,
        "prefill": [prefill_row(step_model, n) for n in prompts],
        "decode": [decode_row(step_model, b, c) for c in contexts for b in batches],
        "compute_bound_batch_size": compute_bound_batch_size(step_model),
        "topology": topology_json(plan.topology, plan.parallelism),
        "expert_parallel": expert_parallel_report(step_model, plan),
    }
    spec_model = speculative.model(step_model)
    if spec_model is not None:  # off by default: the output keeps its keys
        result["speculative"] = speculative_report(
            spec_model, batches, contexts, plan.kv_capacity_tokens
        )
    show(result, json_out, roofline_tables)
    if not plan.fits:  # the step times are shown, but a plan that does not fit is exit 1
        raise DoesNotFitError(does_not_fit_message(plan))


@app.command()
@deployment_options
@workload_options
@click.option(
    "--scheduler",
    type=click.Choice(SCHEDULERS),
    default="continuous",
    show_default=True,
    help="Continuous (iteration-level, chunked prefill), static batching, or prefill-first "
    "(vLLM V0 without chunked prefill: new prompts run in steps of their own)",
)
@click.option(
    "--num-scheduler-steps",
    type=bounded(1, MAX_SCHEDULER_STEPS, limit="MAX_SCHEDULER_STEPS"),
    default=1,
    show_default=True,
    help="With --scheduler prefill-first: decode steps per scheduling decision (vLLM V0 "
    "multi-step; new prompts wait for the block's end)",
)
@click.option(
    "--preemption-mode",
    type=click.Choice(PREEMPTION_MODES),
    default="recompute",
    show_default=True,
    help="swap: vLLM V0 only (--scheduler prefill-first); vLLM v1 recomputes",
)
@click.option("--scheduling-policy", type=click.Choice(POLICIES), default="fcfs", show_default=True)
@click.option(
    "--schedule-conservativeness",
    type=float,
    default=None,
    help="--engine sglang: scales its new-token ratio (SGLang's flag; default 1)",
)
@click.option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    default=None,
    help="vLLM v1 automatic prefix caching of full prompt blocks (on by default with --engine "
    "vllm; needs prompt-block hashes: the Mooncake trace's hash_ids, --random-prefix-len, or a "
    "session_id column)",
)
@click.option(
    "--max-concurrency",
    type=bounded(1, MAX_NUM_REQUESTS, limit="MAX_NUM_REQUESTS"),
    default=None,
    help="Client-side cap on requests in flight",
)
@click.option(
    "--router", type=click.Choice(tuple(ROUTERS)), default="round_robin", show_default=True
)
@click.option(
    "--trtllm-runtime",
    "runtime",
    type=click.Choice(TRTLLM_RUNTIMES),
    default=None,
    help="--engine trtllm: trtllm-serve (default: the OpenAI server, online: overlap scheduler, "
    "unpadded decode CUDA graphs 1..32/64/128, streamed responses) or trtllm-bench (offline: "
    "host costs fitted to trtllm-bench runs, every decode batch graphed, no HTTP front end)",
)
@click.option("--exact", is_flag=True, help="Step every iteration (the reference mode)")
@click.option(
    "--sim-workers",
    type=or_auto(bounded(1, MAX_SIM_WORKERS, limit="MAX_SIM_WORKERS")),
    default="auto",
    show_default=True,
    help="Processes that simulate DP replicas apart under round robin (the same output as one "
    "process, in less wall time; other routers and options run in one process). auto: one per "
    "usable core, up to the replicas, from 20,000 requests on (engine/apart.py)",
)
@click.option("--metric-percentiles", default="99", show_default=True)
@click.option("--goodput", multiple=True, help="SLO as metric:ms, e.g. --goodput ttft:500")
@click.option("--moe-skew", type=MOE_SKEW, default=0.0, show_default=True)
@disagg_options
@admission_options
@classpool_options
@prefix_options
@kv_tier_options
@speculative_options
@json_option
def simulate(
    deployment: DeploymentFlags,
    workload: WorkloadFlags,
    disagg: DisaggFlags,
    admission: AdmissionFlags,
    classpool: ClassPoolFlags,
    prefix: PrefixFlags,
    tiers: KvTierFlags,
    speculative: SpeculativeFlags,
    max_concurrency: int | None,
    scheduler: str,
    num_scheduler_steps: int,
    preemption_mode: str,
    scheduling_policy: str,
    schedule_conservativeness: float | None,
    enable_prefix_caching: bool | None,
    router: str,
    runtime: str | None,
    exact: bool,
    sim_workers: int | None,
    metric_percentiles: str,
    goodput: tuple[str, ...],
    moe_skew: float,
    json_out: bool,
) -> None:
    """Replay a workload on replicas of a deployment; report what users would measure."""
    percentiles = percentile_list("--metric-percentiles", metric_percentiles)
    slo_ms = goodput_slo(goodput)
    check_trtllm_runtime(deployment.engine, runtime, "--trtllm-runtime")
    deployment = replace(deployment, trtllm_runtime=runtime)
    options = ServingOptions(
        scheduler=scheduler,
        preemption_mode=preemption_mode,
        scheduling_policy=scheduling_policy,
        data_parallel_size=deployment.dp,
        router=router,
        max_concurrency=max_concurrency,
        exact=exact,
        engine=deployment.engine,
        num_scheduler_steps=num_scheduler_steps,
        enable_prefix_caching=enable_prefix_caching,
        admission=admission.config(scheduling_policy, workload.seed, disagg.disaggregate),
        schedule_conservativeness=schedule_conservativeness,
        speculative=speculative.simulation(workload.seed, disagg.disaggregate),
        **tiers.serving_fields(),
        sim_workers=sim_workers,
    )
    shapes = {
        "prefill": pools.PoolShape(disagg.prefill_gpu, disagg.prefill_tp, disagg.prefill_dp),
        "decode": pools.PoolShape(disagg.decode_gpu, disagg.decode_tp, disagg.decode_dp),
    }
    classpool.check_with(disagg.disaggregate)
    pools.check_flags(disagg.disaggregate, shapes, disagg.given(), options)
    if disagg.disaggregate:
        data = simulate_disaggregated(
            deployment,
            shapes,
            disagg,
            prefix.build(workload),
            options,
            moe_skew,
            percentiles,
            goodput,
        )
        show(data, json_out, simulate_tables)
        return
    plan = colocated_plan(deployment, scheduler)
    requests = prefix.build(workload)
    options = replace(options, data_parallel_size=plan.parallelism.num_replicas)
    summary = simulate_colocated(
        deployment, plan, requests, options, classpool, moe_skew, percentiles, slo_ms, json_out
    )
    show(summary, json_out, simulate_tables)
    if note := sglang_radix_note(plan, requests, options):
        click.echo(f"note: {note}", err=True)
    if summary["rejected"]:
        _note_rejections(summary, rejection_counts(plan, requests, options))


def _note_rejections(summary: dict[str, Any], at_arrival: dict[str, int]) -> None:
    """One line on stderr when requests were refused: how many, and why (the arrival checks'
    reasons; the rest by the admission policy), so a run that served nothing says so."""
    reasons = [f"{n:,} {reason}" for reason, n in at_arrival.items()]
    later = summary["rejected"] - sum(at_arrival.values())
    if later > 0:
        reasons.append(f"{later:,} by the admission policy (--admission)")
    total = f"{summary['rejected']:,} of {summary['num_requests']:,}"
    click.echo(f"note: {total} requests rejected: {'; '.join(reasons)}", err=True)


@app.command()
@deployment_options
@click.option("--gpu-name", required=True, help="Name recorded for the hardware profiled")
@click.option("--output", "-o", default="profile.csv", show_default=True, help="CSV to write")
@click.option(
    "--device",
    type=click.Choice(DEVICES),
    default="auto",
    show_default=True,
    help="auto: CUDA when torch sees it, else the CPU (tiny shapes, not for planning)",
)
@click.option("--tiny", is_flag=True, help="Capped shapes and a few grid points (always on CPU)")
@json_option
def profile(
    deployment: DeploymentFlags,
    gpu_name: str,
    output: str,
    device: str,
    tiny: bool,
    json_out: bool,
) -> None:
    """Time one layer's operators with PyTorch into the CSV that --operator-table reads."""
    refuse_operator_table(deployment, "profile writes a table (-o)")
    if not gpu_name.strip() or "\n" in gpu_name:
        raise InferplanError("--gpu-name: expected a one-line name, e.g. H100-SXM-lab3")
    output_path = check_output_path("--output", output)
    plan = deployment.plan()
    result = profile_to_csv(plan, output_path, gpu_name=gpu_name, device=device, tiny=tiny)
    show(profile_json(result, output), json_out, profile_tables)


@app.command()
@json_option
def models(json_out: bool) -> None:
    """List the bundled models with total and active parameters."""
    show(models_json(), json_out, models_table)


@app.command()
@json_option
def gpus(json_out: bool) -> None:
    """List the bundled accelerators (published figures, sources in the catalog file)."""
    show(gpus_json(), json_out, gpus_table)


app.add_command(plan)
app.add_command(validate)
app.add_command(calibrate)


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
    except MemoryError:
        sys.stderr.write("error: out of memory; the input asks for more than this machine has\n")
        return 2
    except Exception as err:  # a bug: one line for the user, the traceback on request
        if os.environ.get("INFERPLAN_TRACEBACK"):
            raise
        sys.stderr.write(
            f"error: internal error ({type(err).__name__}: {_one_line(str(err))}); this is a bug "
            "in inferplan, please report it with the command line (INFERPLAN_TRACEBACK=1 shows "
            "where)\n"
        )
        return INTERNAL_ERROR_EXIT
    return result if isinstance(result, int) else 0


def _one_line(text: str, max_chars: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= max_chars else flat[: max_chars - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
