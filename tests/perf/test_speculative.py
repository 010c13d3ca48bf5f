"""Speculative decoding (``perf/speculative.py``): tokens per step, the verify's cost, the
drafters, and the ``roofline`` flags."""

from __future__ import annotations

import json

import pytest

from cli_run import assert_one_line_error, run
from inferplan.errors import InferplanError
from inferplan.perf.batch import StepBatch
from inferplan.perf.speculative import (
    SpeculativeConfig,
    SpeculativeModel,
    acceptance_for_length,
    break_even_batch,
    expected_tokens_per_step,
    speedup,
)
from perf.perf_helpers import roofline, spec_of
from perf.test_roofline import toy_model

ARGS = ["roofline", "--model", "Llama-3.1-8B", "--gpu", "h100", "--input-len", "128"]
EAGLE = ["--speculative-method", "eagle3", "--num-speculative-tokens", "4"]


@pytest.mark.parametrize(
    ("acceptance", "k", "tokens"),
    [
        (0.5, 2, 1.75),  # 1 + 0.5 + 0.25
        (0.8, 4, 3.3616),  # 1 + .8 + .64 + .512 + .4096
        (0.0, 4, 1.0),  # only the bonus token
        (1.0, 4, 5.0),  # every draft accepted
    ],
)
def test_expected_tokens_per_step_by_hand(acceptance: float, k: int, tokens: float) -> None:
    assert expected_tokens_per_step(acceptance, k) == pytest.approx(tokens, rel=1e-12)


def test_accept_length_inverts_to_the_acceptance() -> None:
    for k in (1, 3, 4, 8):
        for a in (0.1, 0.5, 0.7, 0.95):
            length = expected_tokens_per_step(a, k)
            assert acceptance_for_length(length, k) == pytest.approx(a, abs=1e-9)
    with pytest.raises(InferplanError, match="--spec-accept-length"):
        acceptance_for_length(5.5, 4)  # above k + 1


def _model(method: str = "eagle3", k: int = 4, a: float = 0.7) -> SpeculativeModel:
    return SpeculativeModel(roofline("Llama-3.1-8B"), SpeculativeConfig(method, k, a))


def test_no_drafts_is_the_plain_decode_step() -> None:
    target = roofline("Llama-3.1-8B")
    for n, c in ((1, 1024), (64, 4096), (512, 128)):
        plain = target.step_time(StepBatch(num_decode_seqs=n, decode_context_tokens=n * c))
        zero = target.step_time(
            StepBatch(num_decode_seqs=n, decode_context_tokens=n * c, num_draft_tokens=0)
        )
        assert zero == plain


def test_verify_cost_rises_with_k() -> None:
    for n in (1, 32, 256):
        times = [_model(k=k).verify_time(n, n * 1024).total_s for k in range(0, 9)]
        assert times == sorted(times) and times[0] < times[-1]
        steps = [_model(k=k).step_time_s(n, n * 1024) for k in range(1, 9)]
        assert steps == sorted(steps)


def test_verify_runs_the_gemms_on_k_plus_one_rows_and_reads_kv_once() -> None:
    target = roofline("Llama-3.1-8B")
    n, k, c = 4, 4, 2048
    verify = _model(k=k).verify_time(n, n * c).by_operator_s
    wide = target.step_time(StepBatch(num_decode_seqs=n * (k + 1), decode_context_tokens=n * c))
    for op in ("attn_proj", "mlp", "lm_head"):
        assert verify[op] == pytest.approx(wide.by_operator_s[op], rel=1e-12)
    # (k+1) separate sequences would each read the KV; the verify reads it once.
    replicated = target.step_time(
        StepBatch(num_decode_seqs=n * (k + 1), decode_context_tokens=n * (k + 1) * c)
    )
    assert verify["attn_decode"] < replicated.by_operator_s["attn_decode"] / 3


def test_speculation_pays_at_batch_one_and_stops_paying_when_compute_bound() -> None:
    model = _model(k=4, a=0.5)  # 1.94 tokens per step
    assert speedup(model, 1, 1024) > 1.2
    assert speedup(model, 512, 1024) < 1.0
    edge = break_even_batch(model, 1024, 512)
    assert edge is not None
    assert speedup(model, edge, 1024) < 1.0 <= speedup(model, edge - 1, 1024)


def test_drafters_cost_what_they_run() -> None:
    eagle, mtp = _model("eagle3"), _model("mtp")
    draft = SpeculativeModel(
        roofline("Llama-3.1-8B"), SpeculativeConfig("draft", 4, 0.7, spec_of("Llama-3.1-8B"))
    )
    # A whole 8B model as the drafter costs about one target step per draft token.
    full = roofline("Llama-3.1-8B").step_time(StepBatch(1, 0, 0, 0, 1, 1024)).total_s
    assert 3 * full < draft.draft_time_s(1, 1024) < 4 * full
    # A one-layer head is far cheaper (its LM head dominates); the dense 8B has one layer kind.
    assert eagle.draft_time_s(1, 1024) < draft.draft_time_s(1, 1024) / 3
    assert mtp.draft_time_s(1, 1024) == pytest.approx(eagle.draft_time_s(1, 1024))


