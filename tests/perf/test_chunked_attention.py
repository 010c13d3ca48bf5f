"""Chunked local attention in the step time: half a chunk per query once the context is long."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.memory.plan import weight_formats_for
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.dtypes import KV_FORMATS
from inferplan.specs.model import ModelSpec, parse_config
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import toy_gpu, unit_efficiency
from tiny_configs import tiny_llama4

TOY = tiny_llama4()
PEAK = 1e13
CHUNK = 512


def _spec(is_chunked: bool) -> ModelSpec:
    spec = parse_config(dict(TOY), name="toy", source="toy.json")
    if is_chunked:
        return spec
    layers = tuple(
        replace(g, attention=replace(g.attention, chunk_tokens=None)) for g in spec.layers
    )
    return replace(spec, layers=layers)


def _attention_s(is_chunked: bool, batch: StepBatch, name: str) -> float:
    spec = _spec(is_chunked)
    model = RooflineModel(
        spec,
        toy_gpu(bf16_flops=PEAK),
        Parallelism(),
        weight_formats_for(spec, None),
        KV_FORMATS["bf16"],
        unit_efficiency(),
    )
    return model.step_time(batch).by_operator_s[name]


def test_a_long_prompt_attends_half_a_chunk_per_token_on_chunked_layers() -> None:
    """Three of the four layers are chunked: their causal pairs are capped at tokens x chunk / 2
    (exact for a prompt of whole chunks); the NoPE layer keeps every pair. Compute-bound."""
    tokens = 8 * CHUNK
    full_pairs = chunk_attention_pairs(tokens, 0)
    batch = StepBatch(prefill_tokens=tokens, prefill_attention_pairs=full_pairs, num_prefill_seqs=1)
    chunked, full = (
        _attention_s(True, batch, "attn_prefill"),
        _attention_s(False, batch, "attn_prefill"),
    )
    assert chunked / full == pytest.approx((3 * tokens * CHUNK / 2 + full_pairs) / (4 * full_pairs))


def test_a_short_prompt_is_not_affected() -> None:
    tokens = CHUNK // 2
    pairs = chunk_attention_pairs(tokens, 0)
    batch = StepBatch(prefill_tokens=tokens, prefill_attention_pairs=pairs, num_prefill_seqs=1)
    assert _attention_s(True, batch, "attn_prefill") == _attention_s(False, batch, "attn_prefill")


def test_decode_reads_half_a_chunk_of_a_long_context() -> None:
    """Memory-bound decode: 4 sequences at 16 chunks each read CHUNK / 2 tokens (plus the new
    one) on the three chunked layers and their whole context on the NoPE layer."""
    seqs, context = 4, 16 * CHUNK
    batch = StepBatch(num_decode_seqs=seqs, decode_context_tokens=seqs * context)
    chunked, full = (
        _attention_s(True, batch, "attn_decode"),
        _attention_s(False, batch, "attn_decode"),
    )
    per_layer_full = context + 1
    expected = (3 * (CHUNK // 2 + 1) + per_layer_full) / (4 * per_layer_full)
    assert chunked / full == pytest.approx(expected, rel=1e-3)
