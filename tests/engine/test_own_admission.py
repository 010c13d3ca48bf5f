"""The fused admission paths below capacity (branch ``below8``, issue 10) against the general
ones: vLLM v1's waiting pass and admission test with own blocks in one frame each
(``engine/own_admission.py``, ``Scheduler.admission_path``), and the step that admits a joining
queue head taken at once after ``can_stretch`` (``implicit_step.joined_admission_step``). Both
must leave the same state: one pass by hand (chunks, rows, pool, cache, records), and whole
runs below and above capacity (every record, the ITL histogram, the KV trace, bit for bit)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.engine import implicit_step, own_admission
from inferplan.engine import schedulers as schedulers_module
from inferplan.engine import simulator as simulator_module
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.schedulers import GENERAL, OWN, PLAIN, Scheduler
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords
from inferplan.metrics.steptrace import StepTrace
from inferplan.workload import Workload
from inferplan.workload.prefixes import with_own_blocks
from native_mode import pure_only

from .replica_helpers import replica_at_zero
from .test_head_fit import _FlatModel
from .test_own_blocks_equal import _config, _fingerprint, _plan_and_model, _workload

# ---- one waiting pass by hand ------------------------------------------------------------------


def _queued(
    prompts: list[int], runs: list[int], resumed: list[int], cfg: SchedulerConfig
) -> Replica:
    """A replica with own blocks (entries of one KV block) whose requests are queued in order;
    request ``i`` has a freed run of ``runs[i]`` entries (0: none) and is queued with
    ``resumed[i]`` generated tokens beyond its prompt (a preempted request recomputing)."""
    outputs = [40] * len(prompts)
    records = RequestRecords.empty(len(prompts))
    records.input_tokens[:] = prompts
    assert records.requested_output_tokens is not None
    records.requested_output_tokens[:] = outputs
    zeros = np.zeros(len(prompts), dtype=np.int64)
    records = replace(records, cached_tokens=zeros, prefix_queried_tokens=zeros.copy())
    totals = np.array(prompts, dtype=np.int64) + np.array(outputs, dtype=np.int64)
    cache = OwnBlocks(totals // cfg.block_size, 1)
    replica = Replica(
        0, cfg, _FlatModel(), records, np.array(prompts, dtype=np.int64),
        WaitingQueue("fcfs", None), ItlHistogram(), StepTrace(cfg.num_blocks), cache,
    )  # fmt: skip
    for rid, entries in enumerate(runs):
        if entries:
            cache.register(rid, entries)
            cache.release(rid)
    replica.pool.free = cfg.num_blocks  # the runs' blocks are cached-free
    for rid, extra in enumerate(resumed):
        replica.waiting.push(rid, num_tokens=prompts[rid] + extra)
    return replica


def _pass(replica: Replica, budget: int, path: str) -> list[Any]:
    """``head_can_join``'s answer and one waiting pass on ``path``: what they leave."""
    sched = replica.scheduler
    sched.admission_path = path
    chunks: list[int] = []
    sched.admit_waiting(budget, chunks, 1.0)
    cache = replica.pool.cache
    assert isinstance(cache, OwnBlocks)
    run, rec = replica.running, replica.records
    return [
        chunks,
        [run.stored_row(row) for row in range(len(run))],
        replica.pool.free_blocks,
        dict(cache.runs),
        dict(cache.held),
        (cache.lru_blocks, cache.cached_tokens, cache.queried_tokens),
        [repr(x) for x in rec.first_scheduled_s.tolist()],
        np.asarray(rec.cached_tokens).tolist(),
        np.asarray(rec.prefix_queried_tokens).tolist(),
    ]


