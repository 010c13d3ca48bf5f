"""KV-cache bytes per token, per sequence and per TP rank, hand-computed from config fields."""

import pytest

from inferplan.specs.catalog import BUNDLED_MODELS, load_model
from inferplan.specs.dtypes import KV_FORMATS, kv_format
from inferplan.specs.kv import (
    kv_bytes_per_token,
    kv_values_per_token,
    linear_state_values,
    sequence_kv_bytes,
)
from inferplan.specs.model import AttentionSpec, ModelSpec

# KV values one token adds to the whole model: 2 (K and V) * kv_heads * head_dim * layers for
# GQA; (kv_lora_rank + qk_rope_head_dim) * layers for MLA. Sliding-window layers still add one
# token's worth per token; linear-attention layers add nothing per token.
KV_VALUES_PER_TOKEN = {
    "Llama-2-7b-hf": 2 * 32 * 128 * 32,  # MHA: 32 KV heads, head_dim 4096/32
    "Llama-2-70b-hf": 2 * 8 * 128 * 80,
    "Llama-3.1-8B": 2 * 8 * 128 * 32,
    "Llama-3.1-70B": 2 * 8 * 128 * 80,
    "Llama-3.1-405B": 2 * 8 * 128 * 126,
    "Mistral-7B-v0.1": 2 * 8 * 128 * 32,  # all 32 layers sliding (4096), each still per token
    "Mistral-7B-v0.3": 2 * 8 * 128 * 32,
    "Mixtral-8x7B-v0.1": 2 * 8 * 128 * 32,
    "Qwen3-8B": 2 * 8 * 128 * 36,
    "Qwen3-32B": 2 * 8 * 128 * 64,
    "Qwen3-30B-A3B": 2 * 4 * 128 * 48,
    "Qwen3-235B-A22B": 2 * 4 * 128 * 94,
    "Qwen3-Next-80B-A3B-Thinking": 2 * 2 * 256 * 12,  # only the 48/4 full-attention layers
    "gemma-3-27b-it": 2 * 16 * 128 * 62,  # 52 sliding + 10 global layers, all per token
    "gpt-oss-20b": 2 * 8 * 64 * 24,  # 12 sliding (128) + 12 full
    "gpt-oss-120b": 2 * 8 * 64 * 36,  # 18 sliding (128) + 18 full
    "DeepSeek-V3": (512 + 64) * 61,  # latent + decoupled RoPE key, one copy per layer
    "DeepSeek-R1": (512 + 64) * 61,
    "Kimi-K2-Instruct": (512 + 64) * 61,
    "DeepSeek-V3.2": (512 + 64) * 61,  # the DSA indexer's own small key cache not modelled
    "Qwen3-14B": 2 * 8 * 128 * 40,
    "Mixtral-8x22B-v0.1": 2 * 8 * 128 * 56,
    "Llama-4-Scout-17B-16E-Instruct": 2 * 8 * 128 * 48,  # chunked-attention layers counted full
    "Qwen3-VL-30B-A3B": 2 * 4 * 128 * 48,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": 2 * 2 * 128 * 6,  # only the 6 attention layers
    "GLM-4.5-Air": 2 * 8 * 128 * 46,  # partial RoPE rotates half of each head; all is cached
    "GLM-4.6": 2 * 8 * 128 * 92,
    "Llama-4-Maverick-17B-128E-Instruct": 2 * 8 * 128 * 48,  # chunked layers counted full
}


def spec(short: str) -> ModelSpec:
    return load_model(short)


def test_the_table_covers_every_bundled_model() -> None:
    assert set(KV_VALUES_PER_TOKEN) == set(BUNDLED_MODELS)


@pytest.mark.parametrize("short", sorted(BUNDLED_MODELS))
def test_kv_bytes_per_token_bf16_and_fp8(short: str) -> None:
    values = KV_VALUES_PER_TOKEN[short]
    assert kv_bytes_per_token(spec(short), KV_FORMATS["bf16"]) == values * 2
    assert kv_bytes_per_token(spec(short), KV_FORMATS["fp8"]) == values * 1


def test_worked_examples_from_the_brief() -> None:
    assert kv_bytes_per_token(spec("Llama-3.1-8B"), KV_FORMATS["bf16"]) == 131_072
    assert kv_bytes_per_token(spec("DeepSeek-V3"), KV_FORMATS["bf16"]) == 70_272
    assert kv_bytes_per_token(spec("Qwen3-Next-80B-A3B-Thinking"), KV_FORMATS["bf16"]) == 24_576


def test_auto_follows_the_model_dtype() -> None:
    # Llama-2 ships torch_dtype float16: auto -> fp16 (2 bytes); an fp8 checkpoint (DeepSeek)
    # still gets a bf16 cache under auto, as vLLM does.
    assert kv_format("auto", model_dtype=spec("Llama-2-7b-hf").dtype).name == "fp16"
    assert kv_format("auto", model_dtype=spec("DeepSeek-R1").dtype).name == "bf16"


