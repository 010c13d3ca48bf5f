"""ModelSpec: one model's architecture, read from a Hugging Face ``config.json``.

A model is a stack of decoder layers; each layer is one attention block (GQA/MHA/MQA, MLA,
sliding-window, or linear attention with a fixed per-sequence state) and one FFN block (dense
SwiGLU or MoE with routed and shared experts). Layers that share a shape are grouped, so that
parameter counts and step times cost O(number of distinct layer kinds), not O(layers).

The reading rules follow the Hugging Face modelling code of each family (``transformers``
``models/<family>/configuration_*.py``): which fields decide sliding windows (``layer_types``,
Gemma-3's ``sliding_window_pattern``), hybrid layers (Qwen3-Next ``full_attention_interval``),
dense-first MoE stacks (DeepSeek ``first_k_dense_replace``, Qwen3-MoE ``mlp_only_layers`` and
``decoder_sparse_step``), Nemotron-H blocks of one sublayer each (``hybrid_override_pattern``,
``specs/hybrid.py``: a layer's absent half is kind ``none``), Llama 4's interleaved MoE
(``interleave_moe_layer_step``) and chunked attention (``specs/chunked.py``). Per-family extras
(q/k norms, biases, attention sinks, gated queries, routing-correction biases; GLM-4-MoE's q/k norm
by ``use_qk_norm`` and its ``attention_bias`` on q/k/v only) are switched by ``model_type``;
everything else comes from the fields themselves, so an unknown family with the standard fields
reads as a dense decoder, and one without them fails with an error naming the missing field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from inferplan.errors import InferplanError
from inferplan.limits import MAX_CONFIG_LAYERS, MAX_CONFIG_POSITIONS
from inferplan.specs.chunked import with_chunks
from inferplan.specs.config_fields import ConfigFields
from inferplan.specs.hybrid import hybrid_blocks, mamba2_fields
from inferplan.specs.sparse import IndexerSpec, indexer_spec
from inferplan.specs.vision import VisionSpec, parse_vision

AttentionKind = Literal["gqa", "mla", "linear", "none"]
FfnKind = Literal["dense", "moe", "none"]

# Families whose attention normalises q and k per head (adds 2 * head_dim weights per layer).
_QK_NORM_FAMILIES = {
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_vl_moe_text",
    "gemma3",
    "gemma3_text",
}
# q/k RMSNorm switched by ``use_qk_norm`` (GLM-4.6 on, GLM-4.5-Air off; Llama 4's is weightless).
_QK_NORM_FLAG_FAMILIES = {"glm4_moe"}
# ``attention_bias`` on q/k/v only (HF ``Glm4MoeAttention`` builds o_proj without bias).
_QKV_ONLY_BIAS_FAMILIES = {"glm4_moe"}
# A bias per expert in the router (DeepSeek-V3/GLM-4-MoE ``e_score_correction_bias``, gpt-oss).
_ROUTER_BIAS_FAMILIES = {
    "gpt_oss",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k2",
    "nemotron_h",
    "glm4_moe",
}
# Families with four RMSNorms per layer (pre/post attention and pre/post FFN).
_FOUR_NORM_FAMILIES = {"gemma2", "gemma3", "gemma3_text"}
# Families with biases on q/k/v only.
_QKV_BIAS_FAMILIES = {"qwen2", "qwen2_moe"}
# MLP activations without a gate (two matrices per MLP, not SwiGLU's three): Nemotron-H.
_UNGATED_ACTIVATIONS = {"relu2"}
# HF ``Gemma3TextConfig`` defaults for fields the released multimodal configs omit.
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "max_position_embeddings": 131_072,
    "tie_word_embeddings": True,
    "sliding_window_pattern": 6,
    "head_dim": 256,
}


@dataclass(frozen=True)
class AttentionSpec:
    """One layer's attention block. Head counts are for the whole model (before sharding)."""

    kind: AttentionKind
    num_heads: int
    num_kv_heads: int
    head_dim: int  # q/k head dim (MLA: nope + rope)
    v_head_dim: int
    window_tokens: int | None = None  # sliding window; None = full attention
    has_qk_norm: bool = False
    has_qkv_bias: bool = False
    has_o_bias: bool = False
    has_sinks: bool = False
    has_query_gate: bool = False  # Qwen3-Next gated attention: q_proj is twice as wide
    # MLA (DeepSeek-V2/V3, Kimi-K2)
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # Linear attention (Qwen3-Next Gated DeltaNet; Mamba-2 with key heads = groups, key head
    # dim = SSM state size, value heads/dim = Mamba heads/head dim)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    conv_kernel_size: int = 0
    is_mamba2: bool = False  # Nemotron-H Mamba-2 mixer (its own projection shapes)
    has_fp32_state: bool = False  # recurrent state kept in fp32 (mamba_ssm_cache_dtype)
    chunk_tokens: int | None = None  # chunked local attention (Llama 4, specs/chunked.py)
    indexer: IndexerSpec | None = None  # DeepSeek-V3.2 sparse attention (specs/sparse.py)


