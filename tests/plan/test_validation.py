"""The validation harness: bundled published cases -> simulated runs -> errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.plan.validation import (
    bundled_cases,
    fixed_workload,
    runs_for,
    sharegpt_like,
    trtllm_bench_limits,
    validate,
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
