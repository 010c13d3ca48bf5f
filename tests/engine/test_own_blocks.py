"""vLLM v1 re-hits a preempted request's own blocks (``workload/prefixes.py``
``with_own_blocks``, ``engine/session.py``): distinct prompts get block hashes of their own, so
a request preempted under a full pool recomputes only what was evicted meanwhile."""

from __future__ import annotations

import numpy as np

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.session import ServingOptions, simulate
from inferplan.metrics.summary import summarize
from inferplan.perf.factory import build_step_model
from inferplan.workload import build_workload
from inferplan.workload.prefixes import HASH_BLOCK_TOKENS, with_own_blocks


def test_own_blocks_are_distinct_and_cover_prompt_and_output() -> None:
    wl = build_workload("random", num_prompts=20, random_input_len=100, random_output_len=40)
    counted = with_own_blocks(wl)  # marked, not hashed: the engine counts them
    assert counted.own_blocks and counted.prefix_hashes is None
    assert counted.prefix_block_tokens == HASH_BLOCK_TOKENS and counted.prefix_hashes_cover_output
    assert with_own_blocks(counted) is counted
    own = with_own_blocks(wl, hashed=True)
    assert own.prefix_hashes is not None and own.prefix_hashes_cover_output
    assert own.prefix_block_tokens == HASH_BLOCK_TOKENS
    for i, ids in enumerate(own.prefix_hashes):
        total = int(wl.input_tokens[i] + wl.output_tokens[i])
        assert len(ids) == total // HASH_BLOCK_TOKENS
    every = [x for ids in own.prefix_hashes for x in ids]
    assert len(every) == len(set(every))  # no two requests share a block
    assert with_own_blocks(own) is own  # a workload's own hashes are kept


def _tight_run(prefix_caching: bool) -> dict[str, object]:
    """Long prompts on a pool of about two of them, all sent at once: vLLM v1 preempts."""
    # Qwen3-32B in BF16 on one A100: about 38,000 tokens of KV (GPUStack's `32000/100` run).
    plan = build_memory_plan(
        "Qwen3-32B", "a100_sxm_80gb", 1, 1, False, None, "auto", 32768, 0.9, 2048, 256, 16
    )
    assert 30_000 < plan.num_blocks * 16 < 50_000
    wl = build_workload("random", num_prompts=8, random_input_len=15000, random_output_len=300)
    options = ServingOptions(enable_prefix_caching=prefix_caching)
    result = simulate(plan, build_step_model(plan), wl, options)
    return summarize(result.records, result.itl, duration_s=result.duration_s)


def test_a_preempted_request_recomputes_less_when_its_blocks_are_cached() -> None:
    cached, uncached = _tight_run(True), _tight_run(False)
    assert uncached["num_preemptions"] and cached["num_preemptions"]
    assert cached["completed"] == uncached["completed"] == 8
    recomputed = np.array([cached["recomputed_tokens"], uncached["recomputed_tokens"]], dtype=float)
    assert recomputed[0] < 0.5 * recomputed[1]
    assert float(cached["duration"]) < float(uncached["duration"])  # type: ignore[arg-type]
    assert "prefix_cache_hit_rate" not in cached  # re-hits are not prefix reuse


def test_a_run_without_preemption_is_unchanged_by_its_own_blocks() -> None:
    plan = build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", 4096, 0.9, 8192, 1024, 16
    )
    wl = build_workload("random", num_prompts=50, random_input_len=500, request_rate=20.0)
    model = build_step_model(plan)
    runs = [
        simulate(plan, model, wl, ServingOptions(enable_prefix_caching=on)) for on in (True, False)
    ]
    with_cache, without = (summarize(r.records, r.itl, duration_s=r.duration_s) for r in runs)
    assert with_cache == without and not with_cache["num_preemptions"]