@dataclass(frozen=True)
class FfnSpec:
    """One layer's FFN block: a dense SwiGLU MLP, or routed experts plus optional shared ones."""

    kind: FfnKind
    intermediate_size: int  # dense width, or one routed expert's width
    num_experts: int = 0
    num_experts_per_tok: int = 0
    shared_intermediate_size: int = 0  # total width of the shared experts
    has_expert_bias: bool = False  # gpt-oss experts carry biases
    router_bias_size: int = 0  # gpt-oss router bias / DeepSeek e_score_correction_bias
    has_shared_gate: bool = False  # Qwen3-Next: a sigmoid gate on the shared expert
    is_gated: bool = True  # SwiGLU (gate, up, down); False: up and down only (relu2)


@dataclass(frozen=True)
class LayerGroup:
    """``num_layers`` consecutive-or-not layers that share an attention and an FFN shape."""

    attention: AttentionSpec
    ffn: FfnSpec
    num_layers: int


@dataclass(frozen=True)
class QuantizationDefault:
    """A checkpoint's own quantization (``quantization_config``): format and which weights."""

    method: str  # a WEIGHT_FORMATS key
    scope: Literal["linear", "experts"]  # all linear layers, or routed experts only


@dataclass(frozen=True)
class ModelSpec:
    """A model's architecture. ``layers`` is in stack order (index = layer id)."""

    name: str
    model_type: str
    hidden_size: int
    vocab_size: int
    layers: tuple[LayerGroup, ...]  # one entry per layer, in order; entries are shared objects
    tie_word_embeddings: bool
    max_position_embeddings: int
    norms_per_layer: int
    dtype: str  # activation / unquantised weight dtype (a KV_FORMATS key)
    quantization: QuantizationDefault | None = None
    num_mtp_layers: int = 0
    vision: VisionSpec | None = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        """Distinct layer shapes with their counts, in order of first appearance."""
        return group_layers(self.layers)

    @property
    def is_moe(self) -> bool:
        return any(g.ffn.kind == "moe" for g in self.layers)

    @property
    def moe_ffn(self) -> FfnSpec | None:
        return next((g.ffn for g in self.layers if g.ffn.kind == "moe"), None)


def group_layers(layers: tuple[LayerGroup, ...]) -> tuple[LayerGroup, ...]:
    """Collapse a per-layer list into (shape, count) groups in order of first appearance."""
    counts: dict[tuple[AttentionSpec, FfnSpec], int] = {}
    for layer in layers:
        key = (layer.attention, layer.ffn)
        counts[key] = counts.get(key, 0) + layer.num_layers
    return tuple(LayerGroup(att, ffn, n) for (att, ffn), n in counts.items())


