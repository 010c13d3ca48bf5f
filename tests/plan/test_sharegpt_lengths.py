"""ShareGPT's lengths as ``vllm bench serve`` samples them (plan/sharegpt.py)."""

from __future__ import annotations

import numpy as np

from inferplan.plan.sharegpt import bundled_pairs, sharegpt_lengths


def test_bundled_pairs_pass_the_benchmarks_filter() -> None:
    prompts, outputs = bundled_pairs()
    assert prompts.size == outputs.size == 4000
    assert prompts.min() >= 4 and outputs.min() >= 4 and prompts.max() <= 1024
    assert (prompts + outputs).max() <= 2048
    # far from a lognormal of sigma 1: half the prompts at most ~half the mean, anti-correlated
    assert np.median(prompts) < 0.55 * prompts.mean()
    assert np.corrcoef(np.log(prompts), np.log(outputs))[0, 1] < -0.3


def test_draws_are_seeded_and_scaled_to_the_published_means() -> None:
    a = sharegpt_lengths(1000, 217.4, 201.6, np.random.default_rng(0))
    b = sharegpt_lengths(1000, 217.4, 201.6, np.random.default_rng(0))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert abs(a[0].mean() - 217.4) < 0.5 and abs(a[1].mean() - 201.6) < 0.5
    assert a[0].min() >= 1 and a[1].min() >= 1
    more = sharegpt_lengths(5000, 217.4, 201.6, np.random.default_rng(1))  # beyond the table
    assert more[0].size == 5000
