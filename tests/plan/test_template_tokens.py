"""The prompt tokens vLLM's chat endpoint adds that ``vllm bench serve``'s client does not count
(plan/published_workload.py ``CHAT_TEMPLATE_TOKENS``, ``TEMPLATE_TOKENS_ON``; docs/validation.md
``vllm20``): the engine prefills them, the published ``total_token_throughput`` leaves them out."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inferplan.plan import published_workload
from inferplan.plan.published import PublishedRow, bundled_published
from inferplan.plan.published_runs import metric_values
from inferplan.plan.published_workload import run_workload, template_split, template_tokens


def _run(case: str, input_len: int, dataset: str = "random") -> list[PublishedRow]:
    rows = [
        r
        for r in bundled_published()
        if r.case_id == case and r.dataset == dataset and (r.input_len or 0) == input_len
    ]
    assert rows, case
    return rows


QWEN = "gpustack-qwen3-14b-a100-vllm-41b4af"  # Qwen3-14B, vLLM 0.11, /v1/chat/completions
GPT_OSS = "gpustack-gpt-oss-20b-h100-vllm-d37518"  # gpt-oss-20b: openai_harmony


def test_tokens_per_template_by_hand() -> None:
    qwen = _run(QWEN, 128)[0]
    oss = _run(GPT_OSS, 128)[0]
    # ChatML: <|im_start|> user \n | ... | <|im_end|> \n <|im_start|> assistant \n
    assert template_split(qwen, on=True) == (3, 5)
    assert template_tokens(qwen, on=True) == 8
    # harmony: the system message vLLM always sends and <|start|>user<|message|> (58 + 4 + 3),
    # then <|end|><|start|>assistant
    assert template_split(oss, on=True) == (63, 3)
    assert template_tokens(oss, on=True) == 66
    # the completions endpoint has no template; other engines are not this rule's
    completions = replace(qwen, settings={**qwen.settings, "endpoint": "openai /v1/completions"})
    assert template_tokens(completions, on=True) == 0
    assert template_tokens(replace(qwen, engine="sglang"), on=True) == 0
    # left off: nothing added, so validate is unchanged
    assert not published_workload.TEMPLATE_TOKENS_ON
    assert template_tokens(qwen) == 0


def test_engine_prefills_them_and_the_client_does_not_count_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = _run(QWEN, 128)
    mean_in = round(rows[0].input_len_mean or 0)  # 127.698 published: 128 a request
    off = run_workload(rows[0], quick=True)
    monkeypatch.setattr(published_workload, "TEMPLATE_TOKENS_ON", True)
    on = run_workload(rows[0], quick=True)
    assert np.all(off.input_tokens == mean_in)
    assert np.all(on.input_tokens == mean_in + 8)  # the engine's prompt
    np.testing.assert_array_equal(on.output_tokens, off.output_tokens)
    assert off.prefix_hashes is None
    # 3 leading tokens fill no 16-token block: nothing shared, each request's 8 blocks its own
    assert on.prefix_hashes is not None and len(set(on.prefix_hashes[0])) == (128 + 8) // 16
    assert not set(on.prefix_hashes[0]) & set(on.prefix_hashes[1])
    # A summary of the simulated run counts the engine's prompts: 2 req/s, 1,000 tok/s in all.
    summary: dict[str, object] = {"request_throughput": 2.0, "total_token_throughput": 1000.0}
    values = metric_values(rows, summary)
    # the client's total: 1,000 - 8 tokens x 2 req/s = 984 (a mis-signed rule gives 1,016)
    assert values["total_token_throughput"] == pytest.approx(984.0)
    assert values["request_throughput"] == pytest.approx(2.0)
    monkeypatch.setattr(published_workload, "TEMPLATE_TOKENS_ON", False)
    assert metric_values(rows, summary)["total_token_throughput"] == pytest.approx(1000.0)


def test_the_harmony_system_message_is_a_shared_cached_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = _run(GPT_OSS, 128)
    monkeypatch.setattr(published_workload, "TEMPLATE_TOKENS_ON", True)
    workload = run_workload(rows[0], quick=True)
    # 128 (127.755 published) + 63 + 3 = 194 tokens: 12 full blocks, the first 63 tokens' 3
    # full blocks the same in every request (vLLM's prefix cache holds them), the rest its own
    assert np.all(workload.input_tokens == 194)
    hashes = workload.prefix_hashes
    assert hashes is not None and all(len(h) == 12 for h in hashes)
    assert hashes[0][:3] == hashes[1][:3] == hashes[-1][:3]
    assert not set(hashes[0][3:]) & set(hashes[1][3:])


def test_max_tokens_cut_to_what_the_stated_context_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a stated ``max_model_len`` vLLM cuts ``max_tokens`` to the context the templated
    prompt leaves: leading + prompt + trailing + output fits it (review20: a mis-signed cut,
    ``stated + leading - inputs``, passed the other tests)."""
    row = _run(GPT_OSS, 128)[0]
    mean_in = round(row.input_len_mean or 0)
    mean_out = round(row.output_len_mean or 0)
    stated = 63 + mean_in + 3 + mean_out - 2  # two tokens short of the whole request (4 out)
    tight = replace(row, settings={**row.settings, "max_model_len": str(stated)})
    monkeypatch.setattr(published_workload, "TEMPLATE_TOKENS_ON", True)
    workload = run_workload(tight, quick=True)
    assert np.all(workload.output_tokens == mean_out - 2)
    assert np.all(workload.input_tokens + workload.output_tokens == stated)
