"""SGLang's overlap scheduler (plan/served.py ``with_overlap_schedule``): on by default, its host
work hides behind the GPU's; ``disable_overlap_schedule`` turns it off; vLLM is untouched."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.perf.batch import StepBatch
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup, run_step_model
from inferplan.plan.served import served_efficiency, with_overlap_schedule


def _plan():  # type: ignore[no-untyped-def]
    return build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", 4096, 0.9, 8192, 1024, 16
    )


def test_sglang_overlaps_by_default_and_vllm_does_not() -> None:
    plan = _plan()
    family = efficiency_for(plan.gpu)
    assert served_efficiency(family, plan, "sglang").host_overlap == 1.0
    assert served_efficiency(family, plan, "vllm").host_overlap == 0.0
    assert with_overlap_schedule(family, "vllm") is family
    overlapped = replace(family, host_overlap=1.0)
    assert with_overlap_schedule(overlapped, "sglang", disabled=True).host_overlap == 0.0


def test_overlapped_host_work_costs_only_what_exceeds_the_gpu() -> None:
    plan = _plan()
    family = replace(efficiency_for(plan.gpu), step_overhead_s=2e-3, per_seq_overhead_s=20e-6)
    on, off = with_overlap_schedule(family, "sglang"), with_overlap_schedule(family, "sglang", True)
    batch = StepBatch(num_decode_seqs=32, decode_context_tokens=32 * 1200)
    slow = build_step_model(plan, efficiency=off).step_time(batch)
    fast = build_step_model(plan, efficiency=on).step_time(batch)
    host = 2e-3 + 32 * 20e-6
    gpu = slow.total_s - slow.by_bound_s["overhead"]
    assert gpu > host  # an 8B decode step on an H100 outlasts 2.6 ms of host work
    assert fast.total_s == pytest.approx(slow.total_s - host, rel=1e-9)


def test_published_sglang_runs_overlap_on_fitted_constants_too() -> None:
    rows = [r for r in bundled_published() if r.case_id == "gpustack-qwen3-32b-h100-sglang-455ac5"]
    setup = run_setup(rows[0])
    plan = memory_plan(setup)
    for eff in (None, efficiency_for(plan.gpu)):
        step = run_step_model(rows[0], setup, plan, eff)
        assert isinstance(step, RooflineModel) and step.eff.host_overlap == 1.0
    off = replace(rows[0], settings={**rows[0].settings, "disable_overlap_schedule": "true"})
    step = run_step_model(off, setup, plan, None)
    assert isinstance(step, RooflineModel) and step.eff.host_overlap == 0.0
