"""The request count of a ``trtllm-bench`` row whose table states none (docs/validation.md,
``trt20``): the count the perf overviews state for the nearest length pair, from the nearest
release, behind ``NEAREST_STATED_REQUESTS``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.plan import published_workload
from inferplan.plan.published import PublishedRow, bundled_published
from inferplan.plan.published_runs import predict_run
from inferplan.plan.published_workload import requests_of, stated_requests


def _bench_rows() -> list[PublishedRow]:
    return [
        r
        for r in bundled_published()
        if r.engine == "tensorrt-llm"
        and r.settings.get("harness", "").startswith("trtllm-bench")
        and r.input_len
        and r.output_len
    ]


def _unstated(case_prefix: str, isl: int, osl: int) -> PublishedRow:
    rows = [
        r
        for r in _bench_rows()
        if r.case_id.startswith(case_prefix) and (r.input_len, r.output_len) == (isl, osl)
    ]
    assert rows and rows[0].num_requests is None
    return rows[0]


def test_every_stated_count_is_its_own_nearest() -> None:
    """The rule reproduces each of the 700-odd stated counts: the nearest pair of a stated row
    is its own (distance 0, its own release), so a rule that ranked pairs the other way, or by
    release before length, would miss some (128/128 is 30,000, 128/2,048 3,000)."""
    stated = [r for r in _bench_rows() if r.num_requests]
    assert len(stated) > 600
    for row in stated:
        assert stated_requests(row) == row.num_requests, row.case_id


def test_unstated_pairs_take_their_neighbours_count() -> None:
    """1.1's 1000/1000 is stated as 3,000 in 0.17, 0.19 and 1.0; 0.19's 1024/2048 is nearest
    to 0.19's own 1000/2000 (1,500), not to 1024/1024 (3,000)."""
    assert stated_requests(_unstated("trt11-llama-3.3-70b-instruct-h100", 1000, 1000)) == 3000
    assert stated_requests(_unstated("trt019-l8-h100-tp1", 1024, 2048)) == 1500
    unstated = [r for r in _bench_rows() if not r.num_requests]
    assert len({r.case_id for r in unstated}) >= 20
    assert {stated_requests(r) for r in unstated} == {1500, 3000}


def test_the_flag_picks_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    row = _unstated("trt11-qwen3-235b-a22b-h100", 1000, 1000)
    stated = next(r for r in _bench_rows() if r.num_requests)
    monkeypatch.setattr(published_workload, "NEAREST_STATED_REQUESTS", False)
    assert requests_of(row) == published_workload.UNSTATED_REQUESTS == 1000
    assert requests_of(stated) == stated.num_requests
    monkeypatch.setattr(published_workload, "NEAREST_STATED_REQUESTS", True)
    assert requests_of(row) == 3000
    assert requests_of(stated) == stated.num_requests
    # a row outside the perf overviews keeps the stand-in
    assert requests_of(replace(row, engine_version="0.14.0")) == 1000


def test_the_prediction_runs_the_stated_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the flag the closed form runs 3,000 requests for the unstated row: the prediction
    is the one of the same row with 3,000 stated, and it differs from 1,000's (the ramp and
    drain weigh less)."""
    row = _unstated("trt11-llama-3.3-70b-instruct-h100", 1000, 1000)
    monkeypatch.setattr(published_workload, "NEAREST_STATED_REQUESTS", True)
    on = predict_run([row], None, False)[row.metric]
    as_3000 = predict_run([replace(row, num_requests=3000)], None, False)[row.metric]
    as_1000 = predict_run([replace(row, num_requests=1000)], None, False)[row.metric]
    assert on == as_3000
    assert on is not None and as_1000 is not None and abs(on / as_1000 - 1) > 1e-3
    monkeypatch.setattr(published_workload, "NEAREST_STATED_REQUESTS", False)
    assert predict_run([row], None, False)[row.metric] == as_1000


def test_a_served_run_of_a_bench_release_keeps_the_stand_in() -> None:
    """Only a ``trtllm-bench`` row reads the perf overviews' counts: a ``trtllm-serve`` row of
    release 1.0 that stated no count would not run 3,000 requests (before review20 its harness
    was not checked, against ``stated_requests``' docstring)."""
    bench = _unstated("trt11-llama-3.3-70b-instruct-h100", 1000, 1000)
    served = replace(
        bench, engine_version="1.0", settings={**bench.settings, "harness": "trtllm-serve"}
    )
    assert stated_requests(replace(served, settings=bench.settings)) == 3000
    assert stated_requests(served) is None
    assert requests_of(served) == published_workload.UNSTATED_REQUESTS


def test_ties_go_to_the_nearest_release_then_the_larger_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tie-breaks of ``stated_requests``' docstring on a made-up table (the bundled tables
    agree across releases, so no bundled row tells them apart: review20 reversed each and the
    suite passed): the pair at the row's own distance in releases 0.17 (place 0) and 1.2
    (place 4) goes to 1.2's for a main-revision row (place 3); two releases equally near, the
    larger count."""
    row = _unstated("trt11-llama-3.3-70b-instruct-h100", 1000, 1000)  # the main revision: 3
    table = ((1000, 1000, 0, 111), (1000, 1000, 4, 222), (1024, 1024, 3, 999))
    monkeypatch.setattr(published_workload, "_stated_counts", lambda: table)
    assert stated_requests(row) == 222
    table = ((1000, 1000, 2, 111), (1000, 1000, 4, 333), (1000, 1000, 4, 222))
    monkeypatch.setattr(published_workload, "_stated_counts", lambda: table)
    assert stated_requests(row) == 333
