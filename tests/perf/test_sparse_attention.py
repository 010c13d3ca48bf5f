"""DeepSeek sparse attention (DeepSeek-V3.2's DSA, ``perf/sparse_attention.py``): the indexer is
read from the config, costs what the formulas say, is not split by tensor parallelism; the core
reads at most ``index_topk`` latents a sequence in decode and runs sparse only for prefills
longer than that; the decode line stays exact across the point where the top-k saturates."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.sparse_attention import SCORE_BYTES, is_sparse_prefill, pair_flops
from inferplan.specs.model import ModelSpec
from inferplan.specs.sparse import IndexerSpec
from perf.perf_helpers import assert_line_matches, decode, prefill, roofline, spec_of

TOPK = 2048


def _dense(model: RooflineModel) -> RooflineModel:
    """The same model with its indexers removed: V3's dense MLA on V3.2's shapes."""
    spec: ModelSpec = model.spec
    layers = tuple(replace(g, attention=replace(g.attention, indexer=None)) for g in spec.layers)
    dense = replace(spec, layers=layers)
    return RooflineModel(
        dense, model.gpu, model.par, model.formats, model.kv, model.eff, routing=model.routing
    )


def _op_s(model: RooflineModel, batch: StepBatch, name: str) -> float:
    return model.step_time(batch).by_operator_s.get(name, 0.0)


def test_v32_config_has_the_indexer_and_r1_none() -> None:
    att = spec_of("DeepSeek-V3.2").layer_groups[0].attention
    assert att.indexer == IndexerSpec(topk=TOPK, num_heads=64, head_dim=128)
    assert spec_of("DeepSeek-R1").layer_groups[0].attention.indexer is None
    assert att.indexer.key_bytes_per_token == pytest.approx(128 + 4)  # fp8 keys, one fp32 scale
    assert pair_flops(att.indexer) == 2 * 64 * 128


def test_decode_core_reads_at_most_topk_latents_and_the_indexer_grows() -> None:
    model = roofline("DeepSeek-V3.2", "h200", tp=8)
    core = [_op_s(model, decode(4, c), "attn_decode") for c in (TOPK, 16_000, 64_000)]
    assert core[1] == pytest.approx(core[0], rel=1e-12)
    assert core[2] == pytest.approx(core[0], rel=1e-12)
    indexer = [_op_s(model, decode(4, c), "attn_indexer") for c in (16_000, 64_000)]
    assert indexer[1] == pytest.approx(4 * indexer[0], rel=0.05)
    dense = _dense(model)
    assert _op_s(dense, decode(4, 64_000), "attn_decode") > 10 * core[2]
    assert model.step_time(decode(4, 64_000)).total_s < dense.step_time(decode(4, 64_000)).total_s


def test_short_prefill_is_dense_long_prefill_is_sparse() -> None:
    """On one attention rank (SGLang runs V3.2 with DP attention) a 32k-token prompt's core and
    indexer cost well under the dense core; a prompt of top-k tokens runs the dense core."""
    model = roofline("DeepSeek-V3.2", "h200", dp=8, ep=True)
    dense = _dense(model)
    short, long = prefill(TOPK), prefill(32_000)
    assert _op_s(model, short, "attn_prefill") == _op_s(dense, short, "attn_prefill")
    assert _op_s(model, short, "attn_indexer") > 0
    sparse_s = _op_s(model, long, "attn_prefill") + _op_s(model, long, "attn_indexer")
    assert sparse_s < 0.7 * _op_s(dense, long, "attn_prefill")
    assert model.step_time(long).total_s < dense.step_time(long).total_s


def test_indexer_is_replicated_across_tensor_parallel_ranks() -> None:
    one, eight = roofline("DeepSeek-V3.2", "h200"), roofline("DeepSeek-V3.2", "h200", tp=8)
    batch = prefill(32_000)
    assert _op_s(eight, batch, "attn_indexer") == pytest.approx(_op_s(one, batch, "attn_indexer"))
    assert _op_s(eight, batch, "attn_prefill") < _op_s(one, batch, "attn_prefill") / 4


def test_indexer_prefill_by_hand() -> None:
    """FLOPs at the FP8 attention rate against bytes of keys plus two fp32 scores a pair."""
    model = roofline("DeepSeek-V3.2", "h200", tp=8)
    indexer = IndexerSpec(TOPK, 64, 128)
    tokens = 32_000
    pairs = chunk_attention_pairs(tokens, 0)
    layers = sum(g.num_layers for g in model.spec.layer_groups)
    flops_s = model.gpu.peak("fp8") * model.eff.attention_compute
    bytes_s = model.gpu.memory_bandwidth_bytes_s * model.eff.attention_memory
    compute = pair_flops(indexer) * pairs / flops_s
    memory = (indexer.key_bytes_per_token * tokens + 2 * SCORE_BYTES * pairs) / bytes_s
    expected = max(compute, memory) * layers
    assert _op_s(model, prefill(tokens), "attn_indexer") == pytest.approx(expected, rel=1e-9)


def test_sparse_prefill_rule_by_mean_length() -> None:
    indexer = IndexerSpec(TOPK, 64, 128)
    assert not is_sparse_prefill(indexer, TOPK, 1)
    assert is_sparse_prefill(indexer, TOPK + 1, 1)
    assert not is_sparse_prefill(indexer, 3 * TOPK, 3)
    assert not is_sparse_prefill(indexer, 0, 0)


@pytest.mark.parametrize("num_seqs", [1, 7, 64])
def test_decode_line_exact_across_the_topk_saturation(num_seqs: int) -> None:
    model = roofline("DeepSeek-V3.2", "h200", tp=8)
    context = num_seqs * 100
    while context < num_seqs * 5 * TOPK:
        limit = assert_line_matches(model, num_seqs, context)
        if not math.isfinite(limit):
            break
        context = math.ceil(limit)
    _, slope_before, _ = model.decode_line(num_seqs, num_seqs * 100)
    _, slope_after, _ = model.decode_line(num_seqs, num_seqs * 2 * TOPK)
    assert 0 < slope_after < slope_before  # past top-k only the indexer's reads still grow
