"""SM occupancy of TP-sharded GEMMs (``perf/gemm_shape.py``): the rows at half of
``gemm_compute`` grow as the rank's matrices narrow, ``gemm_half_tokens + gemm_half_outputs /
width``; off (0) the ramp is the rows-only one, exactly."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.errors import InferplanError
from inferplan.perf.efficiency import parse_efficiency
from inferplan.perf.gemm_shape import SHARDED_GEMMS, half_rows
from perf.perf_helpers import decode, prefill, roofline, unit_efficiency
from perf.test_roofline import LAYERS, MLP_PARAMS, PEAK, H, gemm_s, toy_model

OUTPUTS = 2.0e6


def test_off_by_default_the_rows_only_ramp() -> None:
    eff = unit_efficiency(gemm_half_tokens=32.0)
    assert eff.gemm_half_outputs == 0.0
    for name in (*SHARDED_GEMMS, "router"):
        assert half_rows(eff, name, 1e6, 4096) == 32.0


def test_narrower_rank_matrices_need_more_rows() -> None:
    eff = unit_efficiency(gemm_half_tokens=32.0, gemm_half_outputs=OUTPUTS)
    hidden, full = 8192, 3 * 8192 * 28672  # Llama-70B's MLP
    by_tp = [half_rows(eff, "mlp", full / tp, hidden) for tp in (1, 2, 4, 8)]
    assert by_tp == sorted(by_tp) and by_tp[0] < by_tp[-1]
    assert by_tp[3] == pytest.approx(32.0 + OUTPUTS / (full / 8 / hidden))
    assert half_rows(eff, "router", 8192 * 8, hidden) == 32.0  # replicated, not sharded


def test_the_extra_time_is_a_wave_tail_per_gemm_whatever_the_rows() -> None:
    """Compute-bound, ``2 W (rows + X / width) / peak``: the ramp adds ``2 hidden X / peak``
    per GEMM, the time of ``X`` outputs over the full reduction depth, at any batch."""
    outputs = 1e5
    plain = toy_model(unit_efficiency())
    shaped = toy_model(unit_efficiency(gemm_half_outputs=outputs))
    for tokens in (4096, 16384):
        extra = (
            shaped.step_time(prefill(tokens)).by_operator_s["mlp"]
            - plain.step_time(prefill(tokens)).by_operator_s["mlp"]
        )
        assert extra == pytest.approx(LAYERS * 2 * H * outputs / PEAK)
        assert plain.step_time(prefill(tokens)).by_operator_s["mlp"] == pytest.approx(
            LAYERS * gemm_s(MLP_PARAMS, tokens)
        )


def test_a_tp8_decode_step_slows_more_than_a_tp8_prefill_step() -> None:
    """What the mechanism is for: a decode batch of a few hundred rows on a TP8 rank's narrow
    matrices loses a larger share than a prefill step of thousands of tokens."""
    base = roofline("Llama-3.1-70B", "h200", tp=8)
    shaped = replace(base.eff, gemm_half_outputs=OUTPUTS)
    model = type(base)(
        base.spec, base.gpu, base.par, base.formats, base.kv, shaped, topology=base.topology
    )

    def ratio(batch: object) -> float:
        return model.step_time(batch).total_s / base.step_time(batch).total_s  # type: ignore[arg-type]

    slow_decode, slow_prefill = ratio(decode(512, 2048)), ratio(prefill(8192))
    assert slow_decode > slow_prefill > 1.0


def test_the_loader_rejects_a_negative_value() -> None:
    data = unit_efficiency().to_dict() | {"gemm_half_outputs": -1.0}
    with pytest.raises(InferplanError, match="gemm_half_outputs"):
        parse_efficiency(data, "hopper.yaml")
