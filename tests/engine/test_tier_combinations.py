"""KV tiers combined with ``--admission`` policies and with ``--disaggregate``: fast == exact,
and invariants after every step (blocks conserved across HBM, reloading requests and tiers;
reservations, reloading requests' included, backed by free blocks outside ``queue``; no
request lost)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.cluster.disagg import DisaggResult, Pool, simulate_disaggregated
from inferplan.cluster.kv_transfer import KvLink
from inferplan.engine.admission import EXHAUSTION_POLICIES, POLICIES, AdmissionConfig
from inferplan.engine.offload import LoadingKv
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.memory.tiers import TierSpec
from inferplan.metrics.records import RequestStatus
from inferplan.workload import Workload
from inferplan.workload.predict import PredictorSpec
from native_mode import pure_only

from .test_offload import (
    BLOCK_BYTES,
    TIER_CHOICES,
    _model,
    _shared_workload,
    _tiers,
    _workload,
)

ENDED = (int(RequestStatus.COMPLETED), int(RequestStatus.REJECTED))


def _tier_config(
    wl: Workload,
    tiers: tuple[TierSpec, ...],
    spare: int,
    *,
    exact: bool,
    caching: bool = False,
    admission: AdmissionConfig | None = None,
) -> SimulationConfig:
    """16-token blocks, ``spare`` blocks beyond the longest request's, ``tiers`` behind HBM."""
    longest = int((wl.input_tokens + wl.output_tokens).max())
    sched = SchedulerConfig(
        max_num_batched_tokens=512,
        max_num_seqs=64,
        block_size=16,
        num_blocks=-(-longest // 16) + 3 + spare,
        kv_block_bytes=BLOCK_BYTES,
        kv_tiers=_tiers(*tiers),
        enable_prefix_caching=caching,
    )
    return SimulationConfig(sched, longest, exact=exact, admission=admission)


def _admission_config(
    wl: Workload, tiers: tuple[TierSpec, ...], adm: AdmissionConfig, spare: int, *, exact: bool
) -> SimulationConfig:
    return _tier_config(wl, tiers, spare, exact=exact, admission=adm)


def _checked_run(wl: Workload, cfg: SimulationConfig) -> SimulationResult:
    sim = Simulation(wl, cfg, _model())
    num_reloads = [0]

    def check(replica: Replica) -> None:
        replica.check_invariants()  # HBM + reloading + tiers conserved (KvOffload.check)
        admission = replica.scheduler.admission
        assert admission is not None and replica.offload is not None
        admission.check(replica.running)
        # Every reservation, reloading requests' included, is backed by free blocks (outside
        # ``queue``, which borrows), counted here independently of ``Admission.outstanding``.
        run = replica.running
        holders = list(zip(run.ids.tolist(), run.held_blocks.tolist(), strict=True))
        holders += [(x.request_id, x.held_blocks) for x in replica.offload.loading]
        reserved = admission.ledger.reserved_blocks
        unbacked = sum(max(int(reserved[rid]) - held, 0) for rid, held in holders)
        assert unbacked <= replica.cfg.num_blocks
        if cfg.admission is not None and cfg.admission.on_exhaustion != "queue":
            assert unbacked <= replica.pool.free, "a reservation is not backed by free blocks"
        num_reloads[0] = max(num_reloads[0], len(replica.offload.loading))
        arrived = sim.next_request
        ended = int(np.count_nonzero(np.isin(sim.records.status[:arrived], ENDED)))
        present = len(replica.running) + len(replica.waiting) + len(replica.offload.loading)
        assert ended + present == arrived, "a request was lost"

    result = sim.run(check=check)
    assert np.all(np.isin(result.records.status, ENDED)), "a request did not end"
    return result


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    tiers=st.sampled_from(TIER_CHOICES),
    policy=st.sampled_from(POLICIES),
    on_exhaustion=st.sampled_from(EXHAUSTION_POLICIES),
    headroom=st.sampled_from([0.0, 0.1]),
    bias=st.sampled_from([1.0, 0.3]),  # 0.3: underestimated outputs outgrow reservations
    spare=st.integers(0, 40),
    rate=st.sampled_from([5.0, 50.0, math.inf]),
)
def test_tiers_with_admission_policies_fast_equals_exact(
    seed: int,
    tiers: tuple[TierSpec, ...],
    policy: str,
    on_exhaustion: str,
    headroom: float,
    bias: float,
    spare: int,
    rate: float,
) -> None:
    wl = _workload(seed, 30, rate)
    predictor = PredictorSpec(name="noisy", sigma=0.5, bias=bias, seed=seed)
    adm = AdmissionConfig(
        policy=policy, on_exhaustion=on_exhaustion, headroom=headroom, predictor=predictor
    )
    fast = _checked_run(wl, _admission_config(wl, tiers, adm, spare, exact=False))
    exact = _checked_run(wl, _admission_config(wl, tiers, adm, spare, exact=True))
    f, e = fast.records, exact.records
    assert fast.num_steps == exact.num_steps
    for name in ("status", "num_preemptions", "recomputed_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(f, name), getattr(e, name), err_msg=name)
    for name in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(
            getattr(f, name), getattr(e, name), rtol=1e-9, equal_nan=True, err_msg=name
        )
    assert fast.kv_tiers is not None and exact.kv_tiers is not None
    for key in ("num_offloaded", "num_reloaded", "recompute_avoided_tokens"):
        assert fast.kv_tiers[key] == exact.kv_tiers[key]


def test_preempted_sequences_reload_under_reservations() -> None:
    """With a host tier of room for everything, every victim's KV goes down and comes back
    (nothing recomputed) under reservations too, and the reloading requests' reservations are
    checked after every step. ``reserve-none`` preempts (vLLM v1's schedule); a quantile
    reservation with an underestimating predictor does too, less."""
    wl = _workload(5, 60, math.inf)
    host = (TierSpec("host", 1e12, 64e9, 64e9),)
    under = PredictorSpec(name="noisy", sigma=0.0, bias=0.5)
    preempted = []
    for adm in (
        AdmissionConfig(policy="reserve-none"),
        AdmissionConfig(policy="quantile", headroom=0.05, predictor=under),
    ):
        res = _checked_run(wl, _admission_config(wl, host, adm, 10, exact=False))
        assert res.kv_tiers is not None
        preempted.append(int(res.records.num_preemptions.sum()))
        assert res.kv_tiers["num_offloaded"] == res.kv_tiers["num_reloaded"] == preempted[-1]
        assert int(res.records.recomputed_tokens.sum()) == 0
        assert np.all(res.records.status == int(RequestStatus.COMPLETED))
    assert preempted[0] > preempted[1] > 0


@pure_only  # a stand-in ``KvOffload`` (compiled, the attribute's type is checked)
def test_reloading_requests_reservations_are_outstanding() -> None:
    """A request admitted while its KV comes back from a tier holds 3 blocks and a 10-block
    reservation off the running set: its 7 unallocated blocks are outstanding, so a 20-block
    pool with 5 blocks given to a running request (reserving 8) leaves 20 - 5 - 3 - (8 - 5) -
    7 = 2 unreserved, and a quantile reservation of 8 blocks waits (9 unreserved if the
    reloading request were forgotten)."""
    from .test_admission import _scheduler

    cfg = AdmissionConfig(policy="quantile")
    sched, ledger = _scheduler(20, 16, [16, 16, 16], [100, 100, 100], cfg)
    admission = sched.admission
    assert admission is not None
    sched.running.append(0, 16, 17, 1, 100, 5, 0.0)
    sched.pool.free -= 5
    ledger.reserved_blocks[0] = 8
    offload = SimpleNamespace(loading=[LoadingKv(1, 40, 41, 3, 0, 3, 1.0)])
    sched.pool.free -= 3
    ledger.reserved_blocks[1], ledger.reserved_tokens[1] = 10, 160
    admission.offload = offload  # type: ignore[assignment]
    assert admission.outstanding(sched.running, sched.running.held_blocks) == 3 + 7
    assert admission.available_blocks(sched.running, after_decode_step=False) == 2
    assert not admission.admits(sched.running, 2, 16, 1, 2)
    admission.offload = None
    assert admission.available_blocks(sched.running, after_decode_step=False) == 9


# ---- tiers on both pools of --disaggregate ---------------------------------------------------


def _pool_config(
    wl: Workload, tiers: tuple[TierSpec, ...], spare: int, *, caching: bool, exact: bool
) -> SimulationConfig:
    return _tier_config(wl, tiers, spare, exact=exact, caching=caching)


def _disagg_checked(
    wl: Workload, tiers: tuple[TierSpec, ...], spare: int, *, caching: bool, exact: bool
) -> DisaggResult:
    def check(replica: Replica) -> None:
        replica.check_invariants()  # HBM + reloading + tiers conserved, on either pool
        offload = replica.offload
        assert offload is not None
        present = len(replica.running) + len(replica.waiting) + len(offload.loading)
        assert present <= replica.records.num_requests

    prefill = Pool("prefill", _pool_config(wl, tiers, 40, caching=caching, exact=exact), _model())
    decode = Pool("decode", _pool_config(wl, tiers, spare, caching=caching, exact=exact), _model())
    res = simulate_disaggregated(wl, prefill, decode, KvLink(50e9, 0.0), lambda t: t * 1e5, check)
    assert np.all(res.records.status == int(RequestStatus.COMPLETED)), "a request was lost"
    np.testing.assert_array_equal(res.records.output_tokens, wl.output_tokens)
    return res


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    tiers=st.sampled_from(TIER_CHOICES),
    spare=st.integers(0, 30),
    rate=st.sampled_from([20.0, math.inf]),
    shared=st.booleans(),
)
def test_tiers_on_disaggregated_pools_fast_equals_exact(
    seed: int, tiers: tuple[TierSpec, ...], spare: int, rate: float, shared: bool
) -> None:
    """Both pools with tiers; a small decode pool preempts, its victims go down and come back;
    with shared prefixes both pools also cache, and evicted entries go down too."""
    wl = _shared_workload(seed, 30, rate) if shared else _workload(seed, 30, rate)
    fast = _disagg_checked(wl, tiers, spare, caching=shared, exact=False)
    exact = _disagg_checked(wl, tiers, spare, caching=shared, exact=True)
    for f, e in ((fast.prefill, exact.prefill), (fast.decode, exact.decode)):
        assert f.num_steps == e.num_steps
        np.testing.assert_array_equal(f.records.num_preemptions, e.records.num_preemptions)
        assert f.kv_tiers is not None and e.kv_tiers is not None
        for key in ("num_offloaded", "num_reloaded", "recompute_avoided_tokens"):
            assert f.kv_tiers[key] == e.kv_tiers[key]
    np.testing.assert_allclose(fast.records.finish_s, exact.records.finish_s, rtol=1e-9)


