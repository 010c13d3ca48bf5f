"""A pipelined step's fixed costs (perf/pipeline_costs.py): each micro-batch in flight pays the
host's per-step work, and every stage pass pays its layers' launches."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.perf import pipeline_costs
from inferplan.perf.roofline import RooflineModel
from perf.perf_helpers import decode, roofline, unit_efficiency

STEP_S, PER_SEQ_S, LAYER_S = 1e-3, 2e-5, 3e-5


def _model(pp: int) -> RooflineModel:
    """Llama-3.1-8B (32 layers) with only the overheads set, nothing hidden behind the GPU."""
    model = roofline("Llama-3.1-8B", pp=pp)
    eff = unit_efficiency(
        step_overhead_s=STEP_S,
        per_seq_overhead_s=PER_SEQ_S,
        layer_overhead_s=LAYER_S,
    )
    return RooflineModel(
        model.spec, model.gpu, model.par, model.formats, model.kv, replace(eff, host_overlap=0.0)
    )


@pytest.mark.parametrize(
    ("pp", "seqs", "microbatches"), [(1, 8, 1), (2, 8, 2), (4, 8, 4), (4, 3, 3)]
)
def test_each_microbatch_pays_the_host_step_and_each_stage_pass_its_launches(
    pp: int, seqs: int, microbatches: int
) -> None:
    """By hand: m = min(pp, seqs) host steps, the per-sequence work once per sequence, and
    pp passes of a stage's 32 / pp layers' launches: 32 launches a step whatever pp."""
    step = _model(pp).step_time(decode(seqs, 500))
    expected = microbatches * STEP_S + seqs * PER_SEQ_S + 32 * LAYER_S
    assert step.by_bound_s["overhead"] == pytest.approx(expected, rel=1e-12)


def test_the_earlier_reading_charges_one_host_step_and_one_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline_costs, "PIPELINE_MICROBATCH_COSTS", False)
    step = _model(4).step_time(decode(8, 500))
    assert step.by_bound_s["overhead"] == pytest.approx(
        STEP_S + 8 * PER_SEQ_S + 8 * LAYER_S, rel=1e-12
    )


def test_without_pipeline_the_earlier_sum_is_kept_to_the_last_bit() -> None:
    """pp = 1: host, launches and eager launches summed in the earlier order; with these values
    (a + b) + c and a + (b + c) differ in the last bit, so a reordered sum fails here."""
    eff = replace(_model(1).eff, eager_layer_overhead_s=3e-7)
    batch = decode(1, 500)
    got = pipeline_costs.stage_pass_overhead_s(
        eff,
        batch,
        attention_dp=1,
        stage_layers=32,
        microbatches=1,
        pipeline_factor=1.0,
        eager=True,
    )
    host = STEP_S + PER_SEQ_S
    assert got == (host + 32 * LAYER_S) + 32 * 3e-7
    assert got != host + (32 * LAYER_S + 32 * 3e-7)


def test_under_pipeline_the_eager_launches_are_paid_every_stage_pass() -> None:
    """A step outside CUDA graphs, pp = 4, 8 sequences: 4 host steps, the per-sequence work
    once, and 4 passes of 8 layers' graph and eager launches: 32 of each a step."""
    eager_s = 3e-7
    eff = replace(_model(4).eff, eager_layer_overhead_s=eager_s)
    per_pass = pipeline_costs.stage_pass_overhead_s(
        eff,
        decode(8, 500),
        attention_dp=1,
        stage_layers=8,
        microbatches=4,
        pipeline_factor=4.0,
        eager=True,
    )
    expected = 4 * STEP_S + 8 * PER_SEQ_S + 32 * (LAYER_S + eager_s)
    assert per_pass * 4 == pytest.approx(expected, rel=1e-12)