@pure_only
@settings(max_examples=60, deadline=None)
@given(
    case=st.lists(
        st.tuples(st.integers(1, 120), st.integers(0, 12), st.integers(0, 30)),
        min_size=1,
        max_size=6,
    ),
    budget=st.integers(1, 400),
    block_size=st.sampled_from([1, 4, 16]),
    num_blocks=st.integers(4, 120),
    max_num_seqs=st.integers(1, 6),
)
def test_own_pass_equals_the_general_one(
    case: list[tuple[int, int, int]],
    budget: int,
    block_size: int,
    num_blocks: int,
    max_num_seqs: int,
) -> None:
    prompts = [p for p, _, _ in case]
    # A run holds at most the entries of its request's tokens short of the last (the entries
    # computed before its preemption; ``ownblocks`` module doc): the cap of a lookup.
    runs = [min(e, (p + x - 1) // block_size) for p, e, x in case]
    resumed = [x for _, _, x in case]
    cfg = SchedulerConfig(
        max_num_batched_tokens=400, max_num_seqs=max_num_seqs, block_size=block_size,
        num_blocks=max(num_blocks, sum(runs) + 1), enable_prefix_caching=True,
    )  # fmt: skip
    own, general = (_queued(prompts, runs, resumed, cfg) for _ in range(2))
    assert own.scheduler._admission_path() == OWN
    assert _pass(own, budget, OWN) == _pass(general, budget, GENERAL)


@pure_only
def test_own_pass_takes_a_run_back_and_counts_its_hit() -> None:
    """Hand-computed: request 0 queued with 20 tokens (16 of prompt, 4 generated before its
    preemption) and a run of 4 entries of 4 tokens: the cap is ``(20 - 1) // 4`` = 4 entries,
    so its hit is 16 tokens and its chunk the 4 left, in 5 blocks (4 mapped back, 1 new)."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_blocks=12,
        enable_prefix_caching=True,
    )  # fmt: skip
    replica = _queued([16, 8], [4, 0], [4, 0], cfg)
    left = _pass(replica, 64, OWN)
    chunks, rows, free, runs, held = left[:5]
    assert chunks == [4, 8]
    assert [row[:3] for row in rows] == [[0, 16, 20], [1, 0, 8]]  # id, computed, tokens
    # Registered at admission: the prompt's entries the chunk completes (4 and 2).
    assert free == 12 - 5 - 2 and runs == {} and held == {0: 4, 1: 2}
    assert left[7] == [16, 0] and left[8] == [20, 8]  # cached, queried tokens


@pure_only
def test_own_pass_asks_again_where_the_cached_free_count_moved() -> None:
    """``head_can_join``'s answer (``step_fit``) holds only with the cached-free count it saw:
    an answer from before the head's run was cached (here: no hit, the whole prompt as its
    chunk) is asked again, and the head maps its run."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_blocks=12,
        enable_prefix_caching=True,
    )  # fmt: skip
    replica = _queued([16], [4], [4], cfg)
    sched = replica.scheduler
    sched.step_fit = (0, 20, 64, 12, 0, 20, 0)  # rid, tokens, budget, available, lru, chunk, hit
    left = _pass(replica, 64, OWN)
    assert left[0] == [4] and left[7] == [16]  # the chunk after its 16 cached tokens


# ---- whole runs ----------------------------------------------------------------------------------


def _run(wl: Workload, cfg: SimulationConfig, *, fused: bool) -> tuple[SimulationResult, int, int]:
    """The run with the fused paths (and how often each was taken: ``admit_own`` passes, or
    ``implicit_step._admit_head``'s own-block admissions, ``admit_first``; joined steps), or
    with the general ones."""
    taken = [0, 0]
    admit, joined = own_admission.admit_own, simulator_module.joined_admission_step
    first = own_admission.admit_first

    def counting_admit(*args: Any) -> None:
        taken[0] += 1
        admit(*args)

    def counting_first(*args: Any) -> bool:
        done = first(*args)
        taken[0] += done
        return done

    def counting_joined(r: Replica) -> bool:
        done = joined(r)
        taken[1] += done
        return done

    with pytest.MonkeyPatch.context() as patch:
        if fused:
            patch.setattr(schedulers_module, "admit_own", counting_admit)
            patch.setattr(implicit_step, "admit_first", counting_first)
            patch.setattr(simulator_module, "joined_admission_step", counting_joined)
        else:
            patch.setattr(Scheduler, "_admits_own", lambda self: False)
            patch.setattr(simulator_module, "joined_admission_step", lambda r: False)

        def check(r: Replica) -> None:
            r.check_invariants()

        res = Simulation(wl, cfg, _plan_and_model()[1]).run(check=check)
    return res, taken[0], taken[1]


