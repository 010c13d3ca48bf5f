"""ShareGPT's lengths as ``vllm bench serve`` samples them (plan/sharegpt.py)."""

from __future__ import annotations

import numpy as np

from inferplan.plan.sharegpt import bundled_pairs, sharegpt_lengths, sharegpt_run_lengths
from inferplan.workload.synthetic import lognormal_lengths


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


def test_vllm_runs_draw_the_measured_pairs_and_other_engines_the_lognormal() -> None:
    """vLLM's published ShareGPT runs send the measured pairs (anti-correlated, median far below
    the mean); SGLang's and TensorRT-LLM's keep the capped lognormal of main, draw for draw."""
    means, lognormal = (217.4, 201.6), (1.0, 4096)
    vllm = sharegpt_run_lengths("vllm", 1000, means, lognormal, np.random.default_rng(0))
    assert all(
        np.array_equal(x, y)
        for x, y in zip(vllm, sharegpt_lengths(1000, *means, np.random.default_rng(0)), strict=True)
    )
    assert np.corrcoef(np.log(vllm[0]), np.log(vllm[1]))[0, 1] < -0.3
    for engine in ("sglang", "tensorrt-llm"):
        ins, outs = sharegpt_run_lengths(engine, 1000, means, lognormal, np.random.default_rng(0))
        rng = np.random.default_rng(0)
        assert np.array_equal(ins, lognormal_lengths(1000, 217.4, 1.0, 4096, rng))
        assert np.array_equal(outs, lognormal_lengths(1000, 201.6, 1.0, 4096, rng))
        assert abs(np.corrcoef(np.log(ins), np.log(outs))[0, 1]) < 0.1  # drawn apart
