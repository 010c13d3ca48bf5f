"""Class pools: routing by class, a hand-timed move with its drain, cooldown, conservation,
fast == exact, and one pool equal to no pools."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.cluster.classpool_sim import ClassPoolResult, simulate_class_pools
from inferplan.cluster.classpools import (
    ClassPools,
    PoolSpec,
    Repartition,
    class_pools,
    queue_peak,
    replica_seconds,
)
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig
from inferplan.errors import InferplanError
from inferplan.metrics.records import RequestStatus
from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.workload import Workload

PLAN = build_memory_plan(
    "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
)
MODEL = build_step_model(PLAN)
CLASSES = ("chat", "reasoning")


def _config(
    dp: int,
    *,
    seqs: int = 256,
    blocks: int = 10_000,
    exact: bool = False,
    router: str = "round_robin",
) -> SimulationConfig:
    sched = SchedulerConfig(
        max_num_batched_tokens=2048, max_num_seqs=seqs, block_size=16, num_blocks=blocks
    )
    return SimulationConfig(
        sched, max_model_len=4096, data_parallel_size=dp, router=router, exact=exact
    )


def _workload(
    arrivals: list[float],
    prompts: list[int],
    outputs: list[int],
    classes: list[int],
    names: tuple[str, ...] = CLASSES,
) -> Workload:
    return Workload(
        arrival_s=np.array(arrivals, dtype=np.float64),
        input_tokens=np.array(prompts, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
        class_ids=np.array(classes, dtype=np.int64),
        class_names=names,
    )


def _pools(
    *pools: tuple[str, int], default: str | None = None, rule: Repartition | None = None
) -> ClassPools:
    specs = tuple(PoolSpec(name, n) for name, n in pools)
    return ClassPools(specs, default or specs[-1].name, rule)


def _step_s(batch: StepBatch) -> float:
    return MODEL.step_time(batch).total_s


def _alone_s(prompt: int, output: int) -> float:
    """A request alone on a replica: one prefill step, then one decode step per token."""
    prefill = _step_s(
        StepBatch(
            prefill_tokens=prompt,
            prefill_attention_pairs=prompt * (prompt + 1) / 2,
            num_prefill_seqs=1,
        )
    )
    decodes = sum(
        _step_s(StepBatch(num_decode_seqs=1, decode_context_tokens=prompt + k))
        for k in range(1, output)
    )
    return prefill + decodes


# ---- routing ---------------------------------------------------------------------------------


def _random_workload(seed: int, n: int, span_s: float, max_output: int) -> Workload:
    """``n`` requests over ``span_s`` seconds, 50-800 prompt tokens, 2 to ``max_output``
    output tokens, chat or reasoning at random."""
    rng = np.random.default_rng(seed)
    return _workload(
        sorted(rng.uniform(0, span_s, n)),
        rng.integers(50, 800, n).tolist(),
        rng.integers(2, max_output, n).tolist(),
        rng.integers(0, 2, n).tolist(),
    )


def test_requests_go_to_their_class_pool() -> None:
    """reasoning=1 holds replica 0, chat=2 replicas 1 and 2: a reversed map fails here."""
    n = 30
    rng = np.random.default_rng(3)
    classes = rng.integers(0, 2, n).tolist()
    wl = _workload(sorted(rng.uniform(0, 2, n)), [200] * n, [50] * n, classes)
    run = simulate_class_pools(wl, _config(3), MODEL, _pools(("reasoning", 1), ("chat", 2)))
    is_reasoning = np.array(classes) == 1
    assert np.all(run.routed_replica[is_reasoning] == 0)
    assert set(run.routed_replica[~is_reasoning].tolist()) == {1, 2}
    np.testing.assert_array_equal(run.pool_of_request, np.where(is_reasoning, 0, 1))


def test_unknown_classes_go_to_the_default_pool() -> None:
    names = ("chat", "reasoning", "code")
    wl = _workload([0.0, 0.1, 0.2, 0.3], [100] * 4, [10] * 4, [0, 1, 2, 2], names)
    spec = _pools(("reasoning", 1), ("chat", 1), ("other", 1), default="other")
    run = simulate_class_pools(wl, _config(3), MODEL, spec)
    assert run.routed_replica.tolist() == [1, 0, 2, 2]
    last = _pools(("reasoning", 1), ("chat", 2))  # default: the pool listed last
    assert simulate_class_pools(wl, _config(3), MODEL, last).routed_replica.tolist() == [
        1,
        0,
        2,
        1,
    ]


def test_a_pool_naming_no_class_is_refused() -> None:
    wl = _workload([0.0], [100], [10], [0])
    with pytest.raises(InferplanError, match="--pools: pool 'reasonin' names no class"):
        simulate_class_pools(wl, _config(2), MODEL, _pools(("reasonin", 1), ("chat", 1)))


def test_one_pool_is_the_shared_pool() -> None:
    """Every replica in one pool routes and times exactly as no pools."""
    wl = _random_workload(seed=5, n=60, span_s=3, max_output=400)
    for router in ("round_robin", "least_outstanding"):
        cfg = _config(4, seqs=8, blocks=300, router=router)
        plain = Simulation(wl, cfg, MODEL).run().records
        pooled = simulate_class_pools(wl, cfg, MODEL, _pools(("all", 4))).result.records
        for name in ("status", "first_token_s", "finish_s", "num_preemptions"):
            np.testing.assert_array_equal(getattr(plain, name), getattr(pooled, name))


def test_checks_that_never_move_change_no_request() -> None:
    """A rule that never fires only splits fast-mode stretches at the checks: every request's
    times equal the run without pools to float tolerance."""
    wl = _random_workload(seed=11, n=50, span_s=2, max_output=300)
    cfg = _config(3, seqs=4, blocks=200)
    plain = Simulation(wl, cfg, MODEL).run().records
    never = Repartition("queue", 10**6, interval_s=0.05, cooldown_s=0.0)
    run = simulate_class_pools(wl, cfg, MODEL, _pools(("reasoning", 1), ("chat", 2), rule=never))
    assert not run.moves
    shared = simulate_class_pools(wl, cfg, MODEL, _pools(("all", 3), rule=never)).result.records
    np.testing.assert_array_equal(plain.status, shared.status)
    for name in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(plain, name), getattr(shared, name), rtol=1e-9)


# ---- one move, by hand -----------------------------------------------------------------------


def _one_move_run(exact: bool = False) -> tuple[Workload, ClassPoolResult]:
    """Five reasoning requests queue on the one reasoning replica (one sequence at a time);
    two chat requests keep both chat replicas busy. At the check at 1 s the reasoning queue
    (4) exceeds 2 and chat's (0) is at most half of it: chat's replica 1 (fewest requests, lowest
    index) drains its request and joins reasoning when it finishes. A reasoning request at 30 s
    is routed round-robin over replicas 0 and 1 (the sixth: replica 1)."""
    arrivals = [0.0] * 7 + [30.0]
    prompts = [100] * 8
    outputs = [600] * 5 + [400, 500] + [10]
    classes = [1] * 5 + [0, 0] + [1]
    wl = _workload(arrivals, prompts, outputs, classes)
    rule = Repartition("queue", 2, interval_s=1.0, cooldown_s=1000.0)
    spec = _pools(("reasoning", 1), ("chat", 2), rule=rule)
    return wl, simulate_class_pools(wl, _config(3, seqs=1, exact=exact), MODEL, spec)


def test_a_queue_threshold_moves_one_replica_after_its_drain() -> None:
    _, run = _one_move_run()
    assert len(run.moves) == 1
    move = run.moves[0]
    chat_end_s = _alone_s(100, 400)  # request 5, alone on replica 1 from t = 0
    assert (move.replica, move.from_pool, move.to_pool) == (1, "chat", "reasoning")
    assert move.start_s == 1.0
    assert move.signal == 4.0
    assert move.joined_s == pytest.approx(chat_end_s, rel=1e-9)
    assert move.drain_s == pytest.approx(chat_end_s - 1.0, rel=1e-9)
    assert run.result.records.finish_s[5] == pytest.approx(chat_end_s, rel=1e-9)
    assert run.timelines[0] == [(0.0, 1), (move.joined_s, 2)]
    assert run.timelines[1] == [(0.0, 2), (1.0, 1)]
    assert run.routed_replica.tolist() == [0, 0, 0, 0, 0, 1, 2, 1]
    summary = run.summary_json(_pools(("reasoning", 1), ("chat", 2), rule=Repartition("queue", 2)))
    assert summary["num_moves"] == 1
    assert summary["drain_replica_s"] == pytest.approx(move.drain_s)
    duration = run.result.duration_s
    pools = summary["pools"]
    assert pools["reasoning"]["replica_s"] == pytest.approx(
        move.joined_s + 2 * (duration - move.joined_s)
    )
    assert pools["chat"]["replica_s"] == pytest.approx(2 * 1.0 + (duration - 1.0))
    assert pools["reasoning"]["queue_peak"] == 4
    assert pools["reasoning"]["num_requests"] == 6 and pools["chat"]["num_requests"] == 2


def test_the_move_is_the_same_in_exact_mode() -> None:
    _, fast = _one_move_run(exact=False)
    _, exact = _one_move_run(exact=True)
    assert len(exact.moves) == 1
    assert exact.moves[0].joined_s == pytest.approx(fast.moves[0].joined_s, rel=1e-9)
    np.testing.assert_allclose(
        exact.result.records.finish_s, fast.result.records.finish_s, rtol=1e-9
    )


def test_ttft_threshold_reads_the_oldest_wait() -> None:
    """The queued reasoning requests have waited 1 s at the first check: ttft:0.5 moves."""
    arrivals = [0.0] * 4
    wl = _workload(arrivals, [100] * 4, [600, 600, 600, 400], [1, 1, 1, 0])
    rule = Repartition("ttft", 0.5, interval_s=1.0, cooldown_s=1000.0)
    run = simulate_class_pools(
        wl, _config(3, seqs=1), MODEL, _pools(("reasoning", 1), ("chat", 2), rule=rule)
    )
    assert len(run.moves) == 1
    move = run.moves[0]
    assert move.start_s == 1.0 and move.signal == pytest.approx(1.0)
    # chat's idle replica 2 (no requests: the quickest drain) joins at once
    assert (move.replica, move.drain_s) == (2, 0.0)


# ---- cooldown, hysteresis, conservation, fast == exact ----------------------------------------


def _alternating_bursts(num_bursts: int, gap_s: float) -> Workload:
    """Bursts of 12 requests, reasoning and chat in turn: each burst makes its pool hot."""
    arrivals, classes = [], []
    for b in range(num_bursts):
        arrivals += [b * gap_s + 0.001 * i for i in range(12)]
        classes += [b % 2] * 12
    n = len(arrivals)
    return _workload(arrivals, [200] * n, [100] * n, classes)


def test_cooldown_keeps_moves_apart() -> None:
    wl = _alternating_bursts(8, 3.0)
    free = Repartition("queue", 3, interval_s=0.25, cooldown_s=0.0)
    held = Repartition("queue", 3, interval_s=0.25, cooldown_s=5.0)
    cfg = _config(4, seqs=2)
    flapping = simulate_class_pools(
        wl, cfg, MODEL, _pools(("reasoning", 2), ("chat", 2), rule=free)
    )
    calm = simulate_class_pools(wl, cfg, MODEL, _pools(("reasoning", 2), ("chat", 2), rule=held))
    assert len(flapping.moves) > len(calm.moves) >= 1
    for before, after in zip(calm.moves, calm.moves[1:], strict=False):
        assert after.start_s >= before.joined_s + 5.0 - 1e-9


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Workload, SimulationConfig, ClassPools, bool]:
    n = draw(st.integers(5, 30))
    seed = draw(st.integers(0, 2**16))
    span_s = draw(st.floats(0.05, 1.5))
    max_output = draw(st.sampled_from((20, 150)))
    rng = np.random.default_rng(seed)
    wl = _workload(
        sorted(rng.uniform(0, span_s, n).tolist()),
        rng.integers(20, 700, n).tolist(),
        rng.integers(1, max_output, n).tolist(),
        rng.integers(0, 3, n).tolist(),
        ("chat", "reasoning", "code"),
    )
    dp = draw(st.integers(3, 5))
    first = draw(st.integers(1, dp - 1))
    signal = draw(st.sampled_from(("queue", "ttft")))
    threshold = draw(st.integers(1, 3)) if signal == "queue" else draw(st.floats(0.01, 0.2))
    rule = Repartition(
        signal, threshold, draw(st.floats(0.02, 0.3)), draw(st.sampled_from((0.0, 0.3, 2.0)))
    )
    spec = _pools(("reasoning", first), ("chat", dp - first), rule=rule)
    router = draw(st.sampled_from(("round_robin", "least_outstanding")))
    cfg = _config(
        dp, seqs=draw(st.integers(1, 3)), blocks=draw(st.integers(60, 400)), router=router
    )
    return wl, cfg, spec, draw(st.booleans())


def _replicas_of(pool: int, spec: ClassPools, run: ClassPoolResult) -> set[int]:
    name = spec.pools[pool].name
    ever = set(spec.first_replicas()[pool])
    return ever | {m.replica for m in run.moves if m.to_pool == name}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_every_request_completes_in_exactly_one_pool(
    case: tuple[Workload, SimulationConfig, ClassPools, bool],
) -> None:
    wl, cfg, spec, _ = case
    run = simulate_class_pools(wl, cfg, MODEL, spec)
    rec = run.result.records
    # Rejected at arrival (KV larger than a replica's pool) and never routed, or completed.
    rejected = rec.status == int(RequestStatus.REJECTED)
    assert np.all(rejected | (rec.status == int(RequestStatus.COMPLETED)))
    np.testing.assert_array_equal(run.is_routed, ~rejected)
    pool_of_class = spec.pool_of_class(wl.class_names)
    np.testing.assert_array_equal(run.pool_of_request, pool_of_class[wl.class_ids])
    for k in range(len(spec.pools)):
        mine = run.pool_of_request == k
        assert set(run.routed_replica[mine & run.is_routed].tolist()) <= _replicas_of(k, spec, run)
    summary = run.summary_json(spec)
    assert sum(p["num_requests"] for p in summary["pools"].values()) == wl.num_requests
    assert sum(p["completed"] for p in summary["pools"].values()) == wl.num_requests - sum(rejected)
    # Replicas are conserved: serving in some pool, or draining in one move.
    assert sum(t[-1][1] for t in run.timelines) == cfg.data_parallel_size
    serving_s = sum(p["replica_s"] for p in summary["pools"].values())
    assert serving_s + summary["drain_replica_s"] == pytest.approx(
        cfg.data_parallel_size * run.result.duration_s, rel=1e-9, abs=1e-9
    )
    rule = spec.repartition
    assert rule is not None
    for before, after in zip(run.moves, run.moves[1:], strict=False):
        assert after.start_s >= before.joined_s + rule.cooldown_s - 1e-9
    for m in run.moves:
        assert m.start_s <= m.joined_s and m.start_s / rule.interval_s == pytest.approx(
            round(m.start_s / rule.interval_s)
        )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_fast_mode_equals_exact_mode_with_pools(
    case: tuple[Workload, SimulationConfig, ClassPools, bool],
) -> None:
    wl, cfg, spec, _ = case
    fast = simulate_class_pools(wl, cfg, MODEL, spec)
    exact = simulate_class_pools(wl, replace(cfg, exact=True), MODEL, spec)
    a, b = fast.result.records, exact.result.records
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_array_equal(fast.routed_replica, exact.routed_replica)
    np.testing.assert_array_equal(a.num_preemptions, b.num_preemptions)
    for name in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-12)
    assert [(m.replica, m.from_pool, m.to_pool, m.start_s) for m in fast.moves] == [
        (m.replica, m.from_pool, m.to_pool, m.start_s) for m in exact.moves
    ]
    np.testing.assert_allclose(
        [m.joined_s for m in fast.moves], [m.joined_s for m in exact.moves], rtol=1e-9
    )


def test_runs_are_deterministic() -> None:
    wl = _alternating_bursts(6, 1.5)
    rule = Repartition("ttft", 0.2, interval_s=0.25, cooldown_s=0.5)
    spec = _pools(("reasoning", 2), ("chat", 2), rule=rule)
    one, two = (simulate_class_pools(wl, _config(4, seqs=2), MODEL, spec) for _ in range(2))
    assert one.summary_json(spec) == two.summary_json(spec)
    assert one.moves == two.moves and len(one.moves) > 0


# ---- specs and helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dp", "message"),
    [
        ("reasoning=3,chat=4", 8, "add up to 7, not the 8 replicas"),
        ("reasoning=3;chat=5", 8, "whole number >= 1 \\(e.g. reasoning=3,chat=5\\)"),
        ("reasoning=0,chat=8", 8, "whole number >= 1"),
        ("reasoning=x,chat=5", 8, "whole number >= 1"),
        ("chat=4,chat=4", 8, "listed twice"),
        ("=8", 8, "expected NAME=COUNT"),
    ],
)
def test_bad_pool_specs(text: str, dp: int, message: str) -> None:
    with pytest.raises(InferplanError, match=message):
        class_pools(text, dp)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("queue", "expected queue:N"),
        ("depth:4", "expected queue:N"),
        ("queue:1.5", "whole"),
        ("ttft:0", "seconds > 0"),
        ("ttft:inf", "seconds > 0"),
        ("queue:x", "whole"),
    ],
)
def test_bad_repartition_rules(text: str, message: str) -> None:
    with pytest.raises(InferplanError, match=f"--repartition: .*{message}"):
        class_pools("a=1,b=1", 2, repartition=text)


def test_spec_defaults() -> None:
    spec = class_pools("reasoning=3,chat=5", 8, repartition="queue:64")
    assert spec.default_pool == "chat"
    assert spec.repartition == Repartition("queue", 64.0, 5.0, 60.0)
    assert spec.first_replicas() == [[0, 1, 2], [3, 4, 5, 6, 7]]
    with pytest.raises(InferplanError, match="--default-pool: 'code' is not a pool"):
        class_pools("reasoning=3,chat=5", 8, default_pool="code")


def test_queue_peak_and_replica_seconds_by_hand() -> None:
    wl = _workload([0.0, 0.0, 0.0], [100] * 3, [5] * 3, [0, 0, 0])
    run = simulate_class_pools(wl, _config(1, seqs=1), MODEL, _pools(("chat", 1)))
    rec = run.result.records
    assert queue_peak(rec, np.ones(3, dtype=bool)) == 2  # one admitted at 0, two wait
    assert replica_seconds([(0.0, 2), (1.0, 3)], 4.0) == 2.0 + 9.0
    assert replica_seconds([(0.0, 2), (5.0, 3)], 4.0) == 8.0
    assert math.isclose(replica_seconds([(0.0, 1)], 0.0), 0.0)
