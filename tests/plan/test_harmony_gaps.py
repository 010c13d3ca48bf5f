"""vLLM's harmony stream (gpt-oss) merges a request's first token gaps into one ITL sample
(plan/chat_stream.py ``with_merged_gaps``), and every engine's ShareGPT runs are drawn at the
means they published (plan/sharegpt.py, plan/published_workload.py ``run_workload``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inferplan.engine.frontend import FrontEndTimes
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.plan.chat_stream import HARMONY_MERGED_GAPS, merged_gaps, with_merged_gaps
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import _per_sample_shift
from inferplan.plan.published_workload import run_workload


def _records(outputs: list[int]) -> RequestRecords:
    records = RequestRecords.empty(len(outputs))
    records.output_tokens[:] = outputs
    records.status[:] = int(RequestStatus.COMPLETED)
    return records


def test_two_merged_gaps_make_the_mean_three_halves_and_the_p99_two_steps() -> None:
    itl = ItlHistogram()
    itl.add(0.1, 30.0)  # ten requests of 4 tokens: 3 gaps of 100 ms each
    seen = with_merged_gaps(itl, _records([4] * 10), HARMONY_MERGED_GAPS)
    assert seen.total_weight == pytest.approx(20.0)  # 2 samples a request, not 3
    assert seen.mean() == pytest.approx(0.15)  # published 128/4 ITL mean / TPOT: 1.50-1.61
    assert seen.quantile(0.99) == pytest.approx(0.2, rel=5e-3)  # p99 = twice the median
    assert seen.quantile(0.25) == pytest.approx(0.1, rel=5e-3)
    assert itl.total_weight == 30.0 and itl.mean() == pytest.approx(0.1)  # left as it was
    assert with_merged_gaps(itl, _records([4] * 10), 0) is itl
    assert with_merged_gaps(itl, _records([2] * 10), 2) is itl  # one gap: nothing to merge


def test_scaled_keeps_the_distribution_and_scales_the_weight() -> None:
    itl = ItlHistogram()
    itl.add_many(np.array([0.01, 0.02, 0.03, 0.04]), 3.0)
    half = itl.scaled(0.5)
    assert half.total_weight == pytest.approx(6.0)
    assert half.mean() == pytest.approx(itl.mean())
    assert half.std() == pytest.approx(itl.std())
    assert half.quantile(0.5) == pytest.approx(itl.quantile(0.5), rel=5e-3)
    with pytest.raises(ValueError):
        itl.scaled(0.0)


def test_only_vllm_harmony_chat_rows_merge_gaps() -> None:
    rows = [r for r in bundled_published() if "endpoint" in r.settings]
    oss = next(r for r in rows if r.engine == "vllm" and r.model == "openai/gpt-oss-20b")
    qwen = next(r for r in rows if r.engine == "vllm" and r.model == "Qwen/Qwen3-14B")
    sglang_oss = next(r for r in rows if r.engine == "sglang" and "gpt-oss" in r.model)
    assert merged_gaps(oss) == HARMONY_MERGED_GAPS == 2
    assert merged_gaps(qwen) == 0
    assert merged_gaps(sglang_oss) == 0
    completions = replace(oss, settings={**oss.settings, "endpoint": "openai /v1/completions"})
    assert merged_gaps(completions) == 0


def test_every_engines_sharegpt_runs_send_the_published_means() -> None:
    rows = [r for r in bundled_published() if r.dataset == "sharegpt"]
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        row = next(r for r in rows if r.engine == engine and r.output_len_mean)
        workload = run_workload(row, quick=False)
        assert workload.output_tokens.mean() == pytest.approx(row.output_len_mean, abs=0.6)
        assert workload.input_tokens.mean() == pytest.approx(row.input_len_mean, abs=0.6)


def test_a_merged_sample_moves_by_the_sum_of_its_gaps_shifts() -> None:
    # The front end moves each evenly spread token gap by after - before (here -10 ms); a
    # harmony sample of 1.5 gaps on average moves by 1.5 times that: the client's mean is 1.5
    # times the mean gap it sees, as in simulate's unmerged stream.
    times = FrontEndTimes(
        np.zeros(1),
        np.ones(1),
        {"mean": 0.100, "median": 0.080, "p99": 0.300},
        {"mean": 0.090, "median": 0.080, "p99": 0.320},
    )
    scaled = _per_sample_shift(times, 1.5)
    assert scaled.itl_before_s == times.itl_before_s
    assert scaled.itl_after_s["mean"] == pytest.approx(0.085)
    assert scaled.itl_after_s["median"] == pytest.approx(0.080)
    assert scaled.itl_after_s["p99"] == pytest.approx(0.330)
    assert _per_sample_shift(times, 1.0).itl_after_s == pytest.approx(times.itl_after_s)