def parse_config(cfg: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """Read a Hugging Face ``config.json`` dict into a ModelSpec."""
    if not isinstance(cfg, dict):
        raise InferplanError(f"{source}: expected a JSON object at the top level")
    top = ConfigFields(cfg, source)
    vision = parse_vision(top)
    text = _text_config(top)
    f = ConfigFields(text, source)
    model_type = f.get_str("model_type", "") or top.get_str("model_type", "unknown")
    hidden = f.get_int("hidden_size")
    num_layers = f.get_int("num_hidden_layers", maximum=MAX_CONFIG_LAYERS)
    if f.has("hybrid_override_pattern"):  # Nemotron-H: one block per layer (specs/hybrid.py)
        blocks = hybrid_blocks(f, num_layers)
        attentions = [_attention(f, model_type, m) if m else NO_ATTENTION for m, _ in blocks]
        ffns = [_block_ffn(f, model_type, kind) for _, kind in blocks]
    else:
        attentions = with_chunks(f, model_type, _layer_attentions(f, model_type, num_layers))
        ffns = _layer_ffns(f, model_type, num_layers)
    layers = tuple(LayerGroup(a, m, 1) for a, m in zip(attentions, ffns, strict=True))
    dtype_name = top.get_str("torch_dtype", "") or f.get_str("torch_dtype", "bfloat16")
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        vocab_size=f.get_int("vocab_size"),
        layers=layers,
        tie_word_embeddings=f.get_bool("tie_word_embeddings", False),
        max_position_embeddings=f.get_int(
            "max_position_embeddings", 4096, maximum=MAX_CONFIG_POSITIONS
        ),
        norms_per_layer=_norms_per_layer(model_type),
        dtype={"float16": "fp16", "float32": "bf16"}.get(dtype_name, "bf16"),
        quantization=_parse_quantization(top),
        num_mtp_layers=f.get_int(
            "num_nextn_predict_layers", 0, minimum=0, maximum=MAX_CONFIG_LAYERS
        ),
        vision=vision,
    )


def _text_config(top: ConfigFields) -> dict[str, Any]:
    """The language model's fields: top level, or ``text_config`` for multimodal wrappers."""
    cfg = top.cfg
    inner = top.get_dict("text_config")
    if inner is None:
        return cfg
    text = dict(inner)
    if text.get("model_type") in {"gemma3_text"} or cfg.get("model_type") == "gemma3":
        for key, value in _GEMMA3_TEXT_DEFAULTS.items():
            text.setdefault(key, value)
    for key in ("tie_word_embeddings", "torch_dtype"):
        if key in cfg and key not in text:
            text[key] = cfg[key]
    return text


def _layer_kinds(f: ConfigFields, model_type: str, num_layers: int) -> list[str]:
    """Per layer: ``full_attention``, ``sliding_attention`` or ``linear_attention``."""
    layer_types = f.get_str_list("layer_types")
    if layer_types is not None:
        if len(layer_types) != num_layers:
            raise InferplanError(
                f"{f.source}: field 'layer_types' has {len(layer_types)} entries, "
                f"not num_hidden_layers={num_layers}"
            )
        return layer_types
    if f.has("full_attention_interval"):
        every = f.get_int("full_attention_interval")
        return [
            "full_attention" if (i + 1) % every == 0 else "linear_attention"
            for i in range(num_layers)
        ]
    if model_type in {"gemma3", "gemma3_text"}:
        every = f.get_int("sliding_window_pattern", 6)
        return [
            "full_attention" if (i + 1) % every == 0 else "sliding_attention"
            for i in range(num_layers)
        ]
    uses_window = f.has("sliding_window") and (
        not f.has("use_sliding_window") or f.get_bool("use_sliding_window", True)
    )
    return ["sliding_attention" if uses_window else "full_attention"] * num_layers


def _norms_per_layer(model_type: str) -> int:
    if model_type == "nemotron_h":  # one block per layer, one pre-norm
        return 1
    return 4 if model_type in _FOUR_NORM_FAMILIES else 2


NO_ATTENTION = AttentionSpec(kind="none", num_heads=0, num_kv_heads=0, head_dim=0, v_head_dim=0)
NO_FFN = FfnSpec(kind="none", intermediate_size=0)


