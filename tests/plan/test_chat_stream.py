"""SGLang's and vLLM's chat streams as ``vllm bench serve`` times them (plan/chat_stream.py): a
role chunk (and SGLang's finish chunk) per request add ITL gaps of about zero; TPOT and TTFT do
not see them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.frontend import FrontEnd
from inferplan.engine.session import ServingOptions, simulate
from inferplan.metrics.histogram import ItlHistogram
from inferplan.perf.factory import build_step_model
from inferplan.plan.chat_stream import (
    SGLANG_EMPTY_CHUNKS,
    VLLM_EMPTY_CHUNKS,
    empty_chunks,
    with_empty_chunks,
)
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import served_summary
from inferplan.workload.request import Workload


def test_two_zero_gaps_per_request_make_the_mean_three_fifths_at_four_tokens() -> None:
    itl = ItlHistogram()
    itl.add(0.1, 3.0)  # one request of 4 tokens: 3 gaps of 100 ms
    seen = with_empty_chunks(itl, 1, 2)
    assert seen.mean() == pytest.approx(0.3 / 5)  # published ITL mean / TPOT = 0.600
    assert seen.total_weight == 5.0
    assert itl.mean() == pytest.approx(0.1) and itl.total_weight == 3.0  # left as it was
    assert with_empty_chunks(itl, 1, 0) is itl


def test_only_sglang_chat_rows_count_empty_chunks() -> None:
    rows = bundled_published()
    sglang = next(r for r in rows if r.engine == "sglang" and r.case_id.startswith("gpustack"))
    assert sglang.settings["endpoint"].startswith("openai-chat")
    assert empty_chunks(sglang) == SGLANG_EMPTY_CHUNKS == 2
    settings = {**sglang.settings, "endpoint": "openai /v1/completions"}
    completions = replace(sglang, settings=settings)
    assert empty_chunks(completions) == 0
    trtllm = next(r for r in rows if r.engine == "tensorrt-llm" and "endpoint" in r.settings)
    assert trtllm.settings["endpoint"].startswith("openai-chat")
    assert empty_chunks(trtllm) == 0  # trtllm-serve's role chunk is left to its own fit


def test_vllm_chat_rows_count_one_empty_chunk_and_harmony_models_none() -> None:
    """vLLM sends a role chunk before the first token's (one zero gap: ITL mean / TPOT mean is
    0.750 on its 128/4 runs); gpt-oss's harmony stream skips its header tokens instead."""
    rows = [r for r in bundled_published() if r.engine == "vllm" and "endpoint" in r.settings]
    qwen = next(r for r in rows if r.model == "Qwen/Qwen3-14B")
    oss = next(r for r in rows if r.model == "openai/gpt-oss-20b")
    assert qwen.settings["endpoint"].startswith("openai-chat")
    assert empty_chunks(qwen) == VLLM_EMPTY_CHUNKS == 1
    assert empty_chunks(oss) == 0
    completions = replace(qwen, settings={**qwen.settings, "endpoint": "openai /v1/completions"})
    assert empty_chunks(completions) == 0


def test_served_itl_mean_counts_the_empty_chunks_and_tpot_does_not() -> None:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", 4096, 0.9, 8192, 1024, 16
    )
    num = 8
    workload = Workload(
        arrival_s=np.arange(num, dtype=np.float64) * 0.5,  # one at a time: no batching
        input_tokens=np.full(num, 128, dtype=np.int64),
        output_tokens=np.full(num, 4, dtype=np.int64),
        class_ids=np.zeros(num, dtype=np.int64),
        source="test",
    )
    result = simulate(plan, build_step_model(plan), workload, ServingOptions(engine="sglang"))
    plain = served_summary(result, FrontEnd())
    chat = served_summary(result, FrontEnd(), 2)
    assert plain["completed"] == chat["completed"] == num
    # 3 token gaps per request and 2 empty chunks: the mean is 3/5 of the token gaps'
    plain_itl, chat_itl = plain["mean_itl_ms"], chat["mean_itl_ms"]
    assert isinstance(plain_itl, float) and isinstance(chat_itl, float)
    assert chat_itl == pytest.approx(plain_itl * 3 / 5, rel=1e-9)
    assert chat["mean_tpot_ms"] == plain["mean_tpot_ms"]
    assert chat["mean_ttft_ms"] == plain["mean_ttft_ms"]
