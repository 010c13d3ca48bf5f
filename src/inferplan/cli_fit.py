"""``inferplan validate`` (published measurements, end-to-end cases) and ``inferplan calibrate``
(fit the efficiency constants to a deployment's own benchmarks); see docs/validation.md."""

from __future__ import annotations

from pathlib import Path

import click

from inferplan.cli_checks import check_output_path
from inferplan.cli_flags import DeploymentFlags, deployment_options, json_option
from inferplan.cli_output import refuse_operator_table, show
from inferplan.errors import DoesNotFitError
from inferplan.perf.efficiency import efficiency_for
from inferplan.plan.benchresult import bench_runs
from inferplan.plan.calibration import USER_BOUNDS, at_physical_limit, calibration_yaml, fit_simplex
from inferplan.plan.published import read_published
from inferplan.plan.published_runs import validate_rows
from inferplan.plan.validation import Deployment, Result, predict
from inferplan.plan.validation import validate as run_validation
from inferplan.report.validation import (
    calibration_table,
    published_json,
    published_tables,
    validation_json,
    validation_tables,
)


@click.command()
@click.option(
    "--data",
    default=None,
    metavar="FILE.csv",
    help="Published measurements in the bundled table's schema (default: the bundled table)",
)
@click.option("--quick", is_flag=True, help="Simulated runs keep at most 200 requests (CI)")
@click.option(
    "--case",
    "cases",
    multiple=True,
    help="Only this case id of the end-to-end cases (repeatable; implies those cases)",
)
@click.option(
    "--cases", "legacy", is_flag=True, help="The end-to-end cases (validation_cases.yaml) instead"
)
@json_option
def validate(
    data: str | None, quick: bool, cases: tuple[str, ...], legacy: bool, json_out: bool
) -> None:
    """Predict published measurements; print measured vs predicted and the error.

    By default every row of the bundled table (TensorRT-LLM performance overviews, GPUStack's
    vllm bench serve runs); rows that cannot be simulated are listed with the reason. The JSON
    has `summary` per metric family (throughput, latency) and every row's prediction."""
    if cases or legacy:
        show(validation_json(run_validation(list(cases) or None)), json_out, validation_tables)
        return
    results = validate_rows(read_published(data), quick=quick)
    show(published_json(results), json_out, published_tables)


@click.command()
@deployment_options
@click.argument("results", nargs=-1, required=True)
@click.option(
    "--output",
    "-o",
    default="calibration.yaml",
    show_default=True,
    help="Where to write the fitted constants (for --calibration)",
)
@json_option
def calibrate(
    deployment: DeploymentFlags, results: tuple[str, ...], output: str, json_out: bool
) -> None:
    """Fit the efficiency constants to this deployment's benchmarks.

    Each RESULT is a `vllm bench serve --save-result` JSON file, or a CSV table (a path ending
    in .csv) with one row per load level. The CSV's header names request_rate (req/s or inf),
    input_len and output_len (tokens per request), num_prompts, optionally max_concurrency and
    burstiness, and at least one of the measurements mean_ttft_ms, mean_tpot_ms and
    output_throughput (tok/s); an empty cell means not measured. Both kinds can be mixed. Each run
    is re-simulated with its own settings; the table shows the error per run (file, or
    file:line for a CSV row) and metric before and after the fit. See docs/validation.md.
    """
    refuse_operator_table(deployment, "calibrate fits the roofline's constants")
    output_path = check_output_path("--output", output)
    plan = deployment.plan()
    target = Deployment(
        deployment.model,
        deployment.gpu,
        deployment.tp,
        deployment.dp,
        deployment.quantization,
        deployment.kv_cache_dtype,
        plan.config,
        engine=deployment.engine,
        pp=deployment.pp,
        enable_expert_parallel=deployment.enable_expert_parallel,
    )
    runs = [run for path in results for run in bench_runs(Path(path), target)]
    start = deployment.efficiency() or efficiency_for(plan.gpu)
    before = [Result(run, predict(run, start)) for run in runs]
    fitted, after = fit_simplex(runs, start, USER_BOUNDS)
    rows = [
        {
            "file": b.run.case_id,
            "metric": b.run.metric,
            "measured": b.run.measured,
            "error_before": b.error,
            "error_after": a.error,
        }
        for b, a in zip(before, after, strict=True)
    ]
    pressed = at_physical_limit(fitted, USER_BOUNDS)
    report = {"constants": fitted.to_dict(), "rows": rows, "refused": pressed or None}
    show(report, json_out, calibration_table)
    if pressed:
        raise DoesNotFitError(
            f"calibrate: the fit needs {', '.join(pressed)} at the hardware's peak or above: "
            "the model is missing a mechanism for these runs; no file written"
        )
    header = [
        f"inferplan calibrate for {plan.spec.name} on {plan.gpu.key} from {', '.join(results)}"
    ]
    output_path.write_text(calibration_yaml(fitted, header))
