"""Calibration round trip: runs simulated with known constants, written as `vllm bench serve`
results or as rows of a load-test CSV, calibrated from the bundled constants, give those
constants back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplan.cli import main
from inferplan.cli_flags import build_memory_plan
from inferplan.engine.session import ServingOptions, simulate
from inferplan.metrics.summary import summarize
from inferplan.perf.efficiency import bundled_efficiency
from inferplan.perf.factory import build_step_model
from inferplan.workload import build_workload

TRUTH = {"gemm_compute": 0.6, "memory_bandwidth": 0.7, "step_overhead_s": 0.0015}
# (prompts, input, output, max concurrency): single-stream decode, a decode-heavy batch and a
# prefill-heavy batch, each all sent at once.
RUNS = ((30, 256, 64, 1), (200, 256, 64, None), (100, 2048, 8, None))
CSV_COLUMNS = (
    "request_rate",
    "input_len",
    "output_len",
    "num_prompts",
    "max_concurrency",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "output_throughput",
)


def _simulated_summaries() -> list[dict[str, Any]]:
    """Each of ``RUNS`` simulated with the ``TRUTH`` constants, as vllm bench's result keys."""
    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", 4096, 0.9, None, None, None
    )
    model = build_step_model(plan, efficiency=replace(bundled_efficiency("hopper"), **TRUTH))
    summaries = []
    for prompts, input_len, output_len, concurrency in RUNS:
        workload = build_workload(
            "random",
            num_prompts=prompts,
            random_input_len=input_len,
            random_output_len=output_len,
            random_range_ratio=0.0,
        )
        result = simulate(plan, model, workload, ServingOptions(max_concurrency=concurrency))
        summary = summarize(result.records, result.itl, duration_s=result.duration_s)
        summary.update(
            request_rate="inf", burstiness=1.0, max_concurrency=concurrency, num_prompts=prompts
        )
        summaries.append(summary)
    return summaries


def _write_results(tmp_path: Path) -> list[str]:
    """One vllm bench JSON result file per run."""
    paths = []
    for i, summary in enumerate(_simulated_summaries()):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(summary))
        paths.append(str(path))
    return paths


def _write_csv(tmp_path: Path) -> list[str]:
    """All runs as rows of one load-test table, with the same numbers as the JSON files."""
    lines = [",".join(CSV_COLUMNS)]
    for (_, input_len, output_len, _), summary in zip(RUNS, _simulated_summaries(), strict=True):
        summary.update(input_len=input_len, output_len=output_len)
        lines.append(",".join(_csv_cell(summary[column]) for column in CSV_COLUMNS))
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    return [str(path)]


def _csv_cell(value: object) -> str:
    return "" if value is None else str(value)  # str(float) is exact: it round-trips


def _calibrate_argv(output: Path, paths: list[str]) -> list[str]:
    return [
        "calibrate",
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "h100",
        "--max-model-len",
        "4096",
        "-o",
        str(output),
        "--json",
        *paths,
    ]


@pytest.mark.parametrize("write", [_write_results, _write_csv], ids=["json", "csv"])
def test_calibration_recovers_the_constants(
    write: Callable[[Path], list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write(tmp_path)
    output = tmp_path / "calibration.yaml"
    argv = _calibrate_argv(output, paths)
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert all(abs(row["error_after"]) < 0.02 for row in report["rows"])
    assert len({row["file"] for row in report["rows"]}) == len(RUNS)  # a CSV row is file:line
    fitted = yaml.safe_load(output.read_text())["efficiency"]
    # The prefill-heavy run pins gemm_compute. memory_bandwidth and step_overhead_s trade off
    # in these runs (every decode step streams the same weights: 0.563 and 0 ms fit them to
    # 0.2 % as well as 0.7 and 1.5 ms), so which pair the simplex returns depends on where it
    # starts (the bundled Hopper file); the error_after check above is what they pin.
    assert fitted["gemm_compute"] == pytest.approx(TRUTH["gemm_compute"], rel=0.05)
    # The file is a valid --calibration for every command.
    assert (
        main(
            [
                "roofline",
                "--model",
                "Llama-3.1-8B",
                "--gpu",
                "h100",
                "--batch-sizes",
                "1",
                "--calibration",
                str(output),
                "--json",
            ]
        )
        == 0
    )


def test_malformed_result_files_name_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"completed": 10, "total_input_tokens": "many"}))
    assert main(["calibrate", "--model", "Llama-3.1-8B", "--gpu", "h100", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and "total_input_tokens" in err and "\n" not in err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main(["calibrate", "--model", "Llama-3.1-8B", "--gpu", "h100", str(broken)]) == 2
    assert f"{broken}:1" in capsys.readouterr().err


def test_a_fit_that_needs_more_than_the_peak_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measurements ten times faster than the hardware allows: no constant in (0, 1] explains
    them, so calibrate says a mechanism is missing, exits 1 and writes nothing."""
    paths = _write_results(tmp_path)
    for path in paths:
        data = json.loads(Path(path).read_text())
        data["output_throughput"] *= 10
        data["mean_ttft_ms"] /= 10
        data["mean_tpot_ms"] /= 10
        Path(path).write_text(json.dumps(data))
    output = tmp_path / "calibration.yaml"
    argv = _calibrate_argv(output, paths)
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "missing a mechanism" in err and "\n" not in err
    assert not output.exists()
