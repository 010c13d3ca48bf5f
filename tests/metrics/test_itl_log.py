"""An ``ItlLog`` (a replica run apart) bins its adds a chunk at a time: the same counts as
``ItlHistogram``'s adds, and its update rows fold to the same moments."""

from __future__ import annotations

import random
from dataclasses import astuple

import numpy as np
import pytest

from inferplan.metrics import itl_log
from inferplan.metrics.histogram import ItlHistogram, bin_grid
from inferplan.metrics.itl_log import ItlBatch, ItlLog, replay_into


def _adds(seed: int, num: int) -> list[tuple[str, tuple]]:
    """Adds as the engine makes them: single steps, rising and falling series that cross
    many or no edges (steps of 1e-7 up to 4e-4 over up to 400 terms), a few batches."""
    rng = random.Random(seed)
    out: list[tuple[str, tuple]] = []
    for _ in range(num):
        weight = float(rng.randint(1, 64))
        kind = rng.random()
        if kind < 0.35:
            out.append(("add", (rng.uniform(1e-4, 0.05), weight)))
        elif kind < 0.95:
            first = rng.uniform(2e-3, 0.05)
            step = rng.choice([1e-7, -1e-7, 4e-6, -4e-6, 4e-4])
            n = rng.randint(1, 400) if step > -1e-6 else rng.randint(1, 4)
            out.append(("add_arithmetic", (first, step, n, weight)))
        else:
            values = np.asarray([rng.uniform(1e-3, 0.05) for _ in range(5)])
            out.append(("add_many", (values, weight)))
    return out


def _both(adds: list[tuple[str, tuple]]) -> tuple[ItlHistogram, ItlLog]:
    hist, log = ItlHistogram(), ItlLog()
    for name, args in adds:
        getattr(hist, name)(*args)
        getattr(log, name)(*args)
    return hist, log


