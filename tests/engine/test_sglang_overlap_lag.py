"""SGLang's overlap-scheduler admission lag (``engine/sglang.py`` ``OVERLAP_ADMISSION_LAG``,
off by default): with it on, a request that reaches a busy engine joins the step after next
(SGLang formed the next batch when the current one started); an idle engine takes it at once;
fast mode equals exact mode."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferplan.engine import sglang
from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import SchedulerConfig
from inferplan.metrics.records import RequestStatus

from .replica_helpers import replica_at_zero
from .test_sglang import _model, _replica, _run, _step, _workload


@pytest.fixture
def lag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang, "OVERLAP_ADMISSION_LAG", True)


def test_the_lag_is_off_by_default() -> None:
    # docs/validation.md ``sgl20``: measured on every SGLang run, it does not improve them.
    assert sglang.OVERLAP_ADMISSION_LAG is False


def test_without_the_lag_an_arrival_joins_the_next_step() -> None:
    replica = _replica([100, 60], [5, 5])
    replica.add_request(0)
    assert _step(replica) == [100, 0]
    assert _step(replica) == [1, 0]
    replica.add_request(1)  # reaches the engine while A's decode runs
    assert _step(replica) == [0, 60]


@pytest.mark.usefixtures("lag")
def test_an_arrival_at_a_busy_engine_joins_the_step_after_next() -> None:
    replica = _replica([100, 60], [5, 5])
    replica.add_request(0)
    assert _step(replica) == [100, 0]  # an idle engine: at once
    assert _step(replica) == [1, 0]
    replica.add_request(1)  # reaches the engine while A's decode runs
    assert _step(replica) == [1, 0]  # that step was formed before it came: A decodes again
    assert _step(replica) == [0, 60]  # received now: B's prefill (A waits, prefill first)
    assert _step(replica) == [1, 1]


@pytest.mark.usefixtures("lag")
def test_a_request_queued_before_the_step_joins_and_a_later_one_waits() -> None:
    """B is queued when the step that runs before C's arrival is formed, C arrives while it
    runs: the next round admits B and not C, although the budget holds both."""
    replica = _replica([100, 10, 60, 20], [5, 3, 5, 5], num_blocks=100_000)  # A, X, B, C
    replica.add_request(0)
    replica.add_request(1)
    assert _step(replica) == [100, 10, 0, 0]  # idle: both at once
    replica.add_request(2)  # B: arrives during the first step
    assert _step(replica) == [1, 1, 0, 0]  # the lag: B waits one step
    replica.add_request(3)  # C: arrives during the second step
    assert _step(replica) == [0, 0, 60, 0]  # B (queued when this step was formed), not C
    assert _step(replica) == [0, 0, 0, 20]  # C now
    assert replica.records.status[1] != int(RequestStatus.COMPLETED)  # X still decoding


@pytest.mark.usefixtures("lag")
def test_an_idle_engine_takes_an_arrival_at_once() -> None:
    replica = _replica([100, 60], [1, 5])
    replica.add_request(0)
    assert _step(replica) == [100, 0]  # A's only token: it finishes, the engine is idle
    assert replica.records.status[0] == int(RequestStatus.COMPLETED)
    replica.add_request(1)
    assert _step(replica) == [0, 60]


@pytest.mark.usefixtures("lag")
def test_a_sorted_queue_has_no_lag() -> None:
    """``lpm`` reorders the queue, so the arrivals are no longer its tail: no lag there."""
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192,
        max_num_seqs=4096,
        block_size=1,
        num_blocks=100_000,
        scheduler="sglang",
    )
    replica = replica_at_zero([100, 60], [5, 5], cfg, _model(), WaitingQueue("lpm", None))
    replica.add_request(0)
    assert _step(replica) == [100, 0]
    replica.add_request(1)
    assert _step(replica) == [0, 60]


@pytest.mark.usefixtures("lag")
@pytest.mark.parametrize(
    ("n", "rate", "blocks", "budget", "seed"),
    [
        (40, 20.0, 100_000, 512, 1),
        (60, 200.0, 1500, 8192, 2),
        (50, math.inf, 2000, 8192, 3),
        (30, 2.0, 300, 64, 4),
        (60, 50.0, 100_000, 8192, 5),
    ],
)
def test_fast_mode_equals_exact_mode_with_the_lag(
    n: int, rate: float, blocks: int, budget: int, seed: int
) -> None:
    wl = _workload(n, 600, 300, rate, seed)
    fast, exact = (
        _run(wl, exact=mode, blocks=blocks, budget=budget, seqs=64, block=1, concurrency=None)
        for mode in (False, True)
    )
    f, e = fast.records, exact.records
    assert fast.num_steps == exact.num_steps
    assert np.all(e.status == int(RequestStatus.COMPLETED))
    for name in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(f, name), getattr(e, name), rtol=1e-9, err_msg=name)


@pytest.mark.parametrize("rate", [20.0, 200.0])
def test_the_lag_delays_first_tokens_at_a_busy_engine(
    monkeypatch: pytest.MonkeyPatch, rate: float
) -> None:
    """On a stream of arrivals the lag never brings a first token earlier in sum, and delays
    some: it only ever holds a request back."""
    wl = _workload(40, 400, 200, rate, 7)
    off = _run(wl, exact=True, blocks=100_000, budget=8192, seqs=64, block=1, concurrency=None)
    monkeypatch.setattr(sglang, "OVERLAP_ADMISSION_LAG", True)
    on = _run(wl, exact=True, blocks=100_000, budget=8192, seqs=64, block=1, concurrency=None)
    delay = on.records.first_token_s - off.records.first_token_s
    assert delay.sum() > 0
    assert delay[0] == 0  # the first request reaches an idle engine