def test_roofline_shows_speculation_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *ARGS, "--batch-sizes", "1,256", "--json")
    assert code == 0 and "speculative" not in json.loads(out)
    argv = [*ARGS, "--batch-sizes", "1,256", *EAGLE, "--spec-accept-length", "2", "--json"]
    code, out, _ = run(capsys, *argv)
    spec = json.loads(out)["speculative"]
    assert code == 0 and spec["accept_length"] == pytest.approx(2.0)
    one, many = spec["decode"]
    assert one["speedup"] > 1.0 > many["speedup"]
    assert one["tokens_per_s"] == pytest.approx(2.0 / one["step_time_s"])
    assert spec["break_even"][0]["break_even_batch_size"] is not None
    assert spec["verify_compute_bound_batch_size"] < json.loads(out)["compute_bound_batch_size"]
    code, out, _ = run(capsys, *argv[:-1])  # the terminal tables
    assert code == 0 and "stops paying" in out


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--num-speculative-tokens", "4"], "--num-speculative-tokens"),
        (["--speculative-method", "eagle3", "--spec-acceptance-rate", "0.5"], "--num-speculative"),
        ([*EAGLE], "--spec-acceptance-rate"),
        ([*EAGLE, "--spec-acceptance-rate", "0.5", "--spec-accept-length", "2"], "--spec-acc"),
        ([*EAGLE, "--spec-accept-length", "5.5"], "--spec-accept-length"),
        ([*EAGLE, "--spec-acceptance-rate", "1.5"], "--spec-acceptance-rate"),
        (["--speculative-method", "draft", "--num-speculative-tokens", "4",
          "--spec-acceptance-rate", "0.5"], "--speculative-model"),
        ([*EAGLE, "--spec-acceptance-rate", "0.5", "--speculative-model", "Qwen3-8B"],
         "--speculative-model"),
        (["--speculative-method", "draft", "--num-speculative-tokens", "4",
          "--spec-acceptance-rate", "0.5", "--speculative-model", "no-such-model"],
         "--speculative-model: 'no-such-model'"),
        (["--speculative-method", "medusa"], "--speculative-method"),
        ([*EAGLE[:2], "--num-speculative-tokens", "0"], "--num-speculative-tokens"),
    ],
)  # fmt: skip
def test_bad_speculative_flags_fail_in_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    code, _, err = run(capsys, *ARGS, "--batch-sizes", "1", *extra)
    assert code == 2
    assert flag in assert_one_line_error(err)


def test_verify_attention_by_hand_on_the_toy_model() -> None:
    """Toy (``test_roofline``): 4 query heads and 2 KV heads of 16 per layer, 2 layers, bf16,
    1e12 B/s, 1e13 FLOP/s. Per layer: 128 B of KV per token, 256 B of query in and out per
    row, 256 FLOPs per (query, key) pair."""
    model = toy_model()
    n, context, k = 2, 200, 4  # two sequences of 100 tokens, four drafts each
    batch = StepBatch(num_decode_seqs=n, decode_context_tokens=context, num_draft_tokens=k)
    flops = 256 * (5 * 200 + 2 * 4 * 5 / 2)  # 5 queries over the context, + drafts before each
    memory = 128 * (200 + 2 * 5) + 256 * 2 * 5  # KV read once, 10 rows written, q in/out
    expected = 2 * max(flops / 1e13, memory / 1e12)
    assert model.step_time(batch).by_operator_s["attn_decode"] == pytest.approx(expected)
    assert expected == pytest.approx(2 * 29_440 / 1e12)  # memory-bound: 2.944e-8 s a layer


def test_a_pipelined_target_drafts_on_one_stage() -> None:
    """A one-layer head cannot be split into stages: it runs unpipelined beside the LM head."""
    pipelined = SpeculativeModel(
        roofline("Llama-3.1-70B", tp=2, pp=2), SpeculativeConfig("eagle3", 3, 0.7)
    )
    flat = SpeculativeModel(roofline("Llama-3.1-70B", tp=2), SpeculativeConfig("eagle3", 3, 0.7))
    assert pipelined.draft_time_s(8, 8 * 1024) == pytest.approx(flat.draft_time_s(8, 8 * 1024))
    assert speedup(pipelined, 1, 1024) > 1.0


def test_an_moe_mtp_head_takes_the_targets_engine_moe_pieces() -> None:
    """Qwen3-30B-A3B's last layer as an MTP head: the drafter exchanges and runs the experts'
    passes as the target does (``plan/engine_moe.py`` sets them on the target only)."""
    target = roofline("Qwen3-30B-A3B", tp=1, dp=4, ep=True)
    plain = SpeculativeModel(target, SpeculativeConfig("mtp", 2, 0.7)).draft_time_s(64, 65_536)
    target.moe_exchange, target.moe_passes = "allgather", True
    mtp = SpeculativeModel(target, SpeculativeConfig("mtp", 2, 0.7))
    assert (mtp.drafter.moe_exchange, mtp.drafter.moe_passes) == ("allgather", True)
    assert mtp.draft_time_s(64, 65_536) > plain
