"""vLLM's FlashAttention-2 on Ampere: a decode row in a mixed step runs a whole 64-row query tile
per head; its Triton unified attention (sinks) re-loads K and V per program
(perf/vllm_attention.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.batch import StepBatch
from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.factory import build_step_model
from inferplan.perf.op import Op
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.step_seconds import StepSeconds
from inferplan.perf.vllm_attention import (
    FA2_SPLITKV_TILE_ROWS,
    query_group,
    runs_fa2_varlen,
    runs_triton_unified,
    triton_tile_rows,
    with_vllm_attention,
)
from inferplan.plan.served import served_efficiency
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism

MIXED = StepBatch(
    prefill_tokens=256,
    prefill_attention_pairs=256 * 257 / 2,
    num_prefill_seqs=1,
    num_decode_seqs=200,
    decode_context_tokens=200 * 600,
)
DECODE = StepBatch(num_decode_seqs=200, decode_context_tokens=200 * 600)


def _plan(model: str, gpu: str, tp: int = 1) -> MemoryPlan:
    return plan_memory(
        load_model(model), load_gpu(gpu), Parallelism(tp=tp), MemoryConfig(max_model_len=4096)
    )


def _model(plan: MemoryPlan, eff: Efficiency) -> RooflineModel:
    model = build_step_model(plan, efficiency=eff)
    assert isinstance(model, RooflineModel)
    return model


def _decode_op_flops(model: RooflineModel, batch: StepBatch) -> float:
    ops, _ = model._ops(batch)
    return sum(op.f1 * op.count for op in ops if op.name == "attn_decode")


def test_which_runs_take_fa2() -> None:
    assert runs_fa2_varlen(_plan("Qwen3-14B", "a100_sxm_80gb"))
    assert runs_fa2_varlen(_plan("Qwen3-14B", "l40s"))  # sm89: FA2 as well
    assert not runs_fa2_varlen(_plan("Qwen3-14B", "h100_sxm_80gb"))  # FA3 packs GQA
    assert not runs_fa2_varlen(_plan("gpt-oss-20b", "a100_sxm_80gb"))  # sinks: Triton
    a100 = _plan("Qwen3-14B", "a100_sxm_80gb")
    assert served_efficiency(efficiency_for(a100.gpu), a100, "vllm").mixed_decode_rows == 64
    for engine in ("sglang", "trtllm"):
        assert served_efficiency(efficiency_for(a100.gpu), a100, engine).mixed_decode_rows == 1
    h100 = _plan("Qwen3-14B", "h100_sxm_80gb")
    assert served_efficiency(efficiency_for(h100.gpu), h100, "vllm").mixed_decode_rows == 1


def test_mixed_decode_rows_run_a_whole_tile() -> None:
    plan = _plan("Qwen3-14B", "a100_sxm_80gb")
    base = efficiency_for(plan.gpu)
    fa2 = with_vllm_attention(base, plan)
    assert FA2_SPLITKV_TILE_ROWS == 64
    plain, tiled = _model(plan, base), _model(plan, fa2)
    # A mixed step's decode FLOPs per context token: 64 rows per query head, not one.
    assert _decode_op_flops(tiled, MIXED) == pytest.approx(64 * _decode_op_flops(plain, MIXED))
    # A pure-decode step (FA2 folds a KV head's query heads into one tile) is unchanged.
    assert _decode_op_flops(tiled, DECODE) == _decode_op_flops(plain, DECODE)
    assert tiled.step_time(DECODE).total_s == plain.step_time(DECODE).total_s
    # On A100 the tiled decode rows are compute-bound: the mixed step takes longer, by about
    # the tile's FLOPs at the attention rate (40 heads x 128 x 4 x 64 per context token, 40 layers).
    extra = tiled.step_time(MIXED).total_s - plain.step_time(MIXED).total_s
    rate = plan.gpu.peak("bf16") * base.attention_compute
    tile_s = 4 * 64 * 128 * 40 * 40 * 200 * 600 / rate
    assert 0.5 * tile_s < extra < tile_s


def test_default_rows_change_nothing_and_plans_agree() -> None:
    plan = _plan("Qwen3-14B", "a100_sxm_80gb")
    base = efficiency_for(plan.gpu)
    assert base.mixed_decode_rows == 1
    # The engine's cached step plans give the model's seconds with the tile on, a pure-decode
    # step of the same decode rows planned first (its decode piece must not stand in).
    tiled = _model(plan, with_vllm_attention(base, plan))
    seconds = StepSeconds(tiled)
    assert seconds(DECODE) == tiled.step_time(DECODE).total_s
    for ctx in (200 * 300, 200 * 600, 200 * 2000):
        batch = replace(MIXED, decode_context_tokens=ctx)
        assert seconds(batch) == tiled.step_time(batch).total_s


def test_verify_steps_and_window_layers_run_a_whole_tile_without_a_prefill() -> None:
    """FA2 folds a KV head's query heads into one tile only for one query row per sequence and
    no window: a speculative verify step and gemma-3's sliding-window layers run the tile's
    rows per query head in pure-decode steps too."""
    plan = _plan("Qwen3-14B", "a100_sxm_80gb")
    base = efficiency_for(plan.gpu)
    plain, tiled = _model(plan, base), _model(plan, with_vllm_attention(base, plan))
    verify = replace(DECODE, num_draft_tokens=3)
    assert _decode_op_flops(tiled, verify) == pytest.approx(
        64 / 4 * _decode_op_flops(plain, verify)
    )
    gemma = _plan("gemma-3-27b-it", "a100_sxm_80gb", tp=2)
    assert runs_fa2_varlen(gemma)
    gemma_eff = efficiency_for(gemma.gpu)
    g_plain, g_tiled = (
        _model(gemma, gemma_eff),
        _model(gemma, with_vllm_attention(gemma_eff, gemma)),
    )
    local: dict[int, Op] = {}
    full: dict[int, Op] = {}
    for model, out in ((g_plain, local), (g_tiled, full)):
        ops, _ = model._ops(DECODE)
        out.update({i: op for i, op in enumerate(ops) if op.name == "attn_decode"})
    moved = [i for i in local if full[i] != local[i]]
    assert moved and len(moved) < len(local)  # the windowed groups only, not the global ones


def test_an_fp8_kv_cache_takes_another_backend() -> None:
    plan = plan_memory(
        load_model("Qwen3-14B"),
        load_gpu("a100_sxm_80gb"),
        Parallelism(tp=1),
        MemoryConfig(max_model_len=4096, kv_cache_dtype="fp8"),
    )
    assert not runs_fa2_varlen(plan)


def test_which_runs_take_triton_unified_attention() -> None:
    assert runs_triton_unified(_plan("gpt-oss-20b", "a100_sxm_80gb"))  # sinks on sm80
    assert runs_triton_unified(_plan("gpt-oss-20b", "l40s"))  # and on sm89
    assert not runs_triton_unified(_plan("gpt-oss-20b", "h100_sxm_80gb"))  # FA3 has sinks
    assert not runs_triton_unified(_plan("Qwen3-14B", "a100_sxm_80gb"))  # no sinks: FA2


def test_triton_tile_rows_and_query_groups() -> None:
    # BLOCK_M: 16 rows, or the group's next power of two where the group is larger.
    assert [triton_tile_rows(g) for g in (1, 8, 16, 17, 32, 33)] == [16, 16, 16, 32, 32, 64]
    assert query_group(_plan("gpt-oss-20b", "a100_sxm_80gb")) == 8  # 64 query on 8 KV heads
    assert query_group(_plan("gpt-oss-120b", "a100_sxm_80gb", 2)) == 8  # 32 on 4 per rank
    assert query_group(_plan("Qwen3-14B", "a100_sxm_80gb")) == 5  # 40 on 8


def test_triton_prefill_runs_at_its_loads_rate() -> None:
    plan = _plan("gpt-oss-20b", "a100_sxm_80gb")
    family = efficiency_for(plan.gpu)
    vllm = served_efficiency(family, plan, "vllm")
    # 16 rows x 2 FLOPs per K/V byte (BF16) at 2,039 GB/s x the family's KV-read share over
    # 312 TFLOP/s: 0.0784 at Ampere's 0.7495 of session 11, 0.0813 at trtp91's 0.7771.
    kv_read = family.attention_memory
    assert 0.5 < kv_read <= 1.0
    assert vllm.attention_compute == pytest.approx(16 * 2039e9 * kv_read / 312e12, rel=1e-4)
    assert 0.06 < vllm.attention_compute < 0.1  # far below FA2's 0.55
    assert vllm.mixed_decode_rows == 1 and vllm.attention_memory == family.attention_memory
    for engine in ("sglang", "trtllm"):  # other engines' kernels are not vLLM's
        assert served_efficiency(family, plan, engine).attention_compute == 0.55
    h100 = _plan("gpt-oss-20b", "h100_sxm_80gb")
    hopper = efficiency_for(h100.gpu)
    assert served_efficiency(hopper, h100, "vllm").attention_compute == hopper.attention_compute
    # An FP8 KV cache halves the bytes a program loads: twice the FLOPs per byte.
    fp8 = plan_memory(
        load_model("gpt-oss-20b"),
        load_gpu("a100_sxm_80gb"),
        Parallelism(tp=1),
        MemoryConfig(max_model_len=4096, kv_cache_dtype="fp8"),
    )
    assert with_vllm_attention(family, fp8).attention_compute == pytest.approx(
        2 * vllm.attention_compute
    )


def test_triton_prefill_time_is_the_reloaded_kv_at_the_read_rate() -> None:
    """A full-attention layer's prefill: its FLOP time equals the K and V each 2-token query
    block loads over its causal span, at the KV-read rate; decode rows stay memory-bound."""
    plan = _plan("gpt-oss-20b", "a100_sxm_80gb")
    eff = served_efficiency(efficiency_for(plan.gpu), plan, "vllm")
    chunk, cached = 2048, 16000
    pairs = chunk * cached + chunk * (chunk + 1) / 2
    batch = StepBatch(
        prefill_tokens=chunk,
        prefill_attention_pairs=pairs,
        prefill_context_tokens=cached,
        num_prefill_seqs=1,
        num_decode_seqs=8,
        decode_context_tokens=8 * 20000,
    )
    ops, _ = _model(plan, eff)._ops(batch)
    prefill = [op for op in ops if op.name == "attn_prefill"]
    full = [op for op in prefill if op.f0 == pytest.approx(16384 * pairs)]
    assert len(full) == 1 < len(prefill)  # 4 x 64 heads x 64 dims a pair; windows: fewer
    block_q = 16 // 8  # query tokens a program holds
    loads = pairs / block_q * 8 * 2 * 64 * 2  # 8 KV heads' K and V, BF16
    kv_read = 2039e9 * efficiency_for(plan.gpu).attention_memory  # the family's KV-read rate
    assert full[0].f0 / full[0].flops_s == pytest.approx(loads / kv_read, rel=1e-4)
    decode = [op for op in ops if op.name == "attn_decode"]
    assert decode
    for op in decode:  # fixed and per-context-token parts: the bytes bound
        assert op.f0 / op.flops_s < op.b0 / op.bytes_s
        assert op.f1 / op.flops_s <= op.b1 / op.bytes_s
