"""ShareGPT's lengths as ``vllm bench serve`` samples them (plan/sharegpt.py), and every
published ShareGPT run drawn from them (plan/published_workload.py ``run_workload``)."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import group_runs
from inferplan.plan.published_workload import run_workload
from inferplan.plan.sharegpt import bundled_pairs, scaled_to_total, sharegpt_lengths


def test_bundled_pairs_pass_the_benchmarks_filter() -> None:
    prompts, outputs = bundled_pairs()
    assert prompts.size == outputs.size == 4000
    assert prompts.min() >= 4 and outputs.min() >= 4 and prompts.max() <= 1024
    assert (prompts + outputs).max() <= 2048
    # far from a lognormal of sigma 1: half the prompts at most ~half the mean, anti-correlated
    assert np.median(prompts) < 0.55 * prompts.mean()
    assert np.corrcoef(np.log(prompts), np.log(outputs))[0, 1] < -0.3


def test_scaled_to_total_gives_the_left_tokens_to_the_largest_remainders() -> None:
    # 10, 20, 30 scaled to 7: exactly 7/6, 14/6, 21/6 = 1.17, 2.33, 3.5; floors 1, 2, 3 (6),
    # the one token left goes to the largest remainder (3.5), not to the first or the last
    assert scaled_to_total(np.array([10, 20, 30]), 7).tolist() == [1, 2, 4]
    assert scaled_to_total(np.array([30, 20, 10]), 7).tolist() == [4, 2, 1]
    assert scaled_to_total(np.array([1, 1]), 3).tolist() == [2, 1]  # a tie: the earlier one
    assert scaled_to_total(np.array([1, 100]), 10).tolist() == [1, 10]  # 0 raised to 1


def test_every_sharegpt_run_sends_its_published_totals() -> None:
    runs = group_runs([r for r in bundled_published() if r.dataset == "sharegpt"])
    assert len(runs) >= 30
    for run in runs.values():
        row = run[0]
        assert row.input_len_mean and row.output_len_mean and row.num_requests
        workload = run_workload(row, quick=False)
        assert workload.input_tokens.size == row.num_requests
        # vllm bench serve prints these totals; its means are total / completed requests
        assert workload.input_tokens.sum() == round(row.input_len_mean * row.num_requests)
        assert workload.output_tokens.sum() == round(row.output_len_mean * row.num_requests)
        assert workload.input_tokens.min() >= 1 and workload.output_tokens.min() >= 1


def test_a_draw_keeps_the_pairs_and_their_shape() -> None:
    prompts, outputs = sharegpt_lengths(1000, 217.393, 201.605, np.random.default_rng(0))
    assert prompts.sum() == 217393 and outputs.sum() == 201605
    # pairs drawn together stay anti-correlated (columns drawn apart would not be), and the
    # median stays about half the mean (a lognormal of sigma 1 has 0.61)
    assert np.corrcoef(np.log(prompts), np.log(outputs))[0, 1] < -0.3
    assert np.median(prompts) < 0.55 * prompts.mean()
    as_counted = sharegpt_lengths(1000, None, None, np.random.default_rng(0))
    table_prompts, _ = bundled_pairs()
    assert np.isin(as_counted[0], table_prompts).all()  # no mean stated: the counts themselves
    ratio = prompts / as_counted[0]
    assert ratio.min() > 0.9 and ratio.max() < 1.3  # scaled, not redrawn: 217.4 / ~220 per pair


def test_draws_are_seeded() -> None:
    a = sharegpt_lengths(1000, 217.4, 201.6, np.random.default_rng(0))
    b = sharegpt_lengths(1000, 217.4, 201.6, np.random.default_rng(0))
    c = sharegpt_lengths(1000, 217.4, 201.6, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    row = next(r for r in bundled_published() if r.dataset == "sharegpt")
    first, again = run_workload(row, quick=True), run_workload(row, quick=True)
    assert np.array_equal(first.input_tokens, again.input_tokens)
    assert np.array_equal(first.output_tokens, again.output_tokens)
    more = sharegpt_lengths(5000, 217.4, 201.6, np.random.default_rng(1))  # beyond the table
    assert more[0].size == 5000 and more[0].sum() == 217.4 * 5000


@pytest.mark.parametrize(
    ("num", "mean_in", "mean_out", "words"),
    [
        (0, 217.0, 201.0, "0 requests"),
        (10, -1.0, 201.0, "mean prompt length -1.0"),
        (10, 217.0, float("nan"), "mean output length nan"),
        (10, 217.0, 0.0, "mean output length 0.0"),
    ],
)
def test_bad_input_is_one_line(num: int, mean_in: float, mean_out: float, words: str) -> None:
    with pytest.raises(InferplanError) as err:
        sharegpt_lengths(num, mean_in, mean_out, np.random.default_rng(0))
    assert words in str(err.value) and "valid:" in str(err.value)
    assert "\n" not in str(err.value)
