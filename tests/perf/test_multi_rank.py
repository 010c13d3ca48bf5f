"""What a multi-GPU replica pays per step (perf/multi_rank.py): the ranks' per-step host sync,
from two GPUs on and not growing with them, and the LM head's logits all-gather."""

from __future__ import annotations

import pytest

from inferplan.perf import multi_rank
from inferplan.perf.multi_rank import logits_gather_ops, with_rank_sync
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import decode, roofline, unit_efficiency

RANK_S, STEP_S = 4e-4, 1e-3


def _model(tp: int = 1, **eff: float) -> RooflineModel:
    """Llama-3.1-8B on H100 with the bare roofline and only the named constants set."""
    model = roofline("Llama-3.1-8B", tp=tp)
    return RooflineModel(
        model.spec, model.gpu, model.par, model.formats, model.kv, unit_efficiency(**eff)
    )


@pytest.mark.parametrize(
    ("par", "step_s"),
    [
        (Parallelism(), STEP_S),
        (Parallelism(dp=4), STEP_S),  # four replicas of one GPU each: no rank to sync
        (Parallelism(tp=2), STEP_S + RANK_S),
        (Parallelism(tp=8), STEP_S + RANK_S),  # the same from two ranks to eight
        (Parallelism(pp=2), STEP_S + RANK_S),
        (Parallelism(dp=4, enable_expert_parallel=True), STEP_S + RANK_S),
    ],
)
def test_the_rank_sync_is_paid_from_two_gpus_of_a_replica_on(
    par: Parallelism, step_s: float
) -> None:
    eff = with_rank_sync(unit_efficiency(step_overhead_s=STEP_S, rank_step_overhead_s=RANK_S), par)
    assert eff.step_overhead_s == step_s
    assert eff.rank_step_overhead_s == 0.0
    assert with_rank_sync(eff, par) == eff  # once folded in, never again


def test_a_tp2_step_pays_the_rank_sync_once_per_step_and_tp1_does_not() -> None:
    batch = decode(16, 1000)
    for tp, extra in ((1, 0.0), (2, RANK_S), (4, RANK_S)):
        off = _model(tp, step_overhead_s=STEP_S).step_time(batch)
        on = _model(tp, step_overhead_s=STEP_S, rank_step_overhead_s=RANK_S).step_time(batch)
        assert on.by_bound_s["overhead"] - off.by_bound_s["overhead"] == pytest.approx(
            extra, abs=1e-15
        )


def test_the_logits_gather_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """TP4 over H100's NVLink (450 GB/s one way) at half its rate, 10 us a collective: each
    rank receives 3/4 of 64 rows x 128,256 logits x 2 bytes."""
    monkeypatch.setattr(multi_rank, "LOGITS_GATHER", True)
    model = _model(4, collective_bandwidth=0.5, collective_latency_s=1e-5)
    assert model.padded_vocab == 128_256
    (op,) = logits_gather_ops(64, model)
    compute, memory = op.terms(0.0)
    assert compute == 0.0
    assert memory == pytest.approx(1e-5 + 0.75 * 64 * 128_256 * 2 / 225e9, rel=1e-12)
    assert not op.per_stage  # once per micro-batch, with the LM head
    assert logits_gather_ops(64, _model(1)) == ()
    assert logits_gather_ops(0, model) == ()


def test_a_decode_step_pays_the_gather_once(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = decode(64, 1000)
    off = _model(4, collective_bandwidth=0.5, collective_latency_s=1e-5).step_time(batch).total_s
    monkeypatch.setattr(multi_rank, "LOGITS_GATHER", True)
    on = _model(4, collective_bandwidth=0.5, collective_latency_s=1e-5).step_time(batch).total_s
    assert on - off == pytest.approx(1e-5 + 0.75 * 64 * 128_256 * 2 / 225e9, rel=1e-9)


def test_the_decode_line_agrees_with_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gather in the closed-form decode line as in the step (every fast path sees it)."""
    monkeypatch.setattr(multi_rank, "LOGITS_GATHER", True)
    model = _model(
        2, collective_bandwidth=0.5, collective_latency_s=1e-5, rank_step_overhead_s=1e-4
    )
    a, b, _ = model.decode_line(32, 32_000)
    assert a + b * 32_000 == pytest.approx(model.step_time(decode(32, 1000)).total_s, rel=1e-12)