def test_int8_and_int4_carry_scale_overhead() -> None:
    int8, int4 = KV_FORMATS["int8"], KV_FORMATS["int4"]
    assert int8.bytes_per_value == 1 + 2 / 64  # one fp16 scale per 64 values
    assert int4.bytes_per_value == 0.5 + 4 / 64  # fp16 scale + fp16 zero per 64 values
    assert int8.bytes_per_value > 1
    assert int4.bytes_per_value > 0.5
    values = 2 * 8 * 128 * 32
    llama = spec("Llama-3.1-8B")
    assert kv_bytes_per_token(llama, int8) == values * (1 + 2 / 64) == 67_584
    assert kv_bytes_per_token(llama, int4) == values * (0.5 + 4 / 64) == 36_864


def test_gpt_oss_layers_alternate_and_sliding_layers_still_count_per_token() -> None:
    layers = spec("gpt-oss-120b").layers
    sliding = [g for g in layers if g.attention.window_tokens == 128]
    assert len(sliding) == 18
    assert all(kv_values_per_token(g.attention) == 2 * 8 * 64 for g in layers)


def test_qwen3_next_linear_layers_hold_a_fixed_state_not_kv() -> None:
    model = spec("Qwen3-Next-80B-A3B-Thinking")
    linear = [g.attention for g in model.layers if g.attention.kind == "linear"]
    assert len(linear) == 36
    assert kv_values_per_token(linear[0]) == 0
    # conv state (2*Kd + Vd) * (kernel - 1) with Kd = 16*128, Vd = 32*128, kernel 4,
    # plus the recurrent state value_heads * key_dim * value_dim = 32 * 128 * 128.
    conv = (2 * 16 * 128 + 32 * 128) * (4 - 1)
    recurrent = 32 * 128 * 128
    assert linear_state_values(linear[0]) == conv + recurrent == 548_864
    assert linear_state_values(linear[0], tp=4) == (conv + recurrent) // 4


def gqa(num_kv_heads: int, head_dim: int = 128, window: int | None = None) -> AttentionSpec:
    return AttentionSpec("gqa", 64, num_kv_heads, head_dim, head_dim, window_tokens=window)


@pytest.mark.parametrize(
    ("tp", "heads_per_rank"), [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1), (64, 1)]
)
def test_kv_heads_split_by_tp_then_replicated(tp: int, heads_per_rank: int) -> None:
    att = spec("Llama-3.1-70B").layers[0].attention
    assert kv_values_per_token(att, tp) == 2 * heads_per_rank * 128


@pytest.mark.parametrize("tp", [1, 2, 8, 16, 32])
def test_mla_latent_is_not_split_by_tp(tp: int) -> None:
    att = spec("DeepSeek-V3").layers[0].attention
    assert att.kind == "mla"
    assert kv_values_per_token(att, tp) == 512 + 64


def test_sequence_bytes_round_up_to_whole_blocks() -> None:
    bf16 = KV_FORMATS["bf16"]
    att = gqa(8)
    per_token = 2 * 8 * 128 * 2
    # 17 tokens in 16-token blocks occupy 2 blocks = 32 token slots, in each of 3 layers.
    assert sequence_kv_bytes(((att, 3),), 17, bf16, 2.0, tp=1, block_tokens=16) == (
        32 * per_token * 3
    )
    assert sequence_kv_bytes(((att, 3),), 16, bf16, 2.0, tp=1, block_tokens=16) == (
        16 * per_token * 3
    )
    assert sequence_kv_bytes(((att, 3),), 17, bf16, 2.0, tp=1) == 17 * per_token * 3


def test_sliding_layers_cap_at_window_plus_one_block() -> None:
    bf16 = KV_FORMATS["bf16"]
    sliding, full = gqa(8, 64, window=128), gqa(8, 64)
    per_token = 2 * 8 * 64 * 2
    layers = ((sliding, 18), (full, 18))  # gpt-oss-120b's stack
    context = 100_001
    full_tokens = 100_016  # 6251 blocks of 16
    sliding_tokens = 128 + 16  # the window plus the block being filled
    expected = (full_tokens * 18 + sliding_tokens * 18) * per_token
    assert sequence_kv_bytes(layers, context, bf16, 2.0, tp=1, block_tokens=16) == expected
    # Shorter than the window: the sliding layer holds the whole (rounded) context.
    assert sequence_kv_bytes(((sliding, 1),), 40, bf16, 2.0, tp=1, block_tokens=16) == (
        48 * per_token
    )


def test_linear_layers_add_a_fixed_state_per_sequence() -> None:
    model = spec("Qwen3-Next-80B-A3B-Thinking")
    linear = next(g.attention for g in model.layers if g.attention.kind == "linear")
    full = next(g.attention for g in model.layers if g.attention.kind == "gqa")
    bf16 = KV_FORMATS["bf16"]
    layers = ((linear, 36), (full, 12))
    state = 548_864 * 2 * 36  # bf16 state for every linear layer, whatever the context
    for context in (16, 1024, 65_536):
        expected = state + context * 2 * 2 * 256 * 2 * 12
        assert sequence_kv_bytes(layers, context, bf16, 2.0, tp=1, block_tokens=16) == expected


def test_sequence_bytes_on_a_tp_rank() -> None:
    bf16 = KV_FORMATS["bf16"]
    att = spec("Llama-3.1-70B").layers[0].attention
    one_rank = sequence_kv_bytes(((att, 80),), 4096, bf16, 2.0, tp=4, block_tokens=16)
    assert one_rank == 4096 * 2 * (8 // 4) * 128 * 2 * 80
