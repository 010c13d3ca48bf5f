"""``--dataset-name reasoning-burst`` (``workload/burst.py``): the burst's size, timing, lengths
and classes, and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.workload import build_workload


def test_a_tenth_arrive_together_with_long_outputs() -> None:
    wl = build_workload("reasoning-burst", num_prompts=200, request_rate=2.0, seed=4)
    background = build_workload("reasoning", num_prompts=180, request_rate=2.0, seed=4)
    assert wl.num_requests == 200 and wl.class_names == ("background", "burst")
    burst = wl.class_ids == 1
    assert burst.sum() == 20
    assert np.unique(wl.arrival_s[burst]).tolist() == [np.median(background.arrival_s)]
    assert np.all(wl.output_tokens[burst] > 5000) and np.all(wl.output_tokens[burst] <= 32768)
    # The background is the reasoning dataset itself, untouched.
    np.testing.assert_array_equal(wl.output_tokens[~burst], background.output_tokens)
    np.testing.assert_array_equal(wl.arrival_s[~burst], background.arrival_s)
    assert np.all(np.diff(wl.arrival_s) >= 0)
    again = build_workload("reasoning-burst", num_prompts=200, request_rate=2.0, seed=4)
    np.testing.assert_array_equal(wl.output_tokens, again.output_tokens)


def test_burst_refuses_what_does_not_apply() -> None:
    with pytest.raises(InferplanError, match="--random-output-len"):
        build_workload("reasoning-burst", random_output_len=100)
    with pytest.raises(InferplanError, match="--num-prompts"):
        build_workload("reasoning-burst", num_prompts=1)
