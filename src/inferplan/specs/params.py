"""Exact parameter counts, total and active per token, split by component.

Counts follow the Hugging Face module shapes of each family: every linear weight, every bias the
architecture has, every norm weight; input embedding and LM head apart unless tied. Formulas
(H hidden, nh/nkv heads, hd head dim, I FFN width, E experts, V vocab):

- GQA attention: ``H*nh*hd + 2*H*nkv*hd + nh*hd*H`` (+ biases, + ``2*hd`` q/k norms, + ``nh``
  gpt-oss sinks; Qwen3-Next's gated attention doubles the q projection).
- MLA: ``H*q_lora + q_lora*nh*(nope+rope) + H*(kv_lora+rope) + kv_lora*nh*(nope+v) + nh*v*H``;
  its ``q_a`` / ``kv_a`` layernorms count as norms.
- Gated DeltaNet (Qwen3-Next linear attention), with Kd = nk*dk and Vd = nv*dv:
  ``H*(2Kd+2Vd) + 2*H*nv + (2Kd+Vd)*conv_k + 2*nv + dv + Vd*H``.
- SwiGLU MLP ``3*H*I``; MoE ``E*3*H*I + H*E`` router (+ router bias, + shared experts,
  + gpt-oss expert biases ``E*(2I + H)``, + Qwen3-Next shared-expert gate ``H``).
- DeepSeek MTP module: one MoE decoder layer + enorm + hnorm + ``eh_proj`` (2H -> H) + a head
  norm, with its own embedding and head copies (DeepSeek-V3 README: 671B + 14B MTP = 685B).
- SigLIP vision tower (Gemma-3): patch embedding, position embedding, per layer attention with
  biases, two LayerNorms with biases and a GELU MLP with biases, a final LayerNorm; projector
  ``mm_input_projection`` (vision H x text H) and its RMSNorm.

"Active" counts what one token touches: every non-expert weight, the top-k routed experts and
the shared experts, embedding included (the convention of the published DeepSeek and Qwen
figures). ``active_compute`` leaves out the input embedding, which is a table lookup with no
FLOPs (the convention of gpt-oss's published 5.1B / 3.6B); the step-time model uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferplan.specs.model import AttentionSpec, FfnSpec, LayerGroup, ModelSpec, VisionSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by component. ``routed_experts`` is all experts (the memory axis)."""

    embedding: int = 0
    lm_head: int = 0
    attention: int = 0
    dense_mlp: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    router: int = 0
    norms: int = 0
    mtp: int = 0
    vision_encoder: int = 0
    routed_experts_active: int = 0  # top-k of num_experts, per token
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Every resident weight of the main model, vision encoder included, MTP excluded."""
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.dense_mlp
            + self.routed_experts
            + self.shared_experts
            + self.router
            + self.norms
            + self.vision_encoder
        )

    @property
    def total_with_mtp(self) -> int:
        return self.total + self.mtp

    @property
    def active(self) -> int:
        """Weights one text token touches, input embedding included."""
        return self.total - self.vision_encoder - self.routed_experts + self.routed_experts_active

    @property
    def active_compute(self) -> int:
        """Weights one token multiplies by (no input-embedding lookup): FLOPs ~ 2 x this."""
        return self.active - self.embedding

    def as_dict(self) -> dict[str, int]:
        return {
            "embedding": self.embedding,
            "lm_head": self.lm_head,
            "attention": self.attention,
            "dense_mlp": self.dense_mlp,
            "routed_experts": self.routed_experts,
            "shared_experts": self.shared_experts,
            "router": self.router,
            "norms": self.norms,
            "vision_encoder": self.vision_encoder,
            "mtp": self.mtp,
        }


def attention_params(att: AttentionSpec, hidden: int) -> int:
    """Weights (and biases) of one attention block, its norms excluded for MLA's q_a/kv_a."""
    if att.kind == "none":
        return 0
    if att.kind == "linear":
        return _mamba2_params(att, hidden) if att.is_mamba2 else _gated_deltanet_params(att, hidden)
    if att.kind == "mla":
        return _mla_params(att, hidden)
    nh, nkv, hd = att.num_heads, att.num_kv_heads, att.head_dim
    q_width = nh * hd * (2 if att.has_query_gate else 1)
    count = hidden * q_width + 2 * hidden * nkv * hd + nh * hd * hidden
    if att.has_qkv_bias:
        count += nh * hd + 2 * nkv * hd
    if att.has_o_bias:
        count += hidden
    if att.has_qk_norm:
        count += 2 * hd
    if att.has_sinks:
        count += nh
    return count


def attention_norm_params(att: AttentionSpec) -> int:
    """Norms inside the attention block that are not per-layer norms (MLA's q_a / kv_a)."""
    if att.kind != "mla":
        return 0
    return (att.q_lora_rank or 0) + att.kv_lora_rank


def _mla_params(att: AttentionSpec, hidden: int) -> int:
    nh = att.num_heads
    nope = att.head_dim - att.qk_rope_head_dim
    if att.q_lora_rank:
        q = hidden * att.q_lora_rank + att.q_lora_rank * nh * att.head_dim
    else:
        q = hidden * nh * att.head_dim
    kv_a = hidden * (att.kv_lora_rank + att.qk_rope_head_dim)
    kv_b = att.kv_lora_rank * nh * (nope + att.v_head_dim)
    return q + kv_a + kv_b + nh * att.v_head_dim * hidden


