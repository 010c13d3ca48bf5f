"""How published rows map to runs where issue 11 widened coverage: TensorRT-LLM servers with
chunked prefill, and accelerators the table names but the catalog leaves out."""

from inferplan.plan.published import bundled_published, skip_reason
from inferplan.plan.published_runs import run_setup
from inferplan.plan.trtllm_serve import chunked_prefill


def test_trtllm_chunked_prefill_runs_chunk_prompts_longer_than_the_budget() -> None:
    """GPUStack's trtllm-serve of Qwen3-32B (``enable_chunked_prefill=true``) ran 32,000-token
    prompts with the default 8,192-token budget: they run in chunks
    (``TrtllmChunkedScheduler``; ``tests/plan/test_trtllm_serve.py`` simulates one), so the budget
    stays the default. Runs that do not state chunked prefill do not chunk."""
    rows = bundled_published()
    long_prompt = next(
        r
        for r in rows
        if r.engine == "tensorrt-llm" and r.input_len == 32000 and r.case_id.startswith("gpustack")
    )
    assert long_prompt.settings["enable_chunked_prefill"] == "true"
    assert chunked_prefill(long_prompt)
    assert run_setup(long_prompt).memory.max_num_batched_tokens == 8192
    short = next(
        r
        for r in rows
        if r.engine == "tensorrt-llm" and r.case_id == long_prompt.case_id and r.input_len == 2000
    )
    assert run_setup(short).memory.max_num_batched_tokens == 8192
    unchunked = next(
        r
        for r in rows
        if r.engine == "tensorrt-llm"
        and r.case_id.startswith("gpustack")
        and "enable_chunked_prefill" not in r.settings
    )
    assert run_setup(unchunked).memory.max_num_batched_tokens == 8192
    assert not chunked_prefill(unchunked)


def test_new_catalog_entries_are_predicted_and_ascend_says_why_not() -> None:
    rows = bundled_published()
    for gpu in ("gh200", "b300", "gb300", "rtx_pro_6000"):
        assert any(r.gpu == gpu and skip_reason(r) is None for r in rows), gpu
    for model in ("zai-org/GLM-4.5-Air", "zai-org/GLM-4.6-FP8", "zai-org/GLM-4.6"):
        assert any(r.model == model and skip_reason(r) is None for r in rows), model
    ascend = next(r for r in rows if r.gpu == "ascend_910b")
    reason = skip_reason(ascend)
    assert reason is not None and "Ascend 910B" in reason and "datasheet" in reason


def test_copied_glm_h100_block_is_skipped_with_its_reason() -> None:
    """GPUStack's GLM-4.5-Air H100 page repeats the A100 page's 'Other Benchmark Cases' block;
    those rows say so, while the page's own ShareGPT runs are still predicted."""
    rows = [r for r in bundled_published() if r.case_id.startswith("gpustack-glm-4.5-air-h100")]
    copied = [r for r in rows if r.dataset == "random"]
    assert len(copied) == 96
    assert all("repeats a100.md" in (skip_reason(r) or "") for r in copied)
    assert all(skip_reason(r) is None for r in rows if r.dataset == "sharegpt")
    a100 = [r for r in bundled_published() if r.case_id.startswith("gpustack-glm-4.5-air-a100")]
    assert all(skip_reason(r) is None for r in a100)
