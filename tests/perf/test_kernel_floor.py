"""A kernel's shortest time (``perf/kernel_floor.py``): launches counted from a layer's structure,
each operator at least its launches times the floor, large steps and the decode line unchanged."""

from __future__ import annotations

import pytest

from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.perf.kernel_floor import (
    SERVED_KERNEL_FLOOR_S,
    elementwise_kernels,
    ffn_kernels,
    floored,
    projection_kernels,
)
from inferplan.perf.op import Op
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.served import served_graphs
from perf.perf_helpers import assert_line_matches, decode, prefill, roofline, spec_of, tp_plan
from perf.test_roofline import BW, LAYERS, toy_model


def test_an_operator_below_its_floor_reads_for_the_floor_and_one_above_is_kept() -> None:
    op = Op("mlp", 2e6, 0.0, 1e6, 0.0, 1e13, 1e12, count=2)  # 1 us of reads a layer
    low = floored(op, 3, 1e-6)  # 3 launches of 1 us: 3e6 bytes' worth at 1e12 B/s
    assert (low.b0, low.f0, low.count, low.name) == (3e6, 2e6, 2, "mlp")
    assert low.terms(0.0) == pytest.approx((2 * 2e6 / 1e13, 2 * 3e-6))
    assert floored(op, 1, 1e-6) is op  # exactly at its floor
    assert floored(op, 3, 0.0) is op and floored(op, 0, 1e-6) is op


def test_launches_follow_each_layer_structure() -> None:
    mla = spec_of("DeepSeek-V3").layers[-1]  # a MoE layer with a query LoRA
    gqa = spec_of("Llama-3.1-8B").layers[0]
    assert (projection_kernels(mla.attention), projection_kernels(gqa.attention)) == (5, 2)
    assert (elementwise_kernels(mla.attention), elementwise_kernels(gqa.attention)) == (6, 4)
    names = ("router", "experts", "shared_experts")
    assert [ffn_kernels(mla.ffn, n) for n in names] == [2, 5, 3]
    assert ffn_kernels(gqa.ffn, "mlp") == 3


def test_a_toy_decode_step_pays_each_launch_at_a_huge_floor() -> None:
    """Every operator of the toy's two layers under a 1 ms floor: qkv and o (2), norms, rotary
    and KV write (4), the MLP (3) and the decode kernel (1, its KV stream on top)."""
    floor, context = 1e-3, 100
    model = toy_model()
    model.set_kernel_floor(floor)
    step = model.step_time(decode(1, context))
    ops = step.by_operator_s
    assert ops["attn_proj"] == pytest.approx(LAYERS * 2 * floor)
    assert ops["elementwise"] == pytest.approx(LAYERS * 4 * floor)
    assert ops["mlp"] == pytest.approx(LAYERS * 3 * floor)
    kv = 2 * 2 * 16 * 2  # K and V, 2 KV heads of 16, bf16: bytes a token and layer
    assert ops["attn_decode"] == pytest.approx(LAYERS * (floor + kv * context / BW))
    plain = toy_model().step_time(decode(1, context)).by_operator_s
    assert ops["lm_head"] == plain["lm_head"]  # once a step, not a layer's launch


def floored_model(name: str, floor: float, **kwargs: int | bool) -> RooflineModel:
    model = roofline.__wrapped__(name, "h200", **kwargs)  # a fresh model, not the cached one
    model.set_kernel_floor(floor)
    return model


def test_deepseek_small_decode_pays_the_floor_and_a_long_prefill_does_not() -> None:
    plain = roofline("DeepSeek-V3", "h200", tp=8)
    model = floored_model("DeepSeek-V3", SERVED_KERNEL_FLOOR_S, tp=8)
    small = model.step_time(decode(4, 1600)).total_s - plain.step_time(decode(4, 1600)).total_s
    # 10 to 30 of a layer's ~23 launches under their floors at 4 rows, over 61 layers
    assert 61 * 10 * SERVED_KERNEL_FLOOR_S < small < 61 * 30 * SERVED_KERNEL_FLOOR_S
    big = prefill(8192)
    assert model.step_time(big).total_s == plain.step_time(big).total_s


def test_decode_line_stays_affine_under_the_floor() -> None:
    model = floored_model("DeepSeek-V3", SERVED_KERNEL_FLOOR_S, tp=8)
    for num_seqs in (1, 4, 64):
        assert_line_matches(model, num_seqs, num_seqs * 500)
    mixed = StepBatch(num_decode_seqs=4, decode_context_tokens=4000, prefill_tokens=100)
    a, b, _ = model.batch_line(mixed)
    assert a + b * 4000 == pytest.approx(model.step_time(mixed).total_s, rel=1e-9)


def test_a_served_pytorch_runtime_pays_the_floor_and_the_cpp_engine_does_not() -> None:
    """``served_graphs``: vLLM's and ``trtllm-serve``'s graphs set the floor; TensorRT-LLM's C++
    engines (no engine graphs) keep the plain roofline, whose small decode is faster."""
    plan = tp_plan("Llama-3.1-8B", "h100", 1)
    assert SERVED_KERNEL_FLOOR_S > 0
    times = {}
    for engine, version in (("vllm", ""), ("trtllm", "1.0.0"), ("trtllm", "0.14.0")):
        model = build_step_model(plan)
        assert isinstance(model, RooflineModel)
        model.graphs = served_graphs(plan, engine, version)
        times[version or engine] = model.step_time(decode(1, 500)).total_s
        floor = SERVED_KERNEL_FLOOR_S if model.graphs is not None else 0.0
        assert model.kernel_floor_s == model.attention_pieces.floor_s == floor
        assert (model.graphs is None) == (version == "0.14.0")  # 0.14: the C++ engine flow
    plain = build_step_model(plan).step_time(decode(1, 500)).total_s
    assert times["0.14.0"] == plain < min(times["vllm"], times["1.0.0"])
