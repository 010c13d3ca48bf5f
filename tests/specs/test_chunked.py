"""Llama 4's chunked local attention: which layers are chunked, and what the KV cache keeps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.errors import InferplanError
from inferplan.specs.catalog import load_model
from inferplan.specs.chunked import attention_span
from inferplan.specs.dtypes import KV_FORMATS
from inferplan.specs.kv import sequence_kv_bytes
from inferplan.specs.model import ModelSpec, parse_config
from tiny_configs import tiny_llama4

TOY = tiny_llama4()


def _chunks(spec: ModelSpec) -> list[int | None]:
    return [layer.attention.chunk_tokens for layer in spec.layers]


def test_three_layers_in_four_are_chunked_in_scout_and_maverick() -> None:
    """HF's default no_rope_layers: layer i is a NoPE (global) layer when (i + 1) % 4 == 0."""
    for name in ("Llama-4-Scout-17B-16E-Instruct", "Llama-4-Maverick-17B-128E-Instruct"):
        chunks = _chunks(load_model(name))
        assert len(chunks) == 48
        assert chunks[:4] == [8192, 8192, 8192, None]
        assert sum(c is not None for c in chunks) == 36


def test_an_explicit_no_rope_list_decides_and_must_cover_every_layer() -> None:
    spec = parse_config({**TOY, "no_rope_layers": [0, 1, 1, 0]}, name="t", source="t.json")
    assert _chunks(spec) == [None, 512, 512, None]
    with pytest.raises(InferplanError, match="no_rope_layers"):
        parse_config({**TOY, "no_rope_layers": [1, 1]}, name="t", source="t.json")


def test_other_families_and_configs_without_a_chunk_size_stay_full() -> None:
    assert _chunks(parse_config({**TOY, "model_type": "llama"}, name="t", source="t")) == [None] * 4
    no_chunk = {k: v for k, v in TOY.items() if k != "attention_chunk_size"}
    assert _chunks(parse_config(no_chunk, name="t", source="t")) == [None] * 4
    assert all(c is None for c in _chunks(load_model("Llama-3.1-8B")))


def test_the_kv_cache_keeps_every_token_of_chunked_layers() -> None:
    """Capacity is the full-context figure: a chunk is a mask, not a smaller cache."""
    spec = parse_config(dict(TOY), name="t", source="t.json")
    full = replace(
        spec,
        layers=tuple(
            replace(g, attention=replace(g.attention, chunk_tokens=None)) for g in spec.layers
        ),
    )

    def held(s: ModelSpec) -> float:
        layers = tuple((g.attention, g.num_layers) for g in s.layers)
        return sequence_kv_bytes(layers, 4096, KV_FORMATS["bf16"], 2.0, tp=1, block_tokens=16)

    assert held(spec) == held(full) == 4 * 2 * 2 * 16 * 2 * 4096


def test_attention_span_is_half_a_chunk_or_the_window() -> None:
    att = parse_config(dict(TOY), name="t", source="t.json").layers[0].attention
    assert attention_span(att) == 256
    assert attention_span(replace(att, window_tokens=100)) == 100
    assert attention_span(replace(att, chunk_tokens=None)) is None
