"""The routing where a run states none (``Efficiency.routing_skew``): a Zipf popularity whose hot
experts sit at ids unrelated to their load, placed ``oblivious`` (a typical seeded permutation
of the ids, dealt in contiguous blocks as TensorRT-LLM and vLLM place experts); and the grouped
GEMMs' own fraction of the GEMM rate (``Efficiency.moe_gemm``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.memory.plan import weight_formats_for
from inferplan.perf.efficiency import efficiency_for, parse_efficiency
from inferplan.perf.moe import Routing, default_routing, pick_probabilities, rank_table
from inferplan.perf.placement import OBLIVIOUS_DRAWS, linear, oblivious, round_robin
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.dtypes import kv_format
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import decode, prefill, spec_of


def _imbalance(placement: str, skew: float, experts: int, top_k: int, ep: int) -> float:
    """TensorRT-LLM's imbalance ratio by rank: (busiest - mean) / mean of the picks."""
    share = rank_table(Routing(skew, placement=placement), experts, top_k, ep).assignment_share
    return float((share.max() - share.mean()) / share.mean())


def test_oblivious_places_every_expert_once_in_equal_blocks() -> None:
    loads = pick_probabilities(Routing(0.6).popularity(128), 8)
    copies = oblivious(loads, 8, 0)
    assert copies.sum(axis=0).tolist() == [1] * 128
    assert copies.sum(axis=1).tolist() == [16] * 8
    assert np.array_equal(copies, oblivious(loads, 8, 0))  # seeded: the same every time
    assert not np.array_equal(copies, linear(loads, 8, 0))


def test_oblivious_keeps_the_median_draw() -> None:
    """Of the seeded permutations the kept one's busiest rank is the median: as many draws
    load their busiest rank more as load it less."""
    loads = pick_probabilities(Routing(0.6).popularity(64), 4)
    kept = float((oblivious(loads, 4, 0) * loads).sum(axis=1).max())
    rng = np.random.default_rng(0)
    busiest = [
        max(float(loads[b].sum()) for b in np.array_split(rng.permutation(64), 4))
        for _ in range(OBLIVIOUS_DRAWS)
    ]
    assert sum(b > kept for b in busiest) == sum(b < kept for b in busiest)


def test_oblivious_imbalance_lies_between_dealt_out_and_stacked() -> None:
    """DeepSeek-R1's shape at EP32 (256 experts, top 8), Zipf 0.6, the skew that reproduces the
    per-expert imbalance TensorRT-LLM measured (docs/moe.md section 5): round-robin deals the
    hot experts out (1.21), linear stacks them (4.98); a load-oblivious placement lands near
    the measured 1.56 by rank, between the two."""
    dealt = _imbalance("round_robin", 0.6, 256, 8, 32)
    stacked = _imbalance("linear", 0.6, 256, 8, 32)
    typical = _imbalance("oblivious", 0.6, 256, 8, 32)
    assert dealt < typical < stacked
    assert 1.2 < typical < 1.6


def test_uniform_routing_is_the_default_and_balanced() -> None:
    assert default_routing(0.0) == Routing()
    assert default_routing(0.7) == Routing(0.7, placement="oblivious", source="routing_skew")
    assert _imbalance("oblivious", 0.0, 128, 8, 4) == pytest.approx(0.0, abs=1e-12)
    assert round_robin(np.ones(8), 4, 0).sum() == 8


def test_routing_skew_out_of_range_is_rejected() -> None:
    data = {k: v for k, v in efficiency_for(load_gpu("h100")).to_dict().items()}
    with pytest.raises(InferplanError, match="routing_skew"):
        parse_efficiency({**data, "routing_skew": 6.0}, "x.yaml")
    assert parse_efficiency({**data, "routing_skew": 0.8}, "x.yaml").routing_skew == 0.8


def _model(name: str, par: Parallelism, skew: float) -> RooflineModel:
    spec, gpu = spec_of(name), load_gpu("h200")
    eff = replace(efficiency_for(gpu), routing_skew=skew)
    kv = kv_format("auto", model_dtype=spec.dtype)
    return RooflineModel(spec, gpu, par, weight_formats_for(spec, None), kv, eff)


def test_efficiency_skew_slows_the_busiest_expert_parallel_rank() -> None:
    """With attention DP + EP the MoE waits for its busiest rank: a compute-bound step (a long
    prefill) is slower under the efficiency's skew than under uniform routing, and more so at
    a larger skew. An explicit routing still wins over the efficiency's."""
    dep = Parallelism(tp=1, dp=8, enable_expert_parallel=True)
    times = [
        _model("DeepSeek-V3", dep, s).step_time(prefill(8192)).by_operator_s["experts"]
        for s in (0.0, 0.5, 1.0)
    ]
    assert times[0] < times[1] < times[2]
    spec, gpu = spec_of("DeepSeek-V3"), load_gpu("h200")
    eff = replace(efficiency_for(gpu), routing_skew=1.0)
    kv = kv_format("auto", model_dtype=spec.dtype)
    explicit = RooflineModel(
        spec, gpu, dep, weight_formats_for(spec, None), kv, eff, routing=Routing()
    )
    assert explicit.routing == Routing()


def test_efficiency_skew_reads_fewer_experts_in_a_small_tensor_parallel_decode() -> None:
    """Without EP every rank holds a slice of every expert: skew cannot load one rank more, but
    a small decode touches fewer distinct experts, so it reads fewer weights and is faster."""
    tp = Parallelism(tp=1)
    uniform = _model("Qwen3-30B-A3B", tp, 0.0).step_time(decode(4, 1000)).by_operator_s["experts"]
    skewed = _model("Qwen3-30B-A3B", tp, 1.0).step_time(decode(4, 1000)).by_operator_s["experts"]
    assert skewed < uniform


def test_moe_gemm_slows_only_the_per_row_part_of_the_expert_gemms() -> None:
    """A compute-bound prefill's expert GEMMs take longer at ``moe_gemm`` 0.5, close to twice
    as long (the small-batch ramp is not scaled); the dense layers and a small memory-bound
    decode (weights read, not MMAs) do not move."""
    spec, gpu, par = spec_of("Qwen3-30B-A3B"), load_gpu("h200"), Parallelism(tp=1)
    kv = kv_format("auto", model_dtype=spec.dtype)
    base = efficiency_for(gpu)
    full, half = (
        RooflineModel(spec, gpu, par, weight_formats_for(spec, None), kv, replace(base, moe_gemm=f))
        for f in (1.0, 0.5)
    )
    big = prefill(16384)
    ratio = (
        half.step_time(big).by_operator_s["experts"] / full.step_time(big).by_operator_s["experts"]
    )
    assert 1.7 < ratio <= 2.0
    assert (
        half.step_time(big).by_operator_s["attn_proj"]
        == full.step_time(big).by_operator_s["attn_proj"]
    )
    small = decode(2, 500)
    assert half.step_time(small).total_s == full.step_time(small).total_s
    data = base.to_dict()
    with pytest.raises(InferplanError, match="moe_gemm"):
        parse_efficiency({**data, "moe_gemm": 1.2}, "x.yaml")