def _block_ffn(f: ConfigFields, model_type: str, kind: str | None) -> FfnSpec:
    if kind == "moe":
        return _moe_ffn(f, model_type, _num_routed_experts(f))
    if kind == "dense":
        return FfnSpec("dense", f.get_int("intermediate_size"), is_gated=_gated(f))
    return NO_FFN


def _gated(f: ConfigFields) -> bool:
    return f.get_str("mlp_hidden_act", "silu") not in _UNGATED_ACTIVATIONS


def _layer_attentions(f: ConfigFields, model_type: str, num_layers: int) -> list[AttentionSpec]:
    kinds = _layer_kinds(f, model_type, num_layers)
    cache: dict[str, AttentionSpec] = {}
    out = []
    for kind in kinds:
        if kind not in cache:
            cache[kind] = _attention(f, model_type, kind)
        out.append(cache[kind])
    return out


def _attention(f: ConfigFields, model_type: str, kind: str) -> AttentionSpec:
    num_heads = f.get_int("num_attention_heads")
    if kind == "mamba2":
        return AttentionSpec(num_heads=num_heads, **mamba2_fields(f))
    if kind == "linear_attention":
        return AttentionSpec(
            kind="linear",
            num_heads=num_heads,
            num_kv_heads=0,
            head_dim=0,
            v_head_dim=0,
            linear_num_key_heads=f.get_int("linear_num_key_heads"),
            linear_num_value_heads=f.get_int("linear_num_value_heads"),
            linear_key_head_dim=f.get_int("linear_key_head_dim"),
            linear_value_head_dim=f.get_int("linear_value_head_dim"),
            conv_kernel_size=f.get_int("linear_conv_kernel_dim"),
        )
    if kind not in {"full_attention", "sliding_attention"}:
        raise InferplanError(
            f"{f.source}: layer type {kind!r} is not supported; "
            "valid: full_attention, sliding_attention, linear_attention"
        )
    window = (
        f.get_int("sliding_window", maximum=MAX_CONFIG_POSITIONS)
        if kind == "sliding_attention"
        else None
    )
    if f.has("kv_lora_rank"):
        return _mla_attention(f, num_heads, window)
    head_dim = f.opt_int("head_dim") or f.get_int("hidden_size") // num_heads
    if head_dim < 1:
        raise InferplanError(
            f"{f.source}: hidden_size={f.get_int('hidden_size')} is smaller than "
            f"num_attention_heads={num_heads} (head_dim would be 0); give head_dim"
        )
    num_kv_heads = f.get_int("num_key_value_heads", num_heads)
    if num_heads % num_kv_heads:
        raise InferplanError(
            f"{f.source}: num_attention_heads={num_heads} is not a multiple of "
            f"num_key_value_heads={num_kv_heads}"
        )
    has_bias = f.get_bool("attention_bias", False)
    has_qk_norm = model_type in _QK_NORM_FAMILIES or (
        model_type in _QK_NORM_FLAG_FAMILIES and f.get_bool("use_qk_norm", False)
    )
    return AttentionSpec(
        kind="gqa",
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        window_tokens=window,
        has_qk_norm=has_qk_norm,
        has_qkv_bias=has_bias or model_type in _QKV_BIAS_FAMILIES,
        has_o_bias=has_bias and model_type not in _QKV_ONLY_BIAS_FAMILIES,
        has_sinks=model_type == "gpt_oss",
        has_query_gate=model_type == "qwen3_next",
    )


def _mla_attention(f: ConfigFields, num_heads: int, window: int | None) -> AttentionSpec:
    nope = f.get_int("qk_nope_head_dim")
    rope = f.get_int("qk_rope_head_dim")
    return AttentionSpec(
        kind="mla",
        num_heads=num_heads,
        num_kv_heads=1,  # one shared latent per token (num_key_value_heads is nominal)
        head_dim=nope + rope,
        v_head_dim=f.get_int("v_head_dim"),
        window_tokens=window,
        q_lora_rank=f.opt_int("q_lora_rank"),
        kv_lora_rank=f.get_int("kv_lora_rank"),
        qk_rope_head_dim=rope,
        indexer=indexer_spec(f),
    )