def _assert_equal_runs(wl: Workload, cfg: SimulationConfig) -> tuple[SimulationResult, int, int]:
    fused, admits, joins = _run(wl, cfg, fused=True)
    general, _, _ = _run(wl, cfg, fused=False)
    assert _fingerprint(fused) == _fingerprint(general)
    for own, other in zip(fused.prefix_caches, general.prefix_caches, strict=True):
        if own is not None and other is not None:
            assert (own.cached_tokens, own.queried_tokens, own.lru_blocks) == (
                other.cached_tokens, other.queried_tokens, other.lru_blocks,
            )  # fmt: skip
    return fused, admits, joins


@pure_only
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(10, 40),
    max_input=st.integers(8, 200),
    max_output=st.integers(1, 200),
    rate=st.sampled_from([math.inf, 40.0, 8.0, 2.0]),
    seed=st.integers(0, 10_000),
    block_size=st.sampled_from([1, 4, 16]),
    spare=st.integers(0, 60),
    own_blocks=st.booleans(),
    policy=st.sampled_from(["fcfs", "fcfs", "spf"]),
)
def test_fused_runs_equal_the_general_ones(
    n: int,
    max_input: int,
    max_output: int,
    rate: float,
    seed: int,
    block_size: int,
    spare: int,
    own_blocks: bool,
    policy: str,
) -> None:
    wl = _workload(n, max_input, max_output, rate, seed)
    cfg = _config(wl, block_size, spare, 1, policy, False)
    if own_blocks:
        wl = with_own_blocks(wl)
    else:  # the plain path (no prefix cache): the joined step alone
        cfg = replace(cfg, scheduler=replace(cfg.scheduler, enable_prefix_caching=False))
    _assert_equal_runs(wl, cfg)


@pure_only
@pytest.mark.parametrize("own_blocks", [True, False])
def test_below_capacity_takes_the_fused_paths(own_blocks: bool) -> None:
    """Arrivals apart on a roomy pool: nearly every request is one joined admission step."""
    wl = _workload(40, 120, 120, 4.0, 3)
    cfg = _config(wl, 16, 200, 1, "fcfs", False)
    if own_blocks:
        wl = with_own_blocks(wl)
    else:
        cfg = replace(cfg, scheduler=replace(cfg.scheduler, enable_prefix_caching=False))
    _, admits, joins = _assert_equal_runs(wl, cfg)
    assert joins > 20
    assert admits > 20 if own_blocks else admits == 0
    path = Simulation(wl, cfg, _plan_and_model()[1]).replicas[0].scheduler.admission_path
    assert path == (OWN if own_blocks else PLAIN)


@pure_only
def test_above_capacity_preempts_and_re_hits_equal() -> None:
    wl = with_own_blocks(_workload(40, 200, 200, math.inf, 7))
    res, admits, _ = _assert_equal_runs(wl, _config(wl, 16, 12, 1, "fcfs", False))
    assert int(res.records.num_preemptions.sum()) > 20 and admits > 20
    assert res.records.cached_tokens is not None and int(res.records.cached_tokens.sum()) > 0


def test_the_path_is_decided_where_the_cache_is_set() -> None:
    """A scheduler built by hand asks at every pass; a simulation's decides once."""
    cfg = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_blocks=12)
    replica = replica_at_zero([8], [4], cfg, _FlatModel())
    assert replica.scheduler.admission_path is None
    assert replica.scheduler._admission_path() == PLAIN
    replica.pool.cache = OwnBlocks(np.array([3]), 1)
    assert replica.scheduler._admission_path() == OWN
    replica.scheduler.settle_admission_path()
    assert replica.scheduler.admission_path == OWN
