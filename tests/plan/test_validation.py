"""The validation harness: bundled published cases -> simulated runs -> errors."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.perf.efficiency import bundled_efficiency
from inferplan.plan.validation import (
    bundled_cases,
    deployment_efficiency,
    engine_cpu_costs,
    fixed_workload,
    runs_for,
    sharegpt_like,
    trtllm_bench_limits,
    validate,
)
from inferplan.workload.synthetic import (
    capped_lognormal_mean,
    lognormal_lengths,
    lognormal_mean_for_capped,
)


def test_trtllm_bench_heuristic_reproduces_its_worked_example() -> None:
    """Llama-3.1-8B BF16 on one H100 (79.6 GiB), ISL = OSL = 1000: about 238 requests fit, so
    max_batch_size 256 and max_num_tokens 2048 (trtllm-bench's tuning heuristic)."""
    assert trtllm_bench_limits("Llama-3.1-8B", "h100", 1, 1000, 1000, value_bytes=2.0) == (
        256,
        2048,
    )


def test_every_bundled_case_has_runs_with_measurements() -> None:
    cases = bundled_cases()
    assert len(cases) == 5
    for case in cases:
        runs = runs_for(case)
        assert runs
        for run in runs:
            assert run.measured > 0
            assert run.assumptions


def test_unknown_kind_of_case_is_refused() -> None:
    with pytest.raises(InferplanError, match="no runner"):
        runs_for({"id": "somebody-else"})


def test_fixed_and_sharegpt_like_workloads() -> None:
    fixed = fixed_workload(7, 128, 64)
    assert fixed.num_requests == 7
    assert set(fixed.input_tokens) == {128} and set(fixed.output_tokens) == {64}
    assert not fixed.arrival_s.any()
    shaped = sharegpt_like(5000, 202, 179, 2.0)
    assert shaped.input_tokens.mean() == pytest.approx(202, rel=0.1)
    assert shaped.output_tokens.mean() == pytest.approx(179, rel=0.1)
    assert shaped.arrival_s[-1] == pytest.approx(5000 / 2.0)


def test_validating_a_case_is_deterministic_and_finite() -> None:
    first = validate(["vllm060-llama3-8b-h100-sharegpt"])
    second = validate(["vllm060-llama3-8b-h100-sharegpt"])
    assert [r.predicted for r in first] == [r.predicted for r in second]
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in first)
    errors = np.array([r.error for r in first])
    assert np.all(np.abs(errors) < 1.0)  # same order of magnitude as the measurements


def test_cli_validate_rejects_an_unknown_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--case", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --case: unknown case 'nope'")
    assert "\n" not in err


def test_capped_lognormal_mean_is_solved_exactly() -> None:
    # MLPerf's OpenOrca outputs: capped at 1,024 with a mean of 290 after the cap.
    mean = lognormal_mean_for_capped(290.0, 1.0, 1024)
    assert mean > 290.0
    assert capped_lognormal_mean(mean, 1.0, 1024) == pytest.approx(290.0, rel=1e-9)
    # No cap in reach: the capped mean is the mean.
    assert capped_lognormal_mean(100.0, 0.5, 1e9) == pytest.approx(100.0, rel=1e-9)
    drawn = lognormal_lengths(200_000, mean, 1.0, 1024, np.random.default_rng(1))
    assert drawn.mean() == pytest.approx(290.0, rel=0.01)
    with pytest.raises(InferplanError, match=r"capped mean must lie in \[1, 1024\)"):
        lognormal_mean_for_capped(1024.0, 1.0, 1024)


def test_vllm060_runs_use_v0_scheduling_and_its_cpu_costs() -> None:
    case = next(c for c in bundled_cases() if c["id"].startswith("vllm060-"))
    base = bundled_efficiency("hopper")
    costs = engine_cpu_costs()["vllm-0.6.0"]
    for run in runs_for(case):
        assert run.deployment.scheduler == "prefill-first"
        eff = deployment_efficiency(run.deployment, base)
        assert eff.step_overhead_s == costs["step_overhead_s"]
        assert eff.per_seq_overhead_s == costs["per_seq_overhead_s"]
        assert eff.gemm_compute == base.gemm_compute  # only the CPU costs change
    trtllm = next(c for c in bundled_cases() if c["id"].startswith("trtllm-"))
    pytorch = engine_cpu_costs()["trtllm-pytorch"]  # fitted on the published table
    eff = deployment_efficiency(runs_for(trtllm)[0].deployment, base)
    assert eff == replace(base, **pytorch)


@pytest.mark.parametrize(
    ("package", "path", "cases"),
    [
        (
            "inferplan.plan",
            "data/engine_cpu_costs.yaml",
            ["vllm060-llama3-8b-h100-sharegpt", "vllm060-llama3-70b-h100-tp4-sharegpt"],
        ),
    ],
    ids=["vllm-0.6.0"],
)
def test_the_fitted_files_residuals_are_what_validation_gives_now(
    package: str, path: str, cases: list[str]
) -> None:
    """The residual comments scripts/fit_efficiency.py wrote reproduce: the constants committed
    are the ones that gave them."""
    text = resources.files(package).joinpath(path).read_text()
    written = dict(re.findall(r"^#   (.+?): [+-][\d.]+% -> ([+-][\d.]+%)$", text, re.MULTILINE))
    results = validate(cases)
    assert len(written) == len(results) > 0
    for r in results:
        assert written[f"{r.run.case_id} | {r.run.label} | {r.run.metric}"] == f"{r.error:+.1%}"
