"""Speculative decoding in the simulator (``engine/speculation.py``).

Hand-checked acceptance draws; one request alone takes exactly the steps and step times the
model gives (the roofline's ``SpeculativeModel``) with the tokens its stream accepts; vLLM's
scheduled tokens and lookahead slots; invariants after every step under preemption; fast ==
exact on random cases; determinism; and the summary's counters against their definitions.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import assert_one_line_error, run
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.engine.speculation import (
    AcceptanceStreams,
    SimSpeculation,
    SpecDecode,
    SpecStepTimes,
    accepted_drafts,
)
from inferplan.metrics.records import RequestStatus
from inferplan.metrics.summary import summarize
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.speculative import SpeculativeConfig, SpeculativeModel
from inferplan.workload import Workload

from . import test_fast_equals_exact as harness
from .replica_helpers import replica_at_zero

COMPLETED = int(RequestStatus.COMPLETED)


@cache
def _model() -> RooflineModel:
    _, model = harness._plan_and_model()
    assert isinstance(model, RooflineModel)
    return model


def _spec(k: int = 3, a: float = 0.7, method: str = "eagle3", seed: int = 0) -> SimSpeculation:
    return SimSpeculation(SpeculativeConfig(method, k, a), seed)


def _one_request(prompt: int, output: int) -> Workload:
    return Workload(
        arrival_s=np.zeros(1),
        input_tokens=np.array([prompt]),
        output_tokens=np.array([output]),
        class_ids=np.zeros(1, dtype=np.int64),
    )


def _config(
    spec: SimSpeculation | None,
    *,
    num_blocks: int = 10_000,
    exact: bool = False,
    max_model_len: int = 4096,
    budget: int = 2048,
) -> SimulationConfig:
    sched = SchedulerConfig(
        max_num_batched_tokens=budget, max_num_seqs=256, block_size=16, num_blocks=num_blocks
    )
    return SimulationConfig(sched, max_model_len, exact=exact, speculative=spec)


def test_accepted_drafts_is_the_truncated_geometric() -> None:
    # floor(log v / log a), capped at the drafts: P(m >= j) = a^j.
    v = np.array([1.0, 0.6, 0.5, 0.26, 0.25, 0.2, 1e-9])
    assert accepted_drafts(v, 0.5, 3).tolist() == [0, 0, 1, 1, 2, 2, 3]
    assert accepted_drafts(v, 0.0, 3).tolist() == [0] * 7
    assert accepted_drafts(v, 1.0, 3).tolist() == [3] * 7
    streams = AcceptanceStreams(seed=7, acceptance=0.7, num_drafts=3)
    draws = np.array([streams.draw(0) for _ in range(40_000)])
    for j in range(1, 4):  # P(m >= j) = a^j within sampling error (4 sigma)
        assert abs(np.mean(draws >= j) - 0.7**j) < 4 * np.sqrt(0.7**j / 40_000)
    expected_length = SpeculativeConfig("eagle3", 3, 0.7).accept_length  # 2.533
    assert 1 + draws.mean() == pytest.approx(expected_length, abs=0.02)


def test_streams_do_not_depend_on_the_order_requests_draw() -> None:
    one, two = AcceptanceStreams(3, 0.6, 4), AcceptanceStreams(3, 0.6, 4)
    alone = [one.draw(5) for _ in range(200)]
    mixed = []
    for i in range(200):
        two.draw(9)
        mixed.append(two.draw(5))
        if i % 3 == 0:
            two.draw(1)
    assert alone == mixed
    assert alone != [AcceptanceStreams(4, 0.6, 4).draw(5) for _ in range(200)]  # the seed


@pytest.mark.parametrize("k,a", [(3, 0.7), (1, 0.0), (4, 1.0), (2, 0.3)])
def test_one_request_takes_the_models_steps_with_its_streams_tokens(k: int, a: float) -> None:
    """Alone, a request's first token comes after its prefill (plus the drafter's passes on
    it) and every later step is the roofline's speculative step (``SpeculativeModel``: verify
    of ``1 + k`` rows and ``k`` drafter passes), emitting what its stream accepts."""
    prompt, output = 300, 97
    spec = _spec(k, a, seed=11)
    result = Simulation(_one_request(prompt, output), _config(spec), _model()).run()
    times = SpecStepTimes(_model(), spec.config)
    roofline = SpeculativeModel(_model(), spec.config)
    stream = AcceptanceStreams(11, a, k)
    now = times.verify.seconds(prompt, prompt * (prompt + 1) / 2, 0, 1, 0, 0)
    now += times.draft_s(1, prompt)
    first_token, computed, generated, steps = now, prompt, 1, 1
    while generated < output:
        step = roofline.step_time_s(1, computed + 1)
        assert times.verify.seconds(0, 0.0, 0, 0, 1, computed + 1) + times.draft_s(
            1, computed + 1
        ) == pytest.approx(step, rel=1e-12)
        now += times.verify.seconds(0, 0.0, 0, 0, 1, computed + 1) + times.draft_s(1, computed + 1)
        accepted = stream.draw(0)
        computed += 1 + accepted
        generated += min(1 + accepted, output - generated)
        steps += 1
    rec = result.records
    assert result.num_steps == steps
    assert rec.first_token_s[0] == first_token
    assert rec.finish_s[0] == pytest.approx(now, rel=1e-12)
    assert rec.output_tokens[0] == output
    if a == 1.0:  # every verify emits k + 1 tokens
        assert steps == 1 + -(-(output - 1) // (k + 1))
    if a == 0.0:  # one token per step, as without speculation (at a higher step cost)
        assert steps == output
    assert result.itl.total_weight == steps - 1  # one ITL sample per step (one chunk)


def _decoding_replica(spec: SimSpeculation, computed: int, budget: int = 2048) -> Replica:
    cfg = SchedulerConfig(
        max_num_batched_tokens=budget, max_num_seqs=8, block_size=16, num_blocks=1000
    )
    replica = replica_at_zero([computed], [500], cfg, _model())
    replica.running.append(0, computed, computed + 1, 5, 500, -(-computed // 16), 0.0)
    replica.pool.free -= -(-computed // 16)
    SpecDecode(spec, SpecStepTimes(_model(), spec.config), 4096).attach(replica)
    return replica


def test_a_decode_is_scheduled_its_drafts_and_lookahead_slots() -> None:
    """vLLM v1: ``1 + k`` tokens scheduled, blocks for computed + 1 + k + k lookahead."""
    replica = _decoding_replica(_spec(k=3), computed=160)  # 10 full blocks
    decision = replica.scheduler.schedule(0.0)
    assert decision.sched.tolist() == [4]
    assert replica.running.held_blocks.tolist() == [-(-(160 + 4 + 3) // 16)]  # 11
    trimmed = _decoding_replica(_spec(k=3), computed=160, budget=2)
    assert trimmed.scheduler.schedule(0.0).sched.tolist() == [2]  # the budget trims drafts


def test_rejected_drafts_roll_back_computed_tokens() -> None:
    replica = _decoding_replica(_spec(k=3, a=0.0), computed=160)
    replica.step()
    run = replica.running
    assert (run.num_computed[0], run.num_tokens[0], run.num_generated[0]) == (161, 162, 6)
    assert run.held_blocks[0] == 11  # the slots of the rejected drafts stay allocated
    replica = _decoding_replica(_spec(k=3, a=1.0), computed=160)
    replica.step()
    run = replica.running
    assert (run.num_computed[0], run.num_tokens[0], run.num_generated[0]) == (164, 165, 9)


def _workload(seed: int = 1, num: int = 80) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        arrival_s=np.sort(rng.uniform(0, 2.0, num)),
        input_tokens=rng.integers(1, 600, num),
        output_tokens=rng.integers(1, 400, num),
        class_ids=np.zeros(num, dtype=np.int64),
    )


def _checked(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    def check(replica: Replica) -> None:
        replica.check_invariants()
        assert replica.pool.free >= 0

    return Simulation(wl, cfg, _model()).run(check=check)


@pytest.mark.parametrize("num_blocks", [60, 10_000], ids=["small-pool", "plenty"])
def test_invariants_and_outcomes_with_speculation(num_blocks: int) -> None:
    wl = _workload()
    cfg = _config(_spec(k=4, a=0.6), num_blocks=num_blocks, max_model_len=1000, budget=256)
    result = _checked(wl, cfg)
    rec = result.records
    done = rec.status == COMPLETED
    # Rejected at arrival: those whose last verify's slots (drafts and lookahead) can never fit.
    slots = np.minimum(wl.input_tokens + wl.output_tokens - 1 + 2 * 4, 1000)
    np.testing.assert_array_equal(~done, -(-slots // 16) > num_blocks)
    assert np.all(rec.status[~done] == int(RequestStatus.REJECTED))
    np.testing.assert_array_equal(rec.output_tokens[done], wl.output_tokens[done])
    assert np.all(rec.first_token_s[done] <= rec.finish_s[done])
    if num_blocks == 60:
        assert rec.num_preemptions.sum() > 0
    spec = result.speculative
    assert spec is not None
    assert spec["num_draft_tokens"] <= 4 * spec["num_drafts"]
    assert spec["mean_acceptance_length"] == 1 + spec["num_accepted_tokens"] / spec["num_drafts"]


def test_speculation_cuts_steps_and_tpot_at_low_load() -> None:
    wl = _workload(num=20)
    plain = Simulation(wl, _config(None), _model()).run()
    spec = Simulation(wl, _config(_spec(k=3, a=0.8)), _model()).run()
    assert spec.num_steps < plain.num_steps
    tpot = [
        summarize(r.records, r.itl, duration_s=r.duration_s)["mean_tpot_ms"] for r in (plain, spec)
    ]
    assert tpot[1] < 0.7 * tpot[0]
    assert plain.speculative is None


def test_same_seed_same_bytes_other_seed_other_draws() -> None:
    def run(seed: int) -> str:
        result = Simulation(_workload(), _config(_spec(seed=seed)), _model()).run()
        summary = summarize(result.records, result.itl, duration_s=result.duration_s)
        return json.dumps([summary, result.speculative], sort_keys=True)

    assert run(5) == run(5)
    assert run(5) != run(6)


@st.composite
def spec_cases(draw: st.DrawFn) -> tuple[harness.Case, SimSpeculation]:
    """The fast == exact harness's cases that vLLM v1 runs with speculation."""
    base = draw(harness.cases(data_parallel_sizes=(1, 1, 2)))
    case = replace(
        base,
        preemption_mode="recompute",
        scheduler="continuous",
        prefix_entry_blocks=draw(st.sampled_from([0, 0, 1])),
        kv_groups=None if draw(st.booleans()) else base.kv_groups,
    )
    spec = _spec(
        k=draw(st.integers(1, 5)),
        a=draw(st.sampled_from([0.0, 0.5, 0.8, 1.0])),
        method=draw(st.sampled_from(["eagle", "eagle3", "mtp"])),
        seed=draw(st.integers(0, 99)),
    )
    return case, spec


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=spec_cases())
def test_fast_mode_equals_exact_mode_with_speculation(
    setup: tuple[harness.Case, SimSpeculation],
) -> None:
    case, spec = setup
    plan, model = harness._plan_and_model()
    wl = harness._workload(case)
    fast_cfg = replace(harness._config(case, wl, plan, exact=False), speculative=spec)
    exact_cfg = replace(fast_cfg, exact=True)
    fast, exact = harness._run(wl, fast_cfg, model), harness._run(wl, exact_cfg, model)
    harness._assert_same(fast, exact)
    assert fast.speculative == exact.speculative


