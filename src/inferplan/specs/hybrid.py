"""Nemotron-H hybrid stacks (``hybrid_override_pattern``): which block each layer is, and the
Mamba-2 mixer's shape.

Each character of the pattern is one layer holding a single block (HF ``transformers``
``models/nemotron_h/modeling_nemotron_h.py``, ``NemotronHBlock``): ``M`` a Mamba-2 mixer, ``*``
attention, ``-`` an MLP, ``E`` a MoE; the other half of a classic decoder layer is absent. A
Mamba-2 mixer is read as linear attention with a fixed per-sequence state (``specs/kv.py``):
its ``n_groups`` B/C groups of ``ssm_state_size`` play the key heads and key head dim, its
``mamba_num_heads`` heads of ``mamba_head_dim`` the value heads, so the conv state is
``(heads*head_dim + 2*groups*state) * (conv_kernel - 1)`` and the SSM state
``heads * head_dim * state``, as the HF mixer and vLLM's ``MambaStateShapeCalculator`` shape
them. ``mamba_ssm_cache_dtype: float32`` keeps the SSM state in fp32 (4 bytes a value).
"""

from __future__ import annotations

from typing import Any

from inferplan.errors import InferplanError
from inferplan.specs.config_fields import ConfigFields

# Pattern character -> (mixer kind or None, FFN kind or None).
HYBRID_BLOCKS: dict[str, tuple[str | None, str | None]] = {
    "M": ("mamba2", None),
    "*": ("full_attention", None),
    "-": (None, "dense"),
    "E": (None, "moe"),
}


def hybrid_blocks(f: ConfigFields, num_layers: int) -> list[tuple[str | None, str | None]]:
    """Per layer: (mixer kind, FFN kind), one of them None."""
    pattern = f.get_str("hybrid_override_pattern", "")
    bad = "".join(sorted(set(pattern) - set(HYBRID_BLOCKS)))
    if len(pattern) != num_layers or bad:
        raise InferplanError(
            f"{f.source}: field 'hybrid_override_pattern' must be num_hidden_layers="
            f"{num_layers} characters from {''.join(HYBRID_BLOCKS)!r}; got {len(pattern)}"
            + (f", with {bad!r}" if bad else "")
        )
    return [HYBRID_BLOCKS[c] for c in pattern]


def mamba2_fields(f: ConfigFields) -> dict[str, Any]:
    """The AttentionSpec fields of a Mamba-2 mixer (kind ``linear``)."""
    return {
        "kind": "linear",
        "num_kv_heads": 0,
        "head_dim": 0,
        "v_head_dim": 0,
        "linear_num_key_heads": f.get_int("n_groups"),
        "linear_num_value_heads": f.get_int("mamba_num_heads"),
        "linear_key_head_dim": f.get_int("ssm_state_size"),
        "linear_value_head_dim": f.get_int("mamba_head_dim"),
        "conv_kernel_size": f.get_int("conv_kernel"),
        "is_mamba2": True,
        "has_fp32_state": f.get_str("mamba_ssm_cache_dtype", "") == "float32",
    }
