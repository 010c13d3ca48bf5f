"""The published-measurements table: reading, grouping, the closed-form steady state, and
`inferplan validate --data` on a small slice (the whole table is the fit script's job)."""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.perf.efficiency import FAMILY_OF_ARCHITECTURE
from inferplan.plan.published import bundled_published, parse_published, skip_reason
from inferplan.plan.published_runs import (
    error_summary,
    group_runs,
    run_setup,
    steady_state_throughput,
    validate_rows,
)
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism

BUNDLED = resources.files("inferplan.plan").joinpath("data/published.csv")


def _slice(case_prefixes: tuple[str, ...]) -> str:
    """The bundled header and every row of the first case of each prefix."""
    reader = csv.reader(io.StringIO(BUNDLED.read_text()))
    header = next(reader)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    chosen: dict[str, str] = {}
    for cells in reader:
        case = cells[0]
        for prefix in case_prefixes:
            if case.startswith(prefix) and chosen.setdefault(prefix, case) == case:
                writer.writerow(cells)
    return out.getvalue()


def test_every_bundled_row_is_read_and_each_unsimulated_one_has_a_reason() -> None:
    rows = bundled_published()
    assert len(rows) == 2608
    assert len({r.case_id for r in rows}) == 156
    reasons = [skip_reason(r) for r in rows]
    assert sum(r is None for r in reasons) > 1800
    assert all(r is None or len(r) > 10 for r in reasons)


class _OneSecondSteps:
    """Every step takes 1 s, so a run's time is its number of steps."""

    def step_time(self, batch: StepBatch) -> StepTime:
        return StepTime(1.0, {"compute": 1.0})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1.0, 0.0, float("inf")


def _plan(max_seqs: int, max_tokens: int):  # type: ignore[no-untyped-def]
    cfg = MemoryConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, block_size=32)
    return plan_memory(load_model("Llama-3.1-8B"), load_gpu("h100"), Parallelism(), cfg)


def test_steady_state_counts_waves_of_prefill_and_decode_steps() -> None:
    """ISL 100, OSL 10, 40 requests, 8 at a time, 4 prompts per 408-token step (beside the 8
    slots' decodes, one token each): 2 steps fill
    the slots, each group's slots are refilled as it finishes (8 more prefill steps), 5 x 8
    steps decode all 8, and 1 step decodes the last group's last token: 51 s for 400 output
    tokens (not 5 waves of 2 + 9 steps, 55 s, where a wave's slots wait for its last request)."""
    out, req = steady_state_throughput(_plan(8, 408), _OneSecondSteps(), 100, 10, 40) or (0, 0)
    assert out == pytest.approx(400 / 51)
    assert req == pytest.approx(40 / 51)


def test_steady_state_batch_is_bounded_by_kv_blocks_for_the_whole_request() -> None:
    """TensorRT-LLM reserves ISL + OSL: 110 tokens = 4 blocks of 32, so 13 blocks hold 3
    requests: 14 admissions (13 of 3, one of 1) 10 steps apart, the last one's request decoding
    9 steps after it: 140 steps."""
    plan = replace(_plan(8, 400), num_blocks=13)
    out, _ = steady_state_throughput(plan, _OneSecondSteps(), 100, 10, 40) or (0, 0)
    assert out == pytest.approx(400 / (10 * 14))
    assert (
        steady_state_throughput(replace(plan, num_blocks=3), _OneSecondSteps(), 100, 10, 4) is None
    )


class _BatchSteps:
    """A step takes 1 s plus 0.1 s per sequence in it (prefill or decode)."""

    def step_time(self, batch: StepBatch) -> StepTime:
        seconds = 1.0 + 0.1 * (batch.num_decode_seqs + batch.num_prefill_seqs)
        return StepTime(seconds, {"compute": seconds})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1.0 + 0.1 * num_seqs, 0.0, float("inf")


def test_steady_state_runs_the_remainder_as_a_smaller_wave_that_pays_every_step() -> None:
    """10 requests, 8 at a time, ISL 100 / OSL 3, 8 prompts per step: a wave of 8 is 1 prefill
    step (1.8 s) + 2 decode steps (1.8 s each), 5.4 s; the last 2 requests make a wave of their
    own, 1 + 2 steps of 1.2 s: 3.6 s, not the 2/8 of a full wave (1.35 s) a fractional count
    of waves would give."""
    out, req = steady_state_throughput(_plan(8, 800), _BatchSteps(), 100, 3, 10) or (0, 0)
    assert req == pytest.approx(10 / (5.4 + 3.6))
    assert out == pytest.approx(30 / 9.0)
    full, _ = steady_state_throughput(_plan(8, 800), _BatchSteps(), 100, 3, 16) or (0, 0)
    assert full == pytest.approx(48 / (2 * 5.4))  # whole waves: no remainder


def test_validate_rows_keeps_every_row_and_groups_runs() -> None:
    text = _slice(
        ("trt017-l31-8b-h200", "gpustack-gpt-oss-20b-h100-sglang", "gpustack-qwen3-8b-910b")
    )
    rows = parse_published(text, "slice.csv")
    results = validate_rows(rows, quick=True)
    assert [r.row for r in results] == [r for run in group_runs(rows).values() for r in run]
    skipped = [r for r in results if r.reason is not None]
    assert skipped and all(r.predicted is None for r in skipped)
    assert any("not in the catalog" in (r.reason or "") for r in skipped)
    summary = error_summary(results)
    assert summary["throughput"]["n"] == sum(
        r.error is not None and r.row.family == "throughput" for r in results
    )
    for r in results:
        if r.predicted is not None:
            assert r.predicted > 0


