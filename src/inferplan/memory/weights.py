"""Weight bytes on one device: sharding as vLLM does it, each tensor in its own format.

Sharding (vLLM ``model_executor/layers/linear.py`` and the per-family model files):
- q/k/v/o, gate/up/down: column- or row-parallel, split by ``tp``. K/V projections keep one KV
  head per rank when ``tp`` exceeds the KV heads (replicated).
- MLA: ``q_a`` and ``kv_a`` (the down-projections) are replicated; ``q_b``, ``kv_b``, ``o`` split.
- Embedding and LM head: vocab-parallel over ``tp``, vocabulary padded to a multiple of 64.
  The embedding sits on the first pipeline stage, the head on the last.
- Routed experts: each expert split by ``tp``; with expert parallelism whole experts are spread
  over ``ep`` ranks (``ceil((E + redundant) / ep)`` per rank, counting EPLB's redundant
  copies of hot experts). Router and norms are replicated.
- Quantized formats apply to linear layers (``scope='linear'``) or routed experts only
  (``scope='experts'``, gpt-oss mxfp4); embeddings, head, router, norms, biases and the vision
  tower stay in the model dtype, as in the released checkpoints.
- Padded experts: an engine whose MoE kernel needs tile-aligned shapes stores each routed
  expert's matrices padded (``expert_padding``: hidden size and per-rank intermediate size
  rounded up to those multiples; vLLM's MXFP4 Marlin kernel, ``specs/engines.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.specs.dtypes import NumberFormat
from inferplan.specs.kv import kv_heads_per_rank
from inferplan.specs.model import AttentionSpec, FfnSpec, LayerGroup, ModelSpec
from inferplan.specs.parallel import Parallelism
from inferplan.specs.params import (
    attention_norm_params,
    attention_params,
    expert_params,
    ffn_matrices,
    vision_params,
)

VOCAB_PADDING = 64


@dataclass(frozen=True)
class WeightFormats:
    """The format of each weight class: linear layers, routed experts, everything else."""

    linear: NumberFormat
    experts: NumberFormat
    other: NumberFormat


@dataclass(frozen=True)
class DeviceWeights:
    """Weight bytes on the most loaded device of a replica, by component."""

    by_component_bytes: dict[str, float]

    @property
    def total_bytes(self) -> float:
        return sum(self.by_component_bytes.values())


def _div(n: int, tp: int) -> int:
    return -(-n // tp)


def attention_rank_params(att: AttentionSpec, hidden: int, tp: int) -> tuple[int, int]:
    """(linear-weight params, other params) of one attention block on one TP rank."""
    if att.kind in ("linear", "none"):
        return _div(attention_params(att, hidden), tp), 0
    if att.kind == "mla":
        nope = att.head_dim - att.qk_rope_head_dim
        q_lora = att.q_lora_rank or 0
        replicated = hidden * q_lora + hidden * (att.kv_lora_rank + att.qk_rope_head_dim)
        q_b = (
            q_lora * att.num_heads * att.head_dim
            if q_lora
            else hidden * att.num_heads * att.head_dim
        )
        split = q_b + att.kv_lora_rank * att.num_heads * (nope + att.v_head_dim)
        split += att.num_heads * att.v_head_dim * hidden
        return replicated + _div(split, tp), attention_norm_params(att)
    nh, hd = att.num_heads, att.head_dim
    kv_heads = kv_heads_per_rank(att, tp)
    q_width = nh * hd * (2 if att.has_query_gate else 1)
    linear = _div(hidden * q_width + nh * hd * hidden, tp) + 2 * hidden * kv_heads * hd
    other = 0
    if att.has_qkv_bias:
        other += _div(nh * hd, tp) + 2 * kv_heads * hd
    if att.has_o_bias:
        other += hidden
    if att.has_qk_norm:
        other += 2 * hd
    if att.has_sinks:
        other += _div(nh, tp)
    return linear, other


def _round_up(n: int, multiple: int) -> int:
    return _div(n, multiple) * multiple


def padded_expert_params(
    ffn: FfnSpec, hidden: int, shards: int, padding: tuple[int, int] | None
) -> int:
    """One routed expert's matrix params on a rank holding ``1 / shards`` of its intermediate
    size, padded to ``padding`` = (hidden, intermediate) multiples (None: as stored)."""
    inner = _div(ffn.intermediate_size, shards)
    if padding is not None:
        hidden, inner = _round_up(hidden, padding[0]), _round_up(inner, padding[1])
    return ffn_matrices(ffn) * hidden * inner


def ffn_rank_bytes(
    ffn: FfnSpec,
    hidden: int,
    par: Parallelism,
    fmt: WeightFormats,
    expert_padding: tuple[int, int] | None = None,
) -> float:
    """One FFN block's bytes on one rank (routed experts padded by ``expert_padding``)."""
    if ffn.kind == "none":
        return 0.0
    matrices = ffn_matrices(ffn)
    if ffn.kind == "dense":
        return fmt.linear.bytes_for(_div(matrices * hidden * ffn.intermediate_size, par.tp))
    one = matrices * hidden * ffn.intermediate_size  # the matrices; biases stay in model dtype
    bias = expert_params(ffn, hidden) - one
    if par.enable_expert_parallel:
        slots = _div(ffn.num_experts + par.num_redundant_experts, par.ep)
        routed = slots * one
        routed_bias = slots * bias
        if expert_padding is not None:
            routed = slots * padded_expert_params(ffn, hidden, 1, expert_padding)
    else:
        routed = _div(ffn.num_experts * one, par.tp)
        routed_bias = _div(ffn.num_experts * bias, par.tp)
        if expert_padding is not None:
            routed = ffn.num_experts * padded_expert_params(ffn, hidden, par.tp, expert_padding)
    shared = _div(matrices * hidden * ffn.shared_intermediate_size, par.tp)
    router = (
        hidden * ffn.num_experts + ffn.router_bias_size + (hidden if ffn.has_shared_gate else 0)
    )
    return (
        fmt.experts.bytes_for(routed)
        + fmt.linear.bytes_for(shared)
        + fmt.other.bytes_for(router + routed_bias)
    )