def _gated_deltanet_params(att: AttentionSpec, hidden: int) -> int:
    key_dim = att.linear_num_key_heads * att.linear_key_head_dim
    value_dim = att.linear_num_value_heads * att.linear_value_head_dim
    nv = att.linear_num_value_heads
    in_proj = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * nv
    conv = (2 * key_dim + value_dim) * att.conv_kernel_size
    return in_proj + conv + 2 * nv + att.linear_value_head_dim + value_dim * hidden


def _mamba2_params(att: AttentionSpec, hidden: int) -> int:
    """HF ``NemotronHMamba2Mixer``: in_proj to (z, x, B, C, dt), a biased depthwise conv over
    (x, B, C), per-head dt_bias, A_log and D, a gated RMSNorm over the inner width, out_proj."""
    inner = att.linear_num_value_heads * att.linear_value_head_dim
    groups = att.linear_num_key_heads * att.linear_key_head_dim
    heads = att.linear_num_value_heads
    conv_dim = inner + 2 * groups
    in_proj = hidden * (2 * inner + 2 * groups + heads)
    return in_proj + conv_dim * (att.conv_kernel_size + 1) + 3 * heads + inner + inner * hidden


def ffn_matrices(ffn: FfnSpec) -> int:
    """Weight matrices of one MLP or expert: gate, up, down (SwiGLU) or up, down (relu2)."""
    return 3 if ffn.is_gated else 2


def expert_params(ffn: FfnSpec, hidden: int) -> int:
    """One routed expert (SwiGLU or ungated), with gpt-oss biases when present."""
    count = ffn_matrices(ffn) * hidden * ffn.intermediate_size
    if ffn.has_expert_bias:
        count += 2 * ffn.intermediate_size + hidden
    return count


def ffn_params(ffn: FfnSpec, hidden: int) -> dict[str, int]:
    """One FFN block split into dense / routed (all and active) / shared / router."""
    if ffn.kind == "none":
        return {}
    if ffn.kind == "dense":
        return {"dense_mlp": ffn_matrices(ffn) * hidden * ffn.intermediate_size}
    shared = ffn_matrices(ffn) * hidden * ffn.shared_intermediate_size
    shared += hidden if ffn.has_shared_gate else 0
    one_expert = expert_params(ffn, hidden)
    return {
        "routed_experts": ffn.num_experts * one_expert,
        "routed_experts_active": ffn.num_experts_per_tok * one_expert,
        "shared_experts": shared,
        "router": hidden * ffn.num_experts + ffn.router_bias_size,
    }


def layer_params(layer: LayerGroup, hidden: int, norms_per_layer: int) -> dict[str, int]:
    """All weights of ``layer.num_layers`` layers of one shape, by component."""
    n = layer.num_layers
    counts = {k: v * n for k, v in ffn_params(layer.ffn, hidden).items()}
    counts["attention"] = attention_params(layer.attention, hidden) * n
    norms = norms_per_layer * hidden + attention_norm_params(layer.attention)
    counts["norms"] = norms * n
    return counts


def vision_params(vision: VisionSpec, text_hidden: int) -> int:
    """SigLIP vision tower plus Gemma-3's multimodal projector."""
    h, inner = vision.hidden_size, vision.intermediate_size
    num_patches = (vision.image_size // vision.patch_size) ** 2
    embed = 3 * vision.patch_size**2 * h + h + num_patches * h
    per_layer = 4 * (h * h + h) + 2 * (2 * h) + (h * inner + inner) + (inner * h + h)
    return embed + vision.num_layers * per_layer + 2 * h + h * text_hidden + h


def count_params(spec: ModelSpec) -> ParamCounts:
    """Exact parameter counts of ``spec`` by component."""
    hidden = spec.hidden_size
    sums: dict[str, int] = {}
    for group in spec.layer_groups:
        for key, value in layer_params(group, hidden, spec.norms_per_layer).items():
            sums[key] = sums.get(key, 0) + value
    embedding = spec.vocab_size * hidden
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if spec.tie_word_embeddings else embedding,
        attention=sums.get("attention", 0),
        dense_mlp=sums.get("dense_mlp", 0),
        routed_experts=sums.get("routed_experts", 0),
        shared_experts=sums.get("shared_experts", 0),
        router=sums.get("router", 0),
        norms=sums.get("norms", 0) + hidden,  # + the final norm
        mtp=_mtp_params(spec),
        vision_encoder=vision_params(spec.vision, hidden) if spec.vision else 0,
        routed_experts_active=sums.get("routed_experts_active", 0),
    )


def _mtp_params(spec: ModelSpec) -> int:
    """DeepSeek-style next-token-prediction modules (num_nextn_predict_layers)."""
    if not spec.num_mtp_layers:
        return 0
    hidden = spec.hidden_size
    last = spec.layers[-1]
    layer = sum(
        v
        for k, v in layer_params(
            LayerGroup(last.attention, last.ffn, 1), hidden, spec.norms_per_layer
        ).items()
        if k != "routed_experts_active"
    )
    extras = 2 * hidden + 2 * hidden * hidden + hidden  # enorm, hnorm, eh_proj, head norm
    embed_and_head = 2 * spec.vocab_size * hidden
    return spec.num_mtp_layers * (layer + extras + embed_and_head)