def test_cli_validate_data_json_is_deterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(_slice(("trt017-l31-8b-h200", "gpustack-qwen3-14b-h100-sglang")))
    outputs = []
    for _ in range(2):
        assert main(["validate", "--data", str(path), "--quick", "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    data = json.loads(outputs[0])
    assert set(data["summary"]) == {"throughput", "latency"}
    for family in data["summary"].values():
        assert set(family) == {"n", "median_abs_error", "p90_abs_error", "max_abs_error"}
        assert family["median_abs_error"] <= family["p90_abs_error"] <= family["max_abs_error"]
    assert data["num_rows"] == len(data["rows"]) == len(path.read_text().splitlines()) - 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("metric,", "measure,", 1), r"mine.csv:1: missing column\(s\) metric"),
        (lambda t: t.replace(",output_throughput,", ",speed,", 1), r"mine.csv:2: column 'metric'"),
        (lambda t: t.replace(",tok/s,", ",tok/min,", 1), r"mine.csv:2: column 'unit'"),
        (lambda t: t.replace(",29526.04,", ",fast,", 1), r"mine.csv:2: column 'value'"),
    ],
)
def test_bad_files_are_one_line_naming_the_line(edit, message, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = edit(_slice(("trt017-l31-8b-h200",)))
    with pytest.raises(InferplanError, match=message):
        parse_published(text, "mine.csv")


def test_cli_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--data", "nope.csv"]) == 2
    assert capsys.readouterr().err.startswith("error: nope.csv")


def test_a_fitted_family_file_reproduces_its_in_sample_error() -> None:
    """scripts/fit_published.py writes each family's in-sample median |error| beside the
    constants; predicting that family's closed-form rows with the committed files gives it
    back (Ada: L40S and RTX PRO 6000, 107 rows, a few seconds), so the committed constants are
    the fitted ones."""
    text = resources.files("inferplan.perf").joinpath("data/efficiency/ada.yaml").read_text()
    written = re.search(r"In-sample median \|error\| ([\d.]+) over (\d+) rows", text)
    assert written is not None
    rows = [
        r
        for r in bundled_published()
        if skip_reason(r) is None
        and r.family == "throughput"
        and FAMILY_OF_ARCHITECTURE.get(load_gpu(r.gpu).architecture) == "ada"
        and run_setup(r).closed_form
    ]
    errors = [abs(r.error) for r in validate_rows(rows) if r.error is not None]
    assert len(errors) == int(written.group(2))
    assert f"{statistics.median(errors):.4f}" == written.group(1)


def test_a_stated_kv_dtype_wins_over_the_modelopt_default() -> None:
    """TensorRT-LLM's perf overview runs gpt-oss on Hopper with ``kv_cache_config.dtype:
    auto`` (BF16) although the column says FP8: the row's stated ``auto`` is kept, and only
    rows that state nothing get the ModelOpt FP8 KV default."""
    rows = bundled_published()
    hopper_oss = next(
        r for r in rows if r.model == "openai/gpt-oss-20b" and r.gpu == "h100_sxm_80gb"
    )
    assert hopper_oss.weights_dtype == "fp8" and hopper_oss.kv_cache_dtype == "auto"
    assert run_setup(hopper_oss).memory.kv_cache_dtype == "auto"
    unstated = next(r for r in rows if r.case_id.startswith("trt10") and r.weights_dtype == "fp8")
    assert not unstated.kv_cache_dtype
    assert run_setup(unstated).memory.kv_cache_dtype == "fp8"


def test_trtllm_mistral_runs_ignore_the_sliding_window() -> None:
    """TensorRT-LLM did not apply Mistral's 4,096-token window in these releases (engine flow:
    only through the runtime max_attention_window; PyTorch backend: from PR #12597): its rows
    plan full attention, so a 20,000-token context reads and holds all of it."""
    from inferplan.plan.published_runs import memory_plan

    row = next(
        r
        for r in bundled_published()
        if r.model == "mistralai/Mistral-7B-v0.1" and r.engine == "tensorrt-llm"
    )
    setup = run_setup(row)
    assert setup.full_attention
    assert all(g.attention.window_tokens is None for g in memory_plan(setup).spec.layers)
    assert load_model("Mistral-7B-v0.1").layers[0].attention.window_tokens == 4096
    llama = next(r for r in bundled_published() if "Llama-3.1-8B" in r.model)
    assert not run_setup(llama).full_attention


def test_a_served_row_whose_weights_leave_no_kv_cache_is_listed_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GLM-4.5-Air in BF16 (about 200 GiB of weights) on two H100s: the plan has no KV blocks;
    ``validate --data`` lists the run's rows with the reason (it raised a ValueError from the
    step trace's block count before)."""
    text = _slice(("gpustack-glm-4.5-air-h100-sglang-43a1c3",))
    text = text.replace(",h100_sxm_80gb,4,4,", ",h100_sxm_80gb,2,2,")
    rows = parse_published(text, "tp2.csv")
    assert rows and all(r.tp == 2 for r in rows)
    results = validate_rows(rows, quick=True)
    assert len(results) == len(rows)
    assert all(r.predicted is None and "no KV cache" in (r.reason or "") for r in results)
    path = tmp_path / "tp2.csv"
    path.write_text(text)
    assert main(["validate", "--data", str(path), "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_rows"] == len(rows) and data["num_predicted"] == 0