SIM = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h100", "--num-prompts", "8", "--json"]
EAGLE3 = ["--speculative-method", "eagle3", "--num-speculative-tokens", "3"]


def test_simulate_reports_speculation_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *SIM)
    assert code == 0 and "speculative" not in json.loads(out)
    code, out, _ = run(capsys, *SIM, *EAGLE3, "--spec-accept-length", "2.5")
    spec = json.loads(out)["speculative"]
    assert code == 0
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 3
    assert spec["expected_acceptance_length"] == pytest.approx(2.5)
    assert spec["num_drafts"] > 0


@pytest.mark.parametrize(
    "extra,flag",
    [
        (["--engine", "sglang"], "--speculative-method"),
        (["--scheduler", "static"], "--speculative-method"),
        (["--disaggregate"], "--speculative-method"),
        (["--kv-tiers", "dram:64"], "--kv-tiers"),
        (["--spec-acceptance-rate", "1.5"], "--spec-acceptance-rate"),
        (["--spec-acceptance-rate", "0.5", "--spec-accept-length", "2"], "--spec-acceptance-rate"),
        (["--spec-accept-length", "9"], "--spec-accept-length"),
    ],
)
def test_simulate_rejects_what_is_not_emulated(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    rate = [] if any(x.startswith("--spec-") for x in extra) else ["--spec-acceptance-rate", "0.7"]
    code, _, err = run(capsys, *SIM, *EAGLE3, *rate, *extra)
    assert code != 0
    assert flag in assert_one_line_error(err)


def test_speculative_stretches_run_many_steps_at_once() -> None:
    """Fast mode's speculative stretches are real (``engine/specstretch.py``), and their
    steps match the exact run's bit for bit (the same step seconds added in the same order)."""
    wl = _workload(num=30)
    calls = 0

    def count(_replica: object) -> None:
        nonlocal calls
        calls += 1

    fast = Simulation(wl, _config(_spec(k=3, a=0.7)), _model()).run(check=count)
    exact = Simulation(wl, _config(_spec(k=3, a=0.7), exact=True), _model()).run()
    assert calls * 5 < fast.num_steps
    assert fast.num_steps == exact.num_steps
    for name in ("first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_array_equal(getattr(fast.records, name), getattr(exact.records, name))
    assert fast.speculative == exact.speculative
