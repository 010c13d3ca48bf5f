"""What the profiler times, without torch: each operator's per-rank shapes agree with the
roofline's parameter counts, tiny shapes stay under their caps, and the grid covers the
deployment's limits."""

from __future__ import annotations

import dataclasses

import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.roofline import RooflineModel
from inferplan.profile.grid import TINY_GRID, full_grid
from inferplan.profile.shapes import (
    TINY,
    Attention,
    Experts,
    Gemm,
    SwiGlu,
    profile_shapes,
    weighted_kinds,
)


def plan_of(model: str, tp: int = 1, ep: bool = False) -> MemoryPlan:
    return build_memory_plan(model, "h100", tp, 1, ep, None, "auto", None, 0.9, None, None, None)


def roofline_of(plan: MemoryPlan) -> RooflineModel:
    return RooflineModel(
        plan.spec,
        plan.gpu,
        plan.parallelism,
        plan.weight_formats,
        plan.kv_format,
        efficiency_for(plan.gpu),
    )


@pytest.mark.parametrize(
    ("model", "tp"), [("Llama-3.1-8B", 1), ("Llama-3.1-70B", 8), ("DeepSeek-V3", 8)]
)
def test_projection_gemms_hold_the_roofline_attention_weights(model: str, tp: int) -> None:
    plan = plan_of(model, tp)
    shapes, roofline = profile_shapes(plan, tiny=False), roofline_of(plan)
    for kind, group in zip(shapes.kinds, roofline.groups, strict=True):
        params = sum(g.k * g.n for g in kind.attn_proj)
        assert params == group.attn_linear_params
    assert shapes.lm_head.k * shapes.lm_head.n == roofline.head_params


def test_dense_and_moe_widths_are_split_as_the_roofline_splits_them() -> None:
    llama = profile_shapes(plan_of("Llama-3.1-70B", tp=4), tiny=False).kinds[0]
    assert llama.mlp == SwiGlu(8192, 28672 // 4)
    assert llama.attention is not None
    assert (llama.attention.num_heads, llama.attention.num_kv_heads) == (64 // 4, 8 // 4)
    sharded = profile_shapes(plan_of("Qwen3-30B-A3B", tp=4), tiny=False).kinds[0].experts
    assert sharded == Experts(2048, 768 // 4, 128, 128, 8, 1)
    whole = profile_shapes(plan_of("Qwen3-30B-A3B", tp=4, ep=True), tiny=False).kinds[0].experts
    assert whole == Experts(2048, 768, 128 // 4, 128, 8, 4)


def test_mixed_stacks_weight_each_operator_by_the_layers_that_run_it() -> None:
    deepseek = profile_shapes(plan_of("DeepSeek-V3", tp=8), tiny=False)
    assert list(weighted_kinds(deepseek, "mlp").values()) == [3]
    assert list(weighted_kinds(deepseek, "experts").values()) == [58]
    assert list(weighted_kinds(deepseek, "attn_proj").values()) == [61]  # one shape
    gpt_oss = profile_shapes(plan_of("gpt-oss-20b"), tiny=False)
    decode = weighted_kinds(gpt_oss, "attn_decode")
    windows = {a.window_tokens: n for a, n in decode.items() if isinstance(a, Attention)}
    assert windows == {128: 12, None: 12}
    hybrid = profile_shapes(plan_of("Qwen3-Next-80B-A3B-Thinking"), tiny=False)
    assert sum(weighted_kinds(hybrid, "attn_decode").values()) == 12  # linear layers have none
    assert sum(weighted_kinds(hybrid, "attn_proj").values()) == 48


def test_mla_decodes_over_the_latent_and_prefills_expanded() -> None:
    kind = profile_shapes(plan_of("DeepSeek-V3", tp=8), tiny=False).kinds[0]
    att = kind.attention
    assert att is not None
    assert (att.decode_kv_heads, att.decode_k_dim, att.decode_v_dim) == (1, 512 + 64, 512)
    assert (att.num_kv_heads, att.head_dim, att.v_head_dim) == (128 // 8, 192, 192)  # V padded
    assert att.up_proj == Gemm(512, 128 // 8 * (128 + 128))


@pytest.mark.parametrize(
    "model", ["Llama-3.1-8B", "DeepSeek-V3", "gpt-oss-20b", "Qwen3-Next-80B-A3B-Thinking"]
)
def test_tiny_shapes_stay_under_their_caps(model: str) -> None:
    shapes = profile_shapes(plan_of(model), tiny=True)
    assert shapes.is_tiny and shapes.hidden <= TINY.hidden and shapes.lm_head.n <= TINY.vocab
    for kind in shapes.kinds:
        for gemm in kind.attn_proj:
            assert max(gemm.k, gemm.n) <= 4 * TINY.width
        att = kind.attention
        if isinstance(att, Attention):
            assert att.num_heads <= TINY.heads and att.num_heads % att.num_kv_heads == 0
            assert max(att.head_dim, att.v_head_dim) <= TINY.head_dim
        for block in (kind.mlp, kind.shared_experts, kind.experts):
            if block is not None:
                assert dataclasses.asdict(block)["width"] <= TINY.width
        if kind.experts is not None:
            assert kind.experts.num_experts <= TINY.experts
            assert kind.experts.top_k <= TINY.top_k


def test_uniform_routing_spreads_assignments_over_the_touched_experts() -> None:
    experts = Experts(hidden=64, width=64, num_local=128, num_experts=128, top_k=8, ep=1)
    assert experts.routed(1) == (8, 1)
    used, rows = experts.routed(8192)
    assert used == 128 and rows == 8192 * 8 // 128
    split = Experts(hidden=64, width=64, num_local=32, num_experts=128, top_k=8, ep=4)
    used, rows = split.routed(8192)
    assert used == 32 and rows == 8192 * 8 // 128


def test_the_full_grid_reaches_the_deployment_limits() -> None:
    plan = plan_of("Llama-3.1-8B")
    grid, cfg = full_grid(plan), plan.config
    assert grid.tokens[0] == 1 and grid.tokens[-1] == cfg.max_num_batched_tokens
    assert grid.decode_batches[-1] == grid.logit_tokens[-1] == cfg.max_num_seqs
    assert grid.decode_contexts[-1] == plan.max_model_len
    assert grid.prefill_chunks[-1] == cfg.max_num_batched_tokens
    assert all(q + o <= plan.max_model_len for q, o in grid.prefill_points(plan.max_model_len))
    assert list(TINY_GRID.prefill_points(100)) == [(16, 0), (64, 0)]
