"""``plan/fitting/config.py``: the fit's flags as one ``FitConfig`` (no module-level state
changed), and the PyTorch backend's release split (0.19-1.0 against the main revision and
1.1 on)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from inferplan.perf import comm, multi_rank
from inferplan.plan.fitting import config as fitting_config
from inferplan.plan.fitting.config import (
    FIT_BOUNDS,
    PYTORCH,
    PYTORCH_1_1,
    FitConfig,
    fit_rows,
    release_class,
    split_class,
    worker_pool,
)
from inferplan.plan.fitting.descent import committed_constants, start_constants
from inferplan.plan.fitting.served_fit import _split_release


def _row(version: str, engine: str = "tensorrt-llm") -> Any:
    return SimpleNamespace(engine=engine, engine_version=version)


@pytest.mark.parametrize(
    ("version", "split", "expected"),
    [
        ("0.17", True, "trtllm-cpp"),  # the C++ flow is never split
        ("0.19", True, PYTORCH),
        ("1.0", True, PYTORCH),
        ("1.0.0", True, PYTORCH),
        ("1.1.0", True, PYTORCH_1_1),
        ("1.2", True, PYTORCH_1_1),
        ("1.2.0rc1", True, PYTORCH_1_1),
        ("main@585c7565 (doc revision between 1.0 and 1.2)", True, PYTORCH_1_1),
        ("1.2", False, PYTORCH),  # without the split one PyTorch class
        ("main@585c7565", False, PYTORCH),
    ],
)
def test_release_class(version: str, split: bool, expected: str) -> None:
    assert release_class(_row(version), split) == expected


def test_other_engines_have_no_release_class() -> None:
    assert release_class(_row("0.11.0", "vllm"), True) is None


def test_served_rows_split_as_the_closed_form_ones() -> None:
    # served.trtllm_release as the fit patches it under --release-split
    assert _split_release("0.14.0") == "trtllm-cpp"
    assert _split_release("1.0.0") == PYTORCH
    assert _split_release("1.2.0rc1") == PYTORCH_1_1
    assert _split_release("") == PYTORCH  # no version: served.trtllm_release's default
    assert split_class("") == PYTORCH
    assert split_class("1.1rc1") == PYTORCH_1_1  # a release candidate's suffix on the minor
    assert split_class("1.0.0rc3") == PYTORCH


def test_flags_build_a_config_and_change_no_module_state() -> None:
    before = dict(FIT_BOUNDS)
    config = FitConfig.from_flags(per_hop=True, gemm_shape=True)
    assert config.family_bounds["collective_latency_s"] == fitting_config.PER_HOP_BOUNDS
    assert "gemm_half_outputs" in config.family_bounds
    assert before == FIT_BOUNDS  # the module's bounds as they were
    assert FitConfig().family_bounds == before


def test_overlap_on_one_class_fixes_its_overlap_and_fits_its_grace_host_alone() -> None:
    config = FitConfig.from_flags(overlap_scheduler=(PYTORCH,), release_split=True)
    assert config.pytorch_classes() == (PYTORCH, PYTORCH_1_1)
    mine = config.release_bounds(PYTORCH)
    assert "host_overlap" not in mine and "grace_host" in mine
    other = config.release_bounds(PYTORCH_1_1)
    assert "host_overlap" in other and "grace_host" not in other
    assert "grace_host" not in FitConfig().release_bounds(PYTORCH)  # off by default


def test_grace_host_alone_fits_the_grace_speed_beside_a_fitted_overlap() -> None:
    """``--grace-host`` (trt1019): the Grace speed fitted for the named classes only, their
    ``host_overlap`` still fitted (not fixed at 1 as ``--overlap-scheduler`` does)."""
    config = FitConfig.from_flags(grace_host=(PYTORCH,))
    mine = config.release_bounds(PYTORCH)
    assert "host_overlap" in mine and "grace_host" in mine
    assert config.release_fixed == {}
    assert "grace_host" not in config.release_bounds("trtllm-cpp")
    both = FitConfig.from_flags(overlap_scheduler=(PYTORCH,), grace_host=(PYTORCH,))
    assert both.release_only["grace_host"] == (PYTORCH,)  # named once


def test_split_start_gives_each_class_its_rows_and_priors() -> None:
    rows = [r for r in fit_rows() if r.gpu == "b200_hgx"]
    config = FitConfig.from_flags(overlap_scheduler=(PYTORCH,), release_split=True)
    start = start_constants(rows, config)
    assert set(start.costs) == {PYTORCH, PYTORCH_1_1}
    assert start.costs[PYTORCH]["host_overlap"] == 1.0  # fixed: the overlap scheduler
    assert start.costs[PYTORCH]["grace_host"] == 1.0
    assert start.costs[PYTORCH_1_1]["host_overlap"] == 0.0  # fitted from 0
    assert "grace_host" not in start.costs[PYTORCH_1_1]
    counts = {c: sum(start.release_of(r) == c for r in rows) for c in start.costs}
    assert counts[PYTORCH] == sum(r.engine_version in ("0.19", "1.0") for r in rows) > 0
    assert counts[PYTORCH_1_1] == len(rows) - counts[PYTORCH] > 0
    # the committed file has one PyTorch class: the second starts at the priors
    committed = committed_constants(rows, set(), config)
    assert committed.costs[PYTORCH_1_1] == start.costs[PYTORCH_1_1]
    assert committed.costs[PYTORCH]["host_overlap"] == 1.0


def test_split_keys_tie_the_other_costs_to_the_first_class() -> None:
    """``--split-keys``: the 1.1 class fits its per-step and per-sequence host costs, its rows
    run the 0.19-1.0 class's other costs, and that class's block reaches both classes' rows."""
    keys = ("step_overhead_s", "per_seq_overhead_s")
    config = FitConfig.from_flags(release_split=True, split_keys=keys)
    assert config.inherited() == ("layer_overhead_s", "host_overlap", "routing_skew")
    assert set(config.release_bounds(PYTORCH_1_1)) == set(keys)
    assert config.block_classes(PYTORCH) == (PYTORCH, PYTORCH_1_1)
    assert config.block_classes(PYTORCH_1_1) == (PYTORCH_1_1,)
    costs = {
        PYTORCH: {
            "step_overhead_s": 1.0,
            "per_seq_overhead_s": 2.0,
            "layer_overhead_s": 3.0,
            "host_overlap": 0.5,
            "routing_skew": 0.7,
        },
        PYTORCH_1_1: {"step_overhead_s": 10.0, "per_seq_overhead_s": 20.0},
    }
    c = fitting_config.Constants({}, costs, True, config.inherited())
    assert c.class_costs(PYTORCH_1_1) == {
        "step_overhead_s": 10.0,
        "per_seq_overhead_s": 20.0,
        "layer_overhead_s": 3.0,
        "host_overlap": 0.5,
        "routing_skew": 0.7,
    }
    assert c.class_costs(PYTORCH) == costs[PYTORCH]
    # without split keys every class is its own and nothing is tied
    assert FitConfig.from_flags(release_split=True).inherited() == ()
    assert FitConfig.from_flags(release_split=True).block_classes(PYTORCH) == (PYTORCH,)


