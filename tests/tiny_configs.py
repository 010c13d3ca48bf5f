"""A tiny Llama-shaped Hugging Face ``config.json`` for tests that need a model file."""

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
