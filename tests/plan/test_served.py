"""One engine-cost path for ``simulate --engine`` and ``validate`` (plan/served.py), vLLM's
``--async-scheduling`` runs, and the ITL rows ``validate`` leaves out as bursts."""

from __future__ import annotations

import json

import pytest

from inferplan.cli import main
from inferplan.cli_flags import build_memory_plan
from inferplan.perf.batch import StepBatch
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import (
    memory_plan,
    predict_run,
    run_setup,
    run_step_model,
    validate_rows,
)
from inferplan.plan.served import decode_floor_s, served_efficiency

CASE = "gpustack-gpt-oss-20b-a100-vllm-d37518"


def test_simulate_with_engine_predicts_what_validate_reports(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [
        r
        for r in bundled_published()
        if r.case_id == CASE and r.input_len == 128 and r.output_len == 4
    ]
    assert len(rows) == 12 and run_setup(rows[0]).memory.max_model_len == 8192
    predicted = predict_run(rows, None, quick=False)
    code = main([
        "simulate",
        "--model", "gpt-oss-20b",
        "--gpu", "a100_sxm_80gb",
        "--engine", "vllm",
        "--dataset-name", "random",
        "--random-input-len", "128",
        "--random-output-len", "4",
        "--random-range-ratio", "0",
        "--num-prompts", "1000",
        "--max-model-len", "8192",
        "--json",
    ])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    for metric in ("ttft_mean", "ttft_p99", "tpot_median"):
        name, stat = metric.rsplit("_", 1)
        assert summary[f"{stat}_{name}_ms"] == pytest.approx(predicted[metric], rel=1e-9)
    # The chat stream's harmony header merges two of the three token gaps into one sample
    # (plan/chat_stream.py ``with_merged_gaps``), which simulate's engine view does not see.
    assert predicted["itl_mean"] == pytest.approx(1.5 * summary["mean_itl_ms"], rel=2e-2)


def test_itl_rows_below_one_decode_step_are_listed_not_dropped() -> None:
    rows = [
        r for r in bundled_published() if r.case_id.startswith("gpustack-qwen3-14b-h100-tensorrt")
    ]
    results = validate_rows([r for r in rows if r.dataset == "sharegpt"])
    burst = [r for r in results if r.reason and "bursts" in r.reason]
    assert [r.row.metric for r in burst] == ["itl_median"]
    assert burst[0].row.value == pytest.approx(0.12)
    floor_s = decode_floor_s(memory_plan(run_setup(burst[0].row)))
    # Qwen3-14B in BF16 on one H100: ~13.2e9 non-embedding weights x 2 bytes / 3.35 TB/s.
    assert 6e-3 < floor_s < 9e-3
    assert all(r.predicted is not None for r in results if r.row.metric == "itl_mean")


def test_async_scheduling_hides_vllm_host_work_behind_the_gpu() -> None:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", 4096, 0.9, 8192, 1024, 16
    )
    family = efficiency_for(plan.gpu)
    sync = served_efficiency(family, plan, "vllm")
    overlapped = served_efficiency(family, plan, "vllm", async_scheduling=True)
    assert sync.host_overlap == 0.0 and overlapped.host_overlap == 1.0
    assert served_efficiency(family, plan, "sglang", async_scheduling=True) == served_efficiency(
        family, plan, "sglang"
    )
    batch = StepBatch(num_decode_seqs=64, decode_context_tokens=64 * 1000)
    slow = build_step_model(plan, efficiency=sync).step_time(batch)
    fast = build_step_model(plan, efficiency=overlapped).step_time(batch)
    host = sync.step_overhead_s + 64 * sync.per_seq_overhead_s
    gpu = slow.total_s - slow.by_bound_s["overhead"]
    assert slow.total_s - fast.total_s == pytest.approx(min(host, gpu), rel=1e-9)


def test_published_async_runs_get_the_overlap_on_fitted_constants_too() -> None:
    rows = [r for r in bundled_published() if r.case_id == "gpustack-gpt-oss-20b-a100-vllm-9451b2"]
    assert rows and rows[0].settings["async_scheduling"] == "true"
    setup = run_setup(rows[0])
    plan = memory_plan(setup)
    given = efficiency_for(plan.gpu)
    for eff in (None, given):
        step = run_step_model(rows[0], setup, plan, eff)
        assert isinstance(step, RooflineModel) and step.eff.host_overlap == 1.0
    sync = next(r for r in bundled_published() if r.case_id == CASE)
    step = run_step_model(sync, run_setup(sync), memory_plan(run_setup(sync)), None)
    assert isinstance(step, RooflineModel) and step.eff.host_overlap == 0.0
