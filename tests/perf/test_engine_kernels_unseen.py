"""A kernel class an engine has no fitted factor for (perf/engine_kernels.py engine_factor)."""

from __future__ import annotations

import math

import pytest

from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.engine_kernels import engine_factor, unseen_factor, with_engine_kernels
from inferplan.specs.hardware import load_gpu

VLLM_LIKE = {"fp8": 0.4, "mla": 0.3, "mxfp4": 0.75}


def test_a_fitted_factor_is_used_as_it_is() -> None:
    for kernel, factor in VLLM_LIKE.items():
        assert engine_factor(VLLM_LIKE, kernel) == factor


def test_bf16_is_the_reference_unless_fitted() -> None:
    assert engine_factor(VLLM_LIKE, "bf16") == 1.0
    assert engine_factor({"bf16": 0.55, "fp8": 0.3}, "bf16") == 0.55


def test_an_unseen_class_takes_the_geometric_mean_of_the_fitted_ones() -> None:
    without_fp8 = {"mla": 0.3, "mxfp4": 0.75}
    assert engine_factor(without_fp8, "fp8") == pytest.approx(math.sqrt(0.3 * 0.75))
    # Not the reference 1, and not any one class's factor.
    assert 0.3 < engine_factor(without_fp8, "fp8") < 0.75


def test_an_engine_without_factors_runs_every_class_at_1() -> None:
    assert unseen_factor({}) == 1.0
    for kernel in ("bf16", "fp8", "mxfp4", "mla"):
        assert engine_factor({}, kernel) == 1.0


def test_trtllm_serve_and_vllm_bf16_keep_the_family_constants() -> None:
    eff = efficiency_for(load_gpu("h100_sxm_80gb"))
    assert with_engine_kernels(eff, "trtllm-serve", "fp8") == eff
    assert with_engine_kernels(eff, None, "mla") == eff
    assert with_engine_kernels(eff, "vllm-v1", "bf16") == eff
