"""The ``build_workload`` front door: vLLM's defaults, the four datasets, seeds and flag errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.workload import DATASETS, build_workload, bundled_trace, load_trace
from inferplan.workload.request import Workload
from inferplan.workload.servegen import BUNDLED_SERVEGEN


def assert_same(a: Workload, b: Workload) -> None:
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)


def test_dataset_names_mirror_vllm() -> None:
    assert set(DATASETS) == {
        "random",
        "trace",
        "servegen",
        "reasoning",
        "mixed",
        "reasoning-burst",
    }


def test_random_defaults_are_vllms() -> None:
    workload = build_workload()
    assert workload.num_requests == 1000
    assert np.all(workload.input_tokens == 1024)
    assert np.all(workload.output_tokens == 128)
    assert np.all(workload.arrival_s == 0)  # --request-rate inf


def test_random_with_rate() -> None:
    workload = build_workload("random", num_prompts=300, request_rate=20.0, burstiness=0.5)
    assert workload.arrival_s[-1] == 300 / 20.0
    assert workload.num_requests == 300


@pytest.mark.parametrize(
    ("dataset_name", "options"),
    [
        ("random", {"random_range_ratio": 0.5, "request_rate": 3.0}),
        ("reasoning", {"request_rate": 3.0}),
        ("servegen", {"request_rate": 3.0}),
        ("trace", {"dataset_path": "vidur_arxiv_summarization", "request_rate": 3.0}),
    ],
)
def test_same_seed_same_workload(dataset_name: str, options: dict[str, Any]) -> None:
    first = build_workload(dataset_name, num_prompts=200, seed=5, **options)
    assert_same(first, build_workload(dataset_name, num_prompts=200, seed=5, **options))
    other = build_workload(dataset_name, num_prompts=200, seed=6, **options)
    assert not np.array_equal(first.arrival_s, other.arrival_s)


def test_rate_does_not_change_lengths() -> None:
    slow = build_workload("random", num_prompts=100, random_range_ratio=0.5, request_rate=1.0)
    fast = build_workload("random", num_prompts=100, random_range_ratio=0.5, request_rate=50.0)
    np.testing.assert_array_equal(slow.input_tokens, fast.input_tokens)
    np.testing.assert_allclose(slow.arrival_s, fast.arrival_s * 50.0)


def test_trace_keeps_its_times_and_takes_first_rows() -> None:
    full = load_trace(bundled_trace("azure_llm_2023_conv"))
    head = build_workload("trace", dataset_path="azure_llm_2023_conv", num_prompts=100)
    assert head.num_requests == 100
    np.testing.assert_array_equal(head.arrival_s, full.arrival_s[:100])
    np.testing.assert_array_equal(head.input_tokens, full.input_tokens[:100])


def test_trace_is_re_timed_when_a_rate_is_given() -> None:
    path = bundled_trace("mooncake_fast25_conversation")
    timed = build_workload("trace", dataset_path=path, num_prompts=50, request_rate=2.0)
    assert timed.arrival_s[-1] == 25.0
    assert timed.prefix_hashes is not None
    assert len(timed.prefix_hashes) == 50
    at_once = build_workload("trace", dataset_path=path, request_rate=float("inf"))
    assert np.all(at_once.arrival_s == 0)


def test_servegen_from_bundled_file_equals_default() -> None:
    default = build_workload("servegen", num_prompts=100, seed=3)
    explicit = build_workload("servegen", num_prompts=100, seed=3, dataset_path=BUNDLED_SERVEGEN)
    assert_same(default, explicit)


def test_reasoning_mix_and_lognormal() -> None:
    mix = build_workload("reasoning", num_prompts=4000)
    assert (mix.output_tokens > 5000).mean() == pytest.approx(0.45, abs=0.03)
    assert mix.input_tokens.min() >= 50
    assert mix.input_tokens.max() <= 150
    lognormal = build_workload(
        "reasoning", num_prompts=4000, random_output_len=5000, max_output_tokens=16384
    )
    assert lognormal.output_tokens.max() == 16384
    assert "lognormal" in lognormal.notes[0]


@pytest.mark.parametrize(
    ("dataset_name", "options", "words"),
    [
        ("sharegpt", {}, "--dataset-name 'sharegpt' is not one of: random, trace"),
        ("trace", {}, "needs --dataset-path"),
        ("trace", {"dataset_path": "azure_llm_2023_con"}, "did you mean azure_llm_2023_conv"),
        ("trace", {"dataset_path": "vidur_splitwise_conv", "num_prompts": 5000}, "--num-prompts"),
        ("servegen", {"random_input_len": 10}, "--random-input-len does not apply"),
        ("random", {"request_rate": -1.0}, "--request-rate"),
        ("random", {"burstiness": 0.0, "request_rate": 1.0}, "--burstiness"),
        ("reasoning", {"random_output_len": 10, "reasoning_long_fraction": 0.3}, "not both"),
        ("random", {"seed": -4}, "--seed"),
    ],
)
def test_bad_options_are_one_line_errors(
    dataset_name: str, options: dict[str, Any], words: str
) -> None:
    with pytest.raises(InferplanError) as info:
        build_workload(dataset_name, **options)
    assert words in str(info.value)
    assert "\n" not in str(info.value)