@pytest.mark.parametrize("seed", range(3))
def test_log_counts_and_moments_equal_the_histograms(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(itl_log, "CHUNK", 97)  # many chunks
    hist, log = _both(_adds(seed, 2000))
    assert log.is_integral
    assert log.num_updates == 2000
    assert np.array_equal(log.counts, hist.counts)
    rebuilt = ItlHistogram()
    replay_into(rebuilt, log.counts, [log.rows()[:700], log.rows()[700:]])
    assert np.array_equal(rebuilt.counts, hist.counts)
    assert astuple(rebuilt._settled()) == astuple(hist._settled())


def test_falling_series_across_edges_count_as_the_histogram() -> None:
    adds = [("add_arithmetic", (0.01 + 3e-4 * i, -3e-5, 50, 2.0)) for i in range(40)]
    hist, log = _both(adds)
    assert np.array_equal(log.counts, hist.counts)
    assert np.count_nonzero(hist.counts) > 40  # they cross edges


@pytest.mark.parametrize("name", ["add", "add_arithmetic"])
def test_a_fractional_weight_is_seen(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(itl_log, "CHUNK", 50)
    adds = [(n, a) for n, a in _adds(5, 400) if n != "add_many"]
    _, whole = _both(adds)
    assert whole.is_integral
    at = next(i for i, (n, _) in enumerate(adds) if n == name)
    adds[at] = (name, (*adds[at][1][:-1], 2.5))
    _, log = _both(adds)
    assert not log.is_integral


def test_durations_on_bin_edges_count_as_the_histogram() -> None:
    edges = bin_grid().edges_list
    adds: list[tuple[str, tuple]] = [("add", (edges[i], 1.0)) for i in range(2000, 3000, 7)]
    adds += [
        ("add_arithmetic", (edges[i], edges[i + 1] - edges[i], 3, 2.0)) for i in range(2000, 2100)
    ]
    adds += [("add_arithmetic", (edges[i], 1e-7, 1, 1.0)) for i in range(2000, 2100)]  # last on one
    hist, log = _both(adds)
    assert np.array_equal(log.counts, hist.counts)


def test_log_checks_as_the_histogram() -> None:
    log = ItlLog()
    with pytest.raises(ValueError):
        log.add(-1e-3)
    with pytest.raises(ValueError):
        log.add_arithmetic(1e-3, -1e-3, 5)  # its last term is negative
    log.add(1e-3, 0.0)
    log.add_arithmetic(1e-3, 1e-4, 0)
    assert log.num_updates == 0 and log.counts.sum() == 0.0


def _batched(adds: list[tuple[str, tuple]]) -> tuple[ItlHistogram, ItlBatch]:
    hist, batch = ItlHistogram(), ItlBatch()
    for name, args in adds:
        getattr(hist, name)(*args)
        getattr(batch, name)(*args)
    return hist, batch


@pytest.mark.parametrize(("seed", "small"), [(0, 0), (1, 64), (2, 1000)])
def test_batch_counts_and_moments_equal_the_histograms(
    seed: int, small: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted and folded a batch at a time (and across ``add_many``, which applies the batch
    first), in arrays or replayed below ``SMALL_BATCH``: the same counts and the same moment
    floats, to the bit."""
    monkeypatch.setattr(itl_log, "BATCH", 97)  # many batches
    monkeypatch.setattr(itl_log, "SMALL_BATCH", small)
    hist, batch = _batched(_adds(seed, 2000))
    assert np.array_equal(batch.counts, hist.counts)
    assert astuple(batch._settled()) == astuple(hist._settled())
    assert [batch.mean(), batch.std(), batch.quantile(0.99)] == [
        hist.mean(),
        hist.std(),
        hist.quantile(0.99),
    ]


@pytest.mark.parametrize("name", ["add", "add_arithmetic"])
def test_batch_with_a_fractional_weight_adds_in_order(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fractional weight: its batch and every later one replay the histogram's own adds in
    order, so the (then order dependent) counts are the histogram's too."""
    monkeypatch.setattr(itl_log, "BATCH", 50)
    monkeypatch.setattr(itl_log, "SMALL_BATCH", 0)  # every batch through the arrays' test
    adds = _adds(6, 400)
    at = next(i for i, (n, _) in enumerate(adds) if n == name and i > 120)
    adds[at] = (name, (*adds[at][1][:-1], 2.5))
    adds[at + 5 :] = [(n, (*a[:-1], a[-1] / 3.0)) for n, a in adds[at + 5 :]]
    hist, batch = _batched(adds)
    assert not hist._integral and not batch._integral
    assert np.array_equal(batch.counts, hist.counts)
    assert astuple(batch._settled()) == astuple(hist._settled())


def test_batch_is_applied_before_a_merge_and_a_reading() -> None:
    other = ItlHistogram()
    other.add(0.02, 0.5)  # fractional: the merge adds counts in order from here on
    hist, batch = _batched([("add", (0.01, 3.0)), ("add_arithmetic", (0.01, 1e-4, 30, 2.0))])
    hist.merge(other)
    batch.merge(other)
    assert np.array_equal(batch.counts, hist.counts)
    assert astuple(batch._settled()) == astuple(hist._settled())
    fresh = ItlBatch()
    fresh.add(0.01, 4.0)
    assert fresh.total_weight == 4.0 and fresh.counts.sum() == 4.0


def test_batch_checks_as_the_histogram() -> None:
    batch = ItlBatch()
    with pytest.raises(ValueError):
        batch.add(-1e-3)
    with pytest.raises(ValueError):
        batch.add_arithmetic(1e-3, -1e-3, 5)
    batch.add(1e-3, 0.0)
    batch.add_arithmetic(1e-3, 1e-4, 0)
    assert batch.total_weight == 0.0 and batch.counts.sum() == 0.0


@pytest.mark.parametrize("cls", [ItlHistogram, ItlLog, ItlBatch])
def test_series_added_in_groups_equal_one_at_a_time(
    cls: type[ItlHistogram], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``add_series`` (a preemption chain's segments, one call per chain) among single adds:
    the same counts and moment floats as ``add_arithmetic`` of each series in order, groups
    crossing ``BATCH`` and ``CHUNK``; a series of no steps or no weight is skipped."""
    monkeypatch.setattr(itl_log, "BATCH", 97)
    monkeypatch.setattr(itl_log, "CHUNK", 89)
    adds = [(n, a) for n, a in _adds(7, 1500) if n != "add_many"]
    adds[10] = ("add_arithmetic", (0.01, 1e-4, 0, 2.0))
    adds[11] = ("add_arithmetic", (0.01, 1e-4, 4, 0.0))
    hist, grouped = ItlHistogram(), cls()
    for name, args in adds:
        getattr(hist, name)(*args)
    rng = random.Random(3)
    at = 0
    while at < len(adds):
        name, args = adds[at]
        size = rng.randint(1, 12)
        group = [a for n, a in adds[at : at + size] if n == "add_arithmetic"]
        if name == "add" or len(group) < size:  # a single add ends the group
            getattr(grouped, name)(*args)
            at += 1
        else:
            grouped.add_series(group)
            at += size
    if isinstance(grouped, ItlLog):
        assert grouped.num_updates == len(adds) - 2  # the two skipped
        rebuilt = ItlHistogram()
        replay_into(rebuilt, grouped.counts, [grouped.rows()])
        grouped = rebuilt
    assert np.array_equal(grouped.counts, hist.counts)
    assert astuple(grouped._settled()) == astuple(hist._settled())
    with pytest.raises(ValueError):
        cls().add_series([(1e-3, -1e-3, 5, 1.0)])


@pytest.mark.parametrize("small", [0, 1000])
def test_batch_keeps_add_many_in_order_after_a_fractional_add(
    small: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ItlBatch.add_many`` joins the batch (its bins kept beside it): after a fractional
    single add still in the batch, its counts land after that add's, as the histogram's do
    (float sums in another order would differ in the last bits)."""
    monkeypatch.setattr(itl_log, "SMALL_BATCH", small)
    rng = np.random.default_rng(8)
    same = np.full(1, 0.0123)  # (0.1 + 0.1) + 7 is 7.2; (7 + 0.1) + 0.1 is not
    adds: list[tuple[str, tuple]] = [("add_many", (rng.uniform(0.01, 0.02, 300), 3.0))]
    adds += [("add", (0.0123, 0.1)), ("add", (0.0123, 0.1)), ("add_many", (same, 7.0))]
    adds += [("add", (0.0123, 0.3))]
    adds += [("add_arithmetic", (0.01, 1e-5, 50, 2.0)), ("add_many", (same, 1e-3))]
    hist, batch = _batched(adds)
    assert np.array_equal(batch.counts, hist.counts)
    assert astuple(batch._settled()) == astuple(hist._settled())
