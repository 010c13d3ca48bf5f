"""Tiny Hugging Face ``config.json`` dicts for tests that need a model file."""

from typing import Any


def tiny_llama(**overrides: Any) -> dict[str, Any]:
    """A valid 4-layer Llama config (GQA 8/2 heads); ``overrides`` replace or add fields."""
    cfg: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    cfg.update(overrides)
    return cfg


def tiny_llama4(**overrides: Any) -> dict[str, Any]:
    """Four Llama 4 text layers, MoE on every second one, chunked attention in chunks of 512
    tokens (``specs/chunked.py``); ``overrides`` replace or add fields."""
    cfg: dict[str, Any] = {
        "model_type": "llama4_text",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 32,
        "intermediate_size_mlp": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
        "vocab_size": 256,
        "attention_chunk_size": 512,
    }
    cfg.update(overrides)
    return cfg