def test_decode_pool_victims_reload_from_a_tier() -> None:
    """A decode pool with room for about two sequences preempts; with a host tier of room for
    everything, every decode-pool victim's KV goes down and comes back: nothing recomputed."""
    wl = _workload(5, 40, math.inf)
    host = (TierSpec("host", 1e12, 64e9, 64e9),)
    res = _disagg_checked(wl, host, 10, caching=False, exact=False)
    decode = res.decode
    assert decode.kv_tiers is not None
    preempted = int(decode.records.num_preemptions.sum())
    assert preempted > 0
    assert decode.kv_tiers["num_offloaded"] == decode.kv_tiers["num_reloaded"] == preempted
    assert int(decode.records.recomputed_tokens.sum()) == 0


# ---- fast mode with a prefix cache and tiers (``KvOffload.is_idle``) --------------------------


@pytest.mark.parametrize("seed", range(8))
def test_stretches_stop_before_evicting_a_cached_block(seed: int) -> None:
    """With prefix caching and a tier, the closed-form stretch runs while cached free blocks
    exist but stops before the step whose new blocks would evict one (its copy down is timed
    at that step): fast == exact in schedule, times and bytes written, on a pool small enough
    that decode growth evicts cached entries."""
    wl = _shared_workload(seed, 40, 20.0)
    host = (TierSpec("host", 30 * BLOCK_BYTES, 64e9, 64e9),)
    runs = []
    for exact in (False, True):
        cfg = _pool_config(wl, host, 4, caching=True, exact=exact)
        runs.append(Simulation(wl, cfg, _model()).run(check=lambda r: r.check_invariants()))
    fast, exact_run = runs
    assert fast.num_steps == exact_run.num_steps
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(
            getattr(fast.records, name), getattr(exact_run.records, name), rtol=1e-9
        )
    assert fast.kv_tiers is not None and exact_run.kv_tiers is not None
    assert fast.kv_tiers["tiers"] == exact_run.kv_tiers["tiers"]
    assert fast.kv_tiers["num_prefix_entries_offloaded"] > 0
