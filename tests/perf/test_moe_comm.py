"""An expert-parallel MoE layer's exchange: all-to-all (each token to the ranks that hold its
experts) or all-gather + reduce-scatter (every token to every rank, the full output back), and
which one TensorRT-LLM's PyTorch backend runs (``select_alltoall_method_type``)."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import weight_formats_for
from inferplan.perf.comm import allgather_s, reducescatter_s
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.moe import Routing
from inferplan.perf.moe_comm import gathered_bytes_per_value, moe_exchange_s, trtllm_moe_exchange
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.dtypes import WEIGHT_FORMATS, kv_format
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism

from .perf_helpers import decode, spec_of, toy_gpu, unit_efficiency

GPU = toy_gpu(scale_up_bytes_s=1e11, scale_up_domain_size=8)
DEP4 = Parallelism(tp=1, dp=4, enable_expert_parallel=True)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_allgather_and_reducescatter_move_p_minus_1_over_p_of_the_buffer(ranks: int) -> None:
    eff = unit_efficiency(collective_latency_s=1e-5, collective_bandwidth=0.5)
    wire = (ranks - 1) / ranks * 8e6
    assert allgather_s(8e6, ranks, GPU, eff) == pytest.approx(1e-5 + wire / 5e10)
    assert reducescatter_s(8e6, ranks, GPU, eff) == pytest.approx(1e-5 + wire / 5e10)
    assert allgather_s(8e6, 1, GPU, eff) == reducescatter_s(0.0, ranks, GPU, eff) == 0.0


def test_the_gather_carries_the_experts_input_format() -> None:
    assert gathered_bytes_per_value(WEIGHT_FORMATS["fp8"]) == 1.0
    assert gathered_bytes_per_value(WEIGHT_FORMATS["nvfp4"]) == pytest.approx(0.5625)
    assert gathered_bytes_per_value(WEIGHT_FORMATS["bf16"]) == 2.0
    assert gathered_bytes_per_value(WEIGHT_FORMATS["int4"]) == 2.0  # W4A16: BF16 activations


def test_allgather_exchange_by_hand() -> None:
    """1,000 tokens x 4,096 values over 4 ranks, FP8 experts: each rank receives 3/4 of the
    1-byte gather and sends 3/4 of the 2-byte output; no dependence on the dispatch hit."""
    eff = unit_efficiency()
    values = 1000 * 4096
    fp8 = WEIGHT_FORMATS["fp8"]
    expected = 0.75 * values * 1.0 / 1e11 + 0.75 * values * 2.0 / 1e11
    for hit in (0.3, 1.0):
        assert moe_exchange_s("allgather", values, hit, DEP4, fp8, GPU, eff) == pytest.approx(
            expected
        )
    # The all-to-all sends each token to the ranks it picks: 2 x 3/4 x hit x 2 bytes.
    assert moe_exchange_s("alltoall", values, 0.5, DEP4, fp8, GPU, eff) == pytest.approx(
        2 * 0.75 * values * 0.5 * 2.0 / 1e11
    )


def test_without_attention_dp_there_is_nothing_to_gather() -> None:
    eff = unit_efficiency()
    tp_ep = Parallelism(tp=4, enable_expert_parallel=True)
    bf16 = WEIGHT_FORMATS["bf16"]
    assert moe_exchange_s("allgather", 4e6, 0.6, tp_ep, bf16, GPU, eff) == moe_exchange_s(
        "alltoall", 4e6, 0.6, tp_ep, bf16, GPU, eff
    )


@pytest.mark.parametrize(
    ("gpu", "dp", "top_k", "expected"),
    [
        ("h100", 8, 8, "allgather"),  # EP8 <= top-8
        ("h200", 16, 8, "allgather"),  # no multi-node NVLink: DeepEP only by environment
        ("gb200", 4, 8, "allgather"),  # EP4 <= top-8, even on NVL72
        ("gb200", 4, 4, "allgather"),  # gpt-oss: EP4 <= top-4
        ("gb200", 16, 8, "alltoall"),  # MNNVL and EP16 > top-8
    ],
)
def test_trtllm_gathers_unless_mnnvl_and_ep_above_top_k(
    gpu: str, dp: int, top_k: int, expected: str
) -> None:
    par = Parallelism(tp=1, dp=dp, enable_expert_parallel=True)
    assert trtllm_moe_exchange(top_k, par, load_gpu(gpu)) == expected
    no_dp = Parallelism(tp=dp, enable_expert_parallel=True)
    assert trtllm_moe_exchange(top_k, no_dp, load_gpu(gpu)) == "allgather"  # no effect: no DP


def _dep8(exchange: str) -> RooflineModel:
    spec = spec_of("Qwen3-30B-A3B")
    gpu = load_gpu("h100")
    model = RooflineModel(
        spec,
        gpu,
        Parallelism(tp=1, dp=8, enable_expert_parallel=True),
        weight_formats_for(spec, "fp8"),
        kv_format("auto", model_dtype=spec.dtype),
        efficiency_for(gpu),
        routing=Routing(0.0),
    )
    model.moe_exchange = exchange
    return model


def test_the_roofline_charges_the_gather_as_communication_only() -> None:
    """Default all-to-all; with the gather the step's communication grows (every token reaches
    every rank: 3 bytes of FP8 in, BF16 out, against 2 x hit x 2 bytes) and nothing else moves."""
    batch = decode(1024, 2048)
    alltoall, gather = _dep8("alltoall"), _dep8("allgather")
    a, g = alltoall.step_time(batch), gather.step_time(batch)
    assert g.by_bound_s["communication"] > a.by_bound_s["communication"]
    for bound in ("compute", "memory"):
        assert g.by_bound_s[bound] == pytest.approx(a.by_bound_s[bound])


def test_the_roofline_defaults_to_the_all_to_all() -> None:
    spec = spec_of("Qwen3-30B-A3B")
    gpu = load_gpu("h100")
    par = Parallelism(tp=1, dp=8, enable_expert_parallel=True)
    formats, kv = weight_formats_for(spec, None), kv_format("auto", model_dtype=spec.dtype)
    assert RooflineModel(spec, gpu, par, formats, kv, efficiency_for(gpu)).moe_exchange == (
        "alltoall"
    )
