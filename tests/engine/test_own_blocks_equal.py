"""Own blocks counted (``memory/ownblocks.py``) give what one hash per block gives
(``memory/prefixcache.py``): the same schedule and each request's ``cached_tokens`` on
overloaded workloads that preempt often (fast and exact mode, DP, every queue policy, block
sizes that make an entry several KV blocks); in exact mode every record, the ITL histogram and
the KV trace bit for bit, in fast mode (where own blocks take closed forms the hashed cache does
not: ``engine/ownstretch.py``, ``engine/ownsteps.py``) every time to relative 1e-9, as fast mode
agrees with exact mode. An eviction order other than vLLM's (least recently freed first, a
run's tail first) changes the results and fails here."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cli_flags import build_memory_plan
from inferplan.engine import replica as replica_module
from inferplan.engine import simulator as simulator_module
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload import Workload, arrival_times_s
from inferplan.workload.prefixes import with_own_blocks
from native_mode import attributes, pure_only

from .test_fast_equals_exact import _assert_same as assert_same_schedule


@cache
def _plan_and_model() -> tuple[MemoryPlan, StepTimeModel]:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
    )
    return plan, build_step_model(plan)


def _workload(n: int, max_input: int, max_output: int, rate: float, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        arrival_s=arrival_times_s(n, rate, 1.0, seed),
        input_tokens=rng.integers(1, max_input + 1, size=n).astype(np.int64),
        output_tokens=rng.integers(1, max_output + 1, size=n).astype(np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
        priorities=rng.integers(0, 4, size=n).astype(np.int64),
    )


def _config(wl: Workload, block_size: int, spare: int, dp: int, policy: str, exact: bool) -> Any:
    longest = int((wl.input_tokens + wl.output_tokens).max())
    one_request = BlockPool(1, block_size, FULL_ATTENTION).blocks_for_one(longest)
    sched = SchedulerConfig(
        max_num_batched_tokens=96,
        max_num_seqs=24,
        block_size=block_size,
        num_blocks=one_request + 2 + spare,
        enable_prefix_caching=True,
    )
    return SimulationConfig(
        scheduler=sched,
        max_model_len=longest,
        data_parallel_size=dp,
        scheduling_policy=policy,
        exact=exact,
    )


def _run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    def check(r: Replica) -> None:
        r.check_invariants()

    return Simulation(wl, cfg, _plan_and_model()[1]).run(check=check)


def _fingerprint(res: SimulationResult) -> list[Any]:
    """Everything a result holds, comparable bit for bit (floats by ``repr``: nan equals nan)."""

    def plain(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return [plain(v) for v in value.tolist()]
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    rec = [plain(getattr(res.records, f.name)) for f in fields(res.records)]
    # A compiled (mypyc) histogram has no ``__dict__``: its attributes, in the same order.
    names = getattr(type(res.itl), "__mypyc_attrs__", None) or list(vars(res.itl))
    itl = [plain(getattr(res.itl, k)) for k in names if k != "grid"]
    traces = [[plain(v) for v in attributes(t).values()] for t in res.traces]
    totals = [res.num_steps, repr(res.duration_s)]
    return [rec, itl, traces, totals]


def _both(wl: Workload, cfg: SimulationConfig) -> tuple[SimulationResult, SimulationResult]:
    """The run with own blocks counted, and with one hash per block."""
    counted = with_own_blocks(wl)
    hashed = with_own_blocks(wl, hashed=True)
    assert counted.own_blocks and counted.prefix_hashes is None
    assert hashed.prefix_hashes is not None and not hashed.own_blocks
    return _run(counted, cfg), _run(hashed, cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(10, 45),
    max_input=st.integers(8, 260),
    max_output=st.integers(1, 260),
    rate=st.sampled_from([math.inf, 40.0, 8.0]),
    seed=st.integers(0, 10_000),
    block_size=st.sampled_from([1, 4, 8, 16, 32]),
    spare=st.integers(0, 30),
    dp=st.sampled_from([1, 1, 2]),
    policy=st.sampled_from(["fcfs", "fcfs", "priority", "spf"]),
    exact=st.booleans(),
)
def test_counted_own_blocks_equal_hashed_ones(
    n: int,
    max_input: int,
    max_output: int,
    rate: float,
    seed: int,
    block_size: int,
    spare: int,
    dp: int,
    policy: str,
    exact: bool,
) -> None:
    wl = _workload(n, max_input, max_output, rate, seed)
    cfg = _config(wl, block_size, spare, dp, policy, exact)
    counted, hashed = _both(wl, cfg)
    if exact:
        assert _fingerprint(counted) == _fingerprint(hashed)
    else:
        assert_same_schedule(counted, hashed)
    assert counted.records.cached_tokens is not None and hashed.records.cached_tokens is not None
    assert np.array_equal(counted.records.cached_tokens, hashed.records.cached_tokens)
    caches = zip(counted.prefix_caches, hashed.prefix_caches, strict=True)
    for own, general in caches:
        assert isinstance(own, OwnBlocks) and general is not None
        assert (own.cached_tokens, own.queried_tokens, own.lru_blocks) == (
            general.cached_tokens,
            general.queried_tokens,
            general.lru_blocks,
        )


def _overloaded() -> tuple[Workload, SimulationConfig]:
    """All at once on a pool of a few requests: many preemptions and re-hits."""
    wl = _workload(40, 200, 200, math.inf, 7)
    return wl, _config(wl, 16, 12, 1, "fcfs", False)


def test_the_overloaded_scenario_preempts_and_re_hits() -> None:
    wl, cfg = _overloaded()
    counted, hashed = _both(wl, cfg)
    assert int(counted.records.num_preemptions.sum()) > 20
    assert counted.records.cached_tokens is not None
    assert int(counted.records.cached_tokens.sum()) > 0  # resumes hit their own blocks
    assert_same_schedule(counted, hashed)
    exact_cfg = replace(cfg, exact=True)
    assert _fingerprint(_run(with_own_blocks(wl), exact_cfg)) == _fingerprint(
        _run(with_own_blocks(wl, hashed=True), exact_cfg)
    )


@pure_only
@pytest.mark.parametrize("name", ["NewestFirst", "HeadFirst"])
def test_a_wrong_eviction_order_changes_the_results(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported here: a test's subclass of a compiled class cannot be defined (pure_only).
    from .wrong_evictions import WRONG_EVICTIONS

    wrong = WRONG_EVICTIONS[name]
    wl, cfg = _overloaded()
    _, hashed = _both(wl, cfg)
    monkeypatch.setattr(replica_module, "OwnBlocks", wrong)
    broken = _run(with_own_blocks(wl), cfg)
    assert isinstance(broken.prefix_caches[0], wrong)
    with pytest.raises(AssertionError):
        assert_same_schedule(broken, hashed)


def test_windowed_pools_keep_one_hash_per_block() -> None:
    """A sliding-window pool's cache moves parts within the LRU list on a hit: it is not
    counted (``replica.prefix_cache_for`` hashes the own blocks)."""
    wl = with_own_blocks(_workload(5, 50, 50, math.inf, 1))
    sched = replace(
        _config(wl, 16, 4, 1, "fcfs", False).scheduler,
        kv_groups=(FULL_ATTENTION[0], replace(FULL_ATTENTION[0], max_blocks=4)),
    )
    cache_ = replica_module.prefix_cache_for(sched, wl)
    assert cache_ is not None and not isinstance(cache_, OwnBlocks)
    plain = replica_module.prefix_cache_for(replace(sched, kv_groups=FULL_ATTENTION), wl)
    assert isinstance(plain, OwnBlocks)
    assert replica_module.prefix_cache_for(replace(sched, enable_prefix_caching=False), wl) is None


@pure_only
def test_the_vector_preemption_step_runs_on_own_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The overloaded scenario's preempting decode steps, taken one at a time, take
    ``engine/ownsteps.py``'s vector form (with the general running pass's evictions), and the
    results above still match."""
    from inferplan.engine import ownsteps

    ran: list[bool] = []
    original = ownsteps.own_block_preemption_step

    def counted(r: Replica) -> bool:
        ran.append(original(r))
        return ran[-1]

    monkeypatch.setattr(ownsteps, "own_block_preemption_step", counted)
    # Stepwise (chains, ``engine/chain.py``, take these steps in their own pass).
    monkeypatch.setattr(simulator_module, "preemption_chain", lambda r, t, **_: False)
    wl, cfg = _overloaded()
    counted_run = _run(with_own_blocks(wl), cfg)
    assert sum(ran) >= 10
    assert_same_schedule(counted_run, _run(with_own_blocks(wl, hashed=True), cfg))