def _layer_bytes(
    layer: LayerGroup,
    spec: ModelSpec,
    par: Parallelism,
    fmt: WeightFormats,
    expert_padding: tuple[int, int] | None = None,
) -> tuple[float, float, float]:
    """(attention, ffn, norms) bytes of one layer on one rank."""
    linear, other = attention_rank_params(layer.attention, spec.hidden_size, par.tp)
    attention = fmt.linear.bytes_for(linear) + fmt.other.bytes_for(other)
    ffn = ffn_rank_bytes(layer.ffn, spec.hidden_size, par, fmt, expert_padding)
    norms = fmt.other.bytes_for(spec.norms_per_layer * spec.hidden_size)
    return attention, ffn, norms


def stage_weights(
    spec: ModelSpec,
    par: Parallelism,
    fmt: WeightFormats,
    layers: tuple[LayerGroup, ...],
    *,
    is_first: bool,
    is_last: bool,
    expert_padding: tuple[int, int] | None = None,
) -> DeviceWeights:
    """Weight bytes on one device of the pipeline stage that holds ``layers``."""
    parts = {"embedding": 0.0, "lm_head": 0.0, "attention": 0.0, "ffn": 0.0, "norms": 0.0}
    cache: dict[int, tuple[float, float, float]] = {}
    for layer in layers:
        key = id(layer)
        if key not in cache:
            cache[key] = _layer_bytes(layer, spec, par, fmt, expert_padding)
        attention, ffn, norms = cache[key]
        parts["attention"] += attention
        parts["ffn"] += ffn
        parts["norms"] += norms
    padded_vocab = _div(spec.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    table = fmt.other.bytes_for(_div(padded_vocab, par.tp) * spec.hidden_size)
    if is_first:
        parts["embedding"] = table
        if spec.vision:
            parts["vision_encoder"] = fmt.other.bytes_for(
                _div(vision_params(spec.vision, spec.hidden_size), par.tp)
            )
    if is_last and not (spec.tie_word_embeddings and is_first):
        parts["lm_head"] = table  # a tied head is the embedding itself on a single stage
    if is_last:
        parts["norms"] += fmt.other.bytes_for(spec.hidden_size)  # the final norm
    return DeviceWeights(parts)
