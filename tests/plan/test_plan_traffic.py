"""The mixed workload: per-class rates, common random numbers across loads, prefixes."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.plan.capacity import build_context
from inferplan.plan.traffic import class_counts, mixed_workload

from .planner_helpers import tiny_request


def test_classes_keep_their_rates_and_names() -> None:
    request = tiny_request()
    counts = class_counts(request, 1.0, 600)
    # max_requests 500 shortens the 600 s window to 500 / 7 s: ceil(6 x 71.4), ceil(71.4).
    assert counts == [429, 72]
    w = mixed_workload(request, 1.0, counts)
    assert w.class_names == ("chat", "batch")
    assert np.bincount(w.class_ids).tolist() == counts
    assert np.all(np.diff(w.arrival_s) >= 0)
    chat = w.arrival_s[w.class_ids == 0]
    assert len(chat) / chat[-1] == pytest.approx(6, rel=0.2)


def test_a_scale_only_divides_arrival_times() -> None:
    request = tiny_request()
    counts = class_counts(request, 1.0, 30)
    slow, fast = mixed_workload(request, 1.0, counts), mixed_workload(request, 2.0, counts)
    np.testing.assert_allclose(fast.arrival_s, slow.arrival_s / 2)
    np.testing.assert_array_equal(fast.output_tokens, slow.output_tokens)


def test_fewer_requests_are_a_prefix_of_more() -> None:
    request = tiny_request()
    small = mixed_workload(request, 1.0, [20, 5])
    large = mixed_workload(request, 1.0, [40, 10])
    for k in (0, 1):
        a = small.output_tokens[small.class_ids == k]
        b = large.output_tokens[large.class_ids == k]
        np.testing.assert_array_equal(a, b[: len(a)])


def test_every_class_gets_its_minimum() -> None:
    request = tiny_request()
    counts = class_counts(request, 0.01, 40)
    assert min(counts) >= request.search.min_class_requests


def test_max_model_len_covers_the_longest_request() -> None:
    ctx = build_context(tiny_request())
    assert ctx.max_model_len == max(2000 + 600, 2000 + 400)
