"""Chunked local attention (Llama 4's iRoPE layers): which layers attend only within a chunk.

Llama 4 splits every sequence into chunks of ``attention_chunk_size`` tokens (8,192 in Scout's
and Maverick's configs). A layer that applies RoPE attends only to the earlier tokens of its own
chunk; a NoPE layer attends to the whole context (HF ``transformers`` ``models/llama4``:
``Llama4TextConfig`` builds ``no_rope_layers`` as ``(i + 1) % no_rope_layer_interval != 0``,
interval 4, when the config gives none, and ``Llama4TextAttention`` uses chunked attention
exactly where it uses RoPE). So three layers in four are local. TensorRT-LLM reads the same
field for Llama 4 and masks its context attention by chunk (``docs/source/features/
long-sequence.md``, "Chunked attention"), and in later sources its generation attention too
(``attentionOp.cpp`` passes ``chunked_attention_size`` to XQA; PR #6306); vLLM and SGLang run it
as chunked local attention. ``docs/modeling.md`` section 3 has what is unresolved.

Modelling: a query at position ``p`` of a chunked layer attends to ``p mod chunk + 1`` tokens,
half a chunk on average once the context is long, so the attention *core* of such a layer is
charged like a sliding window of half a chunk (``attention_span``), and a prefill reads at most
one chunk of its cached prefix. The KV cache is not shrunk (``specs/kv.py`` keeps every token
of every layer): the engines' KV managers were not checked to free a finished chunk's blocks,
so capacity stays the conservative full-context figure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from inferplan.errors import InferplanError
from inferplan.limits import MAX_CONFIG_POSITIONS
from inferplan.specs.config_fields import ConfigFields

if TYPE_CHECKING:
    from inferplan.specs.model import AttentionSpec

# Families whose config's ``attention_chunk_size`` means chunked local attention on RoPE layers.
_CHUNKED_FAMILIES = {"llama4", "llama4_text"}
_NO_ROPE_INTERVAL = 4  # HF Llama4TextConfig's default no_rope_layer_interval


def chunked_layers(f: ConfigFields, model_type: str, num_layers: int) -> list[bool]:
    """Per layer, whether it attends only within its chunk (all False without a chunk size)."""
    if model_type not in _CHUNKED_FAMILIES or not f.has("attention_chunk_size"):
        return [False] * num_layers
    uses_rope = f.get_int_list("no_rope_layers", maximum=1)
    if not uses_rope:  # absent or empty: HF's default pattern, a NoPE layer every interval
        every = f.get_int("no_rope_layer_interval", _NO_ROPE_INTERVAL)
        uses_rope = [int((i + 1) % every != 0) for i in range(num_layers)]
    if len(uses_rope) != num_layers:
        raise InferplanError(
            f"{f.source}: field 'no_rope_layers' has {len(uses_rope)} entries, "
            f"not num_hidden_layers={num_layers}"
        )
    return [bool(v) for v in uses_rope]


def with_chunks(
    f: ConfigFields, model_type: str, attentions: list[AttentionSpec]
) -> list[AttentionSpec]:
    """``attentions`` with the config's chunk size set on the chunked (RoPE) layers."""
    flags = chunked_layers(f, model_type, len(attentions))
    if not any(flags):
        return attentions
    chunk = f.get_int("attention_chunk_size", maximum=MAX_CONFIG_POSITIONS)
    return [
        replace(att, chunk_tokens=chunk) if is_chunked else att
        for att, is_chunked in zip(attentions, flags, strict=True)
    ]


def attention_span(att: AttentionSpec) -> int | None:
    """Tokens one query of a long sequence attends to: its sliding window, or half its chunk
    (the mean of ``p mod chunk``), whichever is smaller; None for full attention."""
    spans = [att.window_tokens, None if att.chunk_tokens is None else att.chunk_tokens // 2]
    known = [s for s in spans if s is not None]
    return min(known) if known else None