def _per_hop() -> bool:
    return comm.PER_HOP_LATENCY


def _logits_gather() -> bool:
    return multi_rank.LOGITS_GATHER


def test_the_fit_workers_take_the_per_hop_switch_as_the_pool_was_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the initializer sets it, not fork's copy: flipped back before any worker starts
    monkeypatch.setattr(comm, "PER_HOP_LATENCY", True)
    monkeypatch.setattr(multi_rank, "LOGITS_GATHER", True)
    with worker_pool(1) as pool:
        comm.PER_HOP_LATENCY = False
        multi_rank.LOGITS_GATHER = False
        assert pool.submit(_per_hop).result() is True
        assert pool.submit(_logits_gather).result() is True


def test_the_rank_sync_is_fitted_per_release_only_when_asked() -> None:
    """``--rank-sync``: every release class fits ``rank_step_overhead_s`` from 0 (perf/multi_rank);
    without it no class has the key, so the default fit is the earlier one."""
    rows = [r for r in fit_rows() if r.gpu == "b200_hgx"]
    on = FitConfig.from_flags(rank_sync=True)
    assert on.release_bounds(PYTORCH)["rank_step_overhead_s"] == (0.0, 1e-3)
    assert start_constants(rows, on).costs[PYTORCH]["rank_step_overhead_s"] == 0.0
    assert committed_constants(rows, set(), on).costs[PYTORCH]["rank_step_overhead_s"] == 0.0
    assert "rank_step_overhead_s" not in FitConfig().release_bounds(PYTORCH)
    assert "rank_step_overhead_s" not in start_constants(rows, FitConfig()).costs[PYTORCH]
