"""The front end's lean paths (engine/frontend.py): one job per token and no ITL statistics give
the same client times, bit for bit, as the general computation."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.engine import frontend
from inferplan.engine.frontend import FrontEnd, _token_jobs, frontend_times
from inferplan.metrics.records import RequestRecords, RequestStatus


def _general_jobs(num: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grouped formula of ``_token_jobs`` with no shortcut."""
    per_request = 1 + -(-(num - 1) // chunk)
    owner = np.repeat(np.arange(num.size), per_request)
    job = np.arange(owner.size) - (np.cumsum(per_request) - per_request)[owner]
    first_index = np.where(job == 0, 0, 1 + (job - 1) * chunk)
    size = np.where(job == 0, 1, np.minimum(chunk, num[owner] - first_index))
    return owner, first_index, size


def _random_records(num: int, seed: int) -> RequestRecords:
    rng = np.random.default_rng(seed)
    rec = RequestRecords.empty(num)
    rec.arrival_s[:] = np.sort(rng.uniform(0, 20, num))
    rec.first_token_s[:] = rec.arrival_s + rng.uniform(0.01, 1.0, num)
    rec.output_tokens[:] = rng.integers(1, 400, num)
    rec.finish_s[:] = rec.first_token_s + rec.output_tokens * rng.uniform(0.005, 0.05, num)
    rec.input_tokens[:] = rng.integers(10, 3000, num)
    rec.status[:] = int(RequestStatus.COMPLETED)
    rec.status[::17] = int(RequestStatus.REJECTED)
    return rec


@pytest.mark.parametrize("chunk", [1, 2, 7])
def test_token_jobs_match_the_general_formula(chunk: int) -> None:
    num = np.random.default_rng(3).integers(1, 50, 200)
    for got, want in zip(_token_jobs(num, chunk), _general_jobs(num, chunk), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("max_jobs", [4_000_000, 5_000])  # one job per token; groups
@pytest.mark.parametrize("seed", [0, 1])
def test_skipping_itl_keeps_every_time(
    max_jobs: int, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frontend, "MAX_TOKEN_JOBS", max_jobs)
    rec = _random_records(300, seed)
    fe = FrontEnd(per_request_s=2e-3, per_input_token_s=1e-6, per_token_s=4e-4)
    full = frontend_times(rec, fe, servers=2)
    lean = frontend_times(rec, fe, servers=2, with_itl=False)
    np.testing.assert_array_equal(full.first_token_s, lean.first_token_s)
    np.testing.assert_array_equal(full.finish_s, lean.finish_s)
    assert full.itl_after_s["mean"] > 0  # the full path has the ITL statistics, the lean none
    assert lean.itl_after_s == lean.itl_before_s == {"mean": 0.0, "median": 0.0, "p99": 0.0}