def _num_routed_experts(f: ConfigFields) -> int:
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        if f.has(key):
            return f.get_int(key, minimum=0)
    return 0


def _is_sparse_layer(f: ConfigFields, i: int) -> bool:
    if i < f.get_int("first_k_dense_replace", 0, minimum=0):
        return False
    mlp_only = f.get_int_list("mlp_only_layers", maximum=MAX_CONFIG_LAYERS)
    if i in mlp_only:
        return False
    step = 1
    for key in ("decoder_sparse_step", "interleave_moe_layer_step"):  # Qwen2-MoE, Llama 4
        if f.has(key):
            step = f.get_int(key, 1)
    freq = f.get_int("moe_layer_freq", 1) if f.has("moe_layer_freq") else 1
    return (i + 1) % step == 0 and i % freq == 0


def _layer_ffns(f: ConfigFields, model_type: str, num_layers: int) -> list[FfnSpec]:
    num_experts = _num_routed_experts(f)
    dense = None
    moe = None
    out = []
    for i in range(num_layers):
        if num_experts and _is_sparse_layer(f, i):
            moe = moe or _moe_ffn(f, model_type, num_experts)
            out.append(moe)
        else:
            # Llama 4 names its dense layers' width intermediate_size_mlp (the other is an expert's)
            width = f.opt_int("intermediate_size_mlp") or f.get_int("intermediate_size")
            dense = dense or FfnSpec(kind="dense", intermediate_size=width)
            out.append(dense)
    return out


def _moe_ffn(f: ConfigFields, model_type: str, num_experts: int) -> FfnSpec:
    width = f.opt_int("moe_intermediate_size") or f.get_int("intermediate_size")
    top_k = f.opt_int("num_experts_per_tok") or f.get_int("experts_per_token")
    if top_k > num_experts:
        raise InferplanError(
            f"{f.source}: num_experts_per_tok={top_k} exceeds the {num_experts} routed experts"
        )
    shared = 0
    if f.has("moe_shared_expert_intermediate_size"):  # Nemotron-H
        shared = f.get_int("moe_shared_expert_intermediate_size", minimum=0)
    elif f.has("n_shared_experts"):
        shared = f.get_int("n_shared_experts", minimum=0) * width
    elif f.has("shared_expert_intermediate_size"):
        shared = f.get_int("shared_expert_intermediate_size", minimum=0)
    elif model_type == "llama4_text":  # every Llama 4 MoE layer has one shared expert
        shared = width
    router_bias = num_experts if model_type in _ROUTER_BIAS_FAMILIES else 0
    if model_type in {"deepseek_v2"}:
        router_bias = 0
    return FfnSpec(
        kind="moe",
        intermediate_size=width,
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        shared_intermediate_size=shared,
        has_expert_bias=model_type == "gpt_oss",
        router_bias_size=router_bias,
        has_shared_gate=model_type in {"qwen3_next", "qwen2_moe"} and shared > 0,
        is_gated=_gated(f),
    )


def _parse_quantization(top: ConfigFields) -> QuantizationDefault | None:
    quant = top.get_dict("quantization_config")
    if quant is None:
        return None
    fields = ConfigFields(quant, f"{top.source} (quantization_config)")
    method = fields.get_str("quant_method", "").lower()
    source = top.source
    if method == "fp8":
        return QuantizationDefault("fp8", "linear")
    if method == "mxfp4":
        # gpt-oss: only the MoE experts are mxfp4 (modules_to_not_convert lists the rest).
        return QuantizationDefault("mxfp4", "experts")
    if method in {"awq", "gptq"} and fields.get_int("bits", 4) == 4:
        return QuantizationDefault("int4", "linear")
    if method in {"compressed-tensors", "modelopt"}:
        return QuantizationDefault("fp8", "linear")
    raise InferplanError(
        f"{source}: quantization_config.quant_method {method!r} is not supported; "
        "valid: fp8, mxfp4, awq, gptq, compressed-tensors, modelopt (or pass --quantization)"
    )
