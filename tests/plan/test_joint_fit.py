"""The served rows' linearised loss (``plan/calibration.py`` ``LinearLogModel``) and
``scripts/fit_published.py --served``'s folds and constants (``plan/fitting``), on hand-computed
cases."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest

from inferplan.plan.calibration import HUBER_KNEE, LinearLogModel, finite_slope
from inferplan.plan.fitting import descent
from inferplan.plan.fitting.config import (
    FitConfig,
    fit_rows,
    loss,
    predict,
    values_of,
    with_variable,
)
from inferplan.plan.fitting.crossval import joint_folds
from inferplan.plan.fitting.descent import committed_constants, joint_loss
from inferplan.plan.fitting.served_fit import Served, block_weights, engine_totals

CONFIG = FitConfig()


def _model() -> LinearLogModel:
    return LinearLogModel(
        base=np.log([2.0, 3.0]),
        target=np.log([2.0, 3.0]),
        origin={"a": 0.5, "b": 0.001},
        slopes={"a": np.array([1.0, 0.0]), "b": np.array([0.5, 2.0])},
        logs=frozenset({"a"}),
    )


def test_linear_model_is_linear_in_log_fractions_and_raw_overheads() -> None:
    # a: 0.5 -> 1.0 is a log step of log 2 (a fraction); b: +0.002 s raw (an overhead).
    got = _model().predict({"a": 1.0, "b": 0.003})
    assert got == pytest.approx([2 * math.log(2.0) + 0.001, math.log(3.0) + 0.004])
    assert _model().predict({}) == pytest.approx(np.log([2.0, 3.0]))  # the origin


def test_linear_model_huber_sum_by_hand() -> None:
    # log errors +0.1 (quadratic) and -0.5 (past the 25 % knee: linear)
    model = LinearLogModel(np.array([0.1, -0.5]), np.zeros(2), {}, {})
    manual = 0.5 * 0.1**2 + HUBER_KNEE * (0.5 - 0.5 * HUBER_KNEE)
    assert model.huber_sum({}) == pytest.approx(manual)


def test_subset_keeps_the_rows_in_order() -> None:
    sub = _model().subset(np.array([False, True]))
    assert sub.base == pytest.approx([math.log(3.0)])
    assert sub.slopes["b"] == pytest.approx([2.0])


def test_finite_slope() -> None:
    assert finite_slope(2.0, 2.0 * math.exp(0.1), 0.05) == pytest.approx(2.0)
    assert finite_slope(2.0, 2.0 * math.exp(-0.1), -0.05) == pytest.approx(2.0)
    assert finite_slope(2.0, None, 0.05) == 0.0


def test_joint_folds_deal_served_configurations_beside_the_closed_form_folds() -> None:
    # stand-ins with only the fields read (typed Any: they are not PublishedRows)
    rows: list[Any] = [SimpleNamespace(case_id=c) for c in ("a", "b", "c")]
    served: list[Any] = [SimpleNamespace(case_id=c) for c in ("z", "b", "x", "y", "x")]
    # closed form: {a, c}, {b}; served only x, y, z, dealt in sorted order
    assert joint_folds(rows, served, 2) == [{"a", "c", "x", "z"}, {"b", "y"}]


def test_constants_by_name_round_trip() -> None:
    rows = [r for r in fit_rows() if r.gpu == "h200_sxm_141gb"][:2]
    origin = committed_constants(rows, set(), CONFIG)
    moved = with_variable(origin, "hopper:gemm_compute", 0.5)
    assert moved.family["hopper"].gemm_compute == 0.5
    assert values_of(moved, CONFIG)["hopper:gemm_compute"] == 0.5
    release = next(iter(origin.costs))
    moved = with_variable(origin, f"{release}:step_overhead_s", 0.002)
    assert moved.costs[release]["step_overhead_s"] == 0.002
    assert moved.family == origin.family
    # a step that would cross the upper bound goes the other way
    assert CONFIG.step("hopper:routing_skew", 0.99) == -0.1
    assert CONFIG.step("hopper:gemm_compute", 0.6) == 0.05
    assert CONFIG.step("hopper:gemm_compute", 0.97) == -0.05


def test_joint_loss_counts_a_served_row_weight_times_a_closed_form_row() -> None:
    rows = [r for r in fit_rows() if r.gpu == "h200_sxm_141gb"][:2]
    c = committed_constants(rows, set(), CONFIG)
    closed = loss(predict(rows, c)) * 2  # summed over the two rows
    # three served rows off by log 0.1 each (quadratic: 0.005), no slopes
    model = LinearLogModel(np.full(3, 0.1), np.zeros(3), {}, {})
    served = Served(rows[:1] * 3, model, weight=2.0)
    expected = (closed + 2.0 * 3 * 0.005) / (2 + 2.0 * 3)
    assert joint_loss(rows, c, served, CONFIG) == pytest.approx(expected)
    assert joint_loss(rows, c, None, CONFIG) == pytest.approx(closed / 2)
    assert served.block(lambda r: True) is not None
    assert Served(rows[:1] * 3, model, weight=0.0).block(lambda r: True) is None


def _served_rows() -> list[Any]:
    def row(engine: str, version: str = "") -> SimpleNamespace:
        return SimpleNamespace(engine=engine, engine_version=version)

    triton = row("tensorrt-llm", "0.14.0")
    serve = row("tensorrt-llm", "1.0.0")
    return [row("vllm"), row("vllm"), row("vllm"), row("sglang"), triton, serve, serve]


def test_block_weights_balance_each_engine_by_hand() -> None:
    served_rows = _served_rows()
    model = LinearLogModel(np.zeros(7), np.zeros(7), {}, {})
    closed: list[Any] = [object(), object()]  # two trtllm-bench rows: only their count matters
    served = Served(served_rows, model, weight=1.0, balance="row")
    assert block_weights(closed, served)[0] == 1.0
    assert block_weights(closed, served)[1] == pytest.approx(np.ones(7))
    # family: each engine in the block totals 1 (vLLM 3 rows, trtllm-serve 2, the rest 1)
    served.balance = "family"
    closed_w, each = block_weights(closed, served)
    assert closed_w == 0.5
    assert each == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0, 1.0, 0.5, 0.5])
    served.balance = "sqrt"  # each engine totals the square root of its count in the block
    closed_w, each = block_weights(closed, served)
    assert closed_w == pytest.approx(2**-0.5)
    assert each == pytest.approx([3**-0.5] * 3 + [1.0, 1.0, 2**-0.5, 2**-0.5])
    served.balance = "family"
    served.weight = 2.0  # a served row's weight multiplies its engine's share
    assert block_weights(closed, served)[1] == pytest.approx([2 / 3] * 3 + [2, 2, 1, 1])
    # overall: the whole fit's counts, not the block's
    served.weight, served.balance = 1.0, "overall"
    served.totals = {"trtllm-bench": 4, "vllm": 6, "sglang": 1, "triton (trtllm 0.14)": 2}
    served.totals["trtllm-serve"] = 8
    closed_w, each = block_weights(closed, served)
    assert closed_w == 0.25
    assert each == pytest.approx([1 / 6] * 3 + [1.0, 0.5, 1 / 8, 1 / 8])
    assert engine_totals(closed, served) == {
        "trtllm-bench": 2,
        "vllm": 3,
        "sglang": 1,
        "triton (trtllm 0.14)": 1,
        "trtllm-serve": 2,
    }


def test_joint_loss_with_engines_balanced_by_hand() -> None:
    rows = [r for r in fit_rows() if r.gpu == "h200_sxm_141gb"][:2]
    c = committed_constants(rows, set(), CONFIG)
    closed = loss(predict(rows, c)) * 2  # summed over the two rows
    # served: three vLLM rows off by log 0.1 (0.005 each), one SGLang row by log 0.2 (0.02)
    model = LinearLogModel(np.array([0.1, 0.1, 0.1, 0.2]), np.zeros(4), {}, {})
    served = Served(_served_rows()[:4], model, balance="family")
    # each engine weighs 1: (closed / 2 + 3 * 0.005 / 3 + 0.02) / 3
    expected = (closed / 2 + 0.005 + 0.02) / 3
    assert joint_loss(rows, c, served, CONFIG) == pytest.approx(expected)
    served.balance = "row"
    assert joint_loss(rows, c, served, CONFIG) == pytest.approx((closed + 0.015 + 0.02) / 6)


def test_overall_balance_counts_the_whole_fit_not_the_block() -> None:
    rows = [r for r in fit_rows() if r.gpu == "h200_sxm_141gb"][:2]
    c = committed_constants(rows, set(), CONFIG)
    served_rows: list[Any] = [
        SimpleNamespace(engine="vllm", engine_version="", gpu=gpu)
        for gpu in ("h200_sxm_141gb", "a100_sxm_80gb", "a100_sxm_80gb")
    ]
    model = LinearLogModel(np.zeros(3), np.zeros(3), {}, {})
    served = Served(served_rows, model, balance="overall")
    seen = []

    def record(mine, constants, bounds, setter, steps, config, part=None):  # type: ignore[no-untyped-def]
        seen.append((len(mine), part and block_weights(mine, part)))
        return constants

    with patch.object(descent, "descend", record):
        descent.fit(rows, c, CONFIG, 1, 1, None, served, {"hopper"})
    # Hopper's block: two closed-form rows, one vLLM row; weights from the whole fit's counts
    # (2 closed-form, 3 vLLM), so the vLLM row weighs 1/3, not 1/1
    ((count, (closed_w, each)),) = seen
    assert count == 2 and closed_w == 0.5 and each == pytest.approx([1 / 3])
