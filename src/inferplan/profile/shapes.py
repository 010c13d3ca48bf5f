"""What the profiler times: each operator's shapes on one device, as the roofline counts them.

A deployment's bottleneck pipeline stage (``RooflineModel.groups``) has one or a few distinct layer
kinds (dense-first then MoE layers, sliding-window and global attention, linear and full
attention). Each kind becomes a ``LayerKind`` of plain integer shapes on one TP/EP rank:

- ``attn_proj``: the projection GEMMs (GQA: fused q/k/v, then o; a gated query doubles q; MLA:
  q_a/q_b or q, kv_a, kv_b, o with q_a and kv_a replicated; linear attention: one GEMM with the
  block's weights, ``[hidden, params / hidden]``);
- the attention core (GQA heads on this rank; MLA prefill expanded to per-head K/V after an
  up-projection of the cached latents, V padded to the q/k head dim as vLLM pads it for
  FlashAttention; MLA decode absorbed: one latent "head" of ``kv_lora_rank + qk_rope_head_dim``);
  linear-attention layers have none (the table format has no operator for their recurrent
  core, so the roofline keeps it);
- the FFN: dense SwiGLU (``[hidden, 2*width]`` then ``[width, hidden]``), or router, shared
  experts and routed experts (whole experts per EP rank, or every expert TP-sharded);
- elementwise passes: a residual add and RMSNorm per norm of the layer, RoPE on q and k;
- per step, the LM head (vocabulary padded to 64 and split by TP).

A table holds one time per operator, so where several layer kinds run an operator the profiler
writes their count-weighted mean, and ``TableModel`` multiplies it by the layers that run it:
the step total is then the same as timing every layer.

``TINY`` caps every dimension (hidden 256, widths 512, 4 heads of at most 64, MLA ranks 128,
8 experts of which 2 per token, vocabulary 2,048) so that a CPU run takes seconds; the KV/query
head ratio is kept where the cap allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import efficiency_for
from inferplan.perf.moe import expected_experts_touched
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.kv import kv_heads_per_rank
from inferplan.specs.model import AttentionSpec, FfnSpec
from inferplan.specs.parallel import Parallelism


@dataclass(frozen=True)
class Caps:
    """Upper bounds on every dimension the profiler allocates."""

    hidden: int
    width: int
    heads: int
    head_dim: int
    rank: int
    experts: int
    top_k: int
    vocab: int


UNCAPPED = Caps(*(2**62,) * 8)
TINY = Caps(hidden=256, width=512, heads=4, head_dim=64, rank=128, experts=8, top_k=2, vocab=2048)


@dataclass(frozen=True)
class Gemm:
    """``[tokens, k] @ [k, n]``."""

    k: int
    n: int


@dataclass(frozen=True)
class Router:
    """``[hidden, num_experts]`` logits, softmax, top-k."""

    hidden: int
    num_experts: int
    top_k: int


@dataclass(frozen=True)
class SwiGlu:
    """``[hidden, 2*width]``, SiLU-and-multiply, ``[width, hidden]``."""

    hidden: int
    width: int


@dataclass(frozen=True)
class Experts:
    """Routed experts on the busiest rank: ``num_local`` SwiGLU experts of ``width``."""

    hidden: int
    width: int
    num_local: int
    num_experts: int
    top_k: int
    ep: int

    def routed(self, num_tokens: int) -> tuple[int, int]:
        """(experts touched, token rows each) on the busiest rank when ``num_tokens`` tokens are
        routed uniformly: the roofline's expected distinct experts and share of assignments,
        spread evenly (so at most one row of padding per expert)."""
        touched, share = expected_experts_touched(
            self.num_experts, self.top_k, num_tokens, 0.0, self.ep
        )
        assignments = num_tokens * self.top_k * (share if self.ep > 1 else 1.0)
        used = min(self.num_local, max(1, round(touched)))
        return used, max(1, math.ceil(assignments / used))


@dataclass(frozen=True)
class Attention:
    """One rank's attention core. Prefill: ``num_heads`` queries over ``num_kv_heads`` K/V heads
    of ``head_dim`` (values ``v_head_dim``); decode: over ``decode_kv_heads`` heads of
    ``decode_k_dim`` / ``decode_v_dim``. ``up_proj`` expands MLA's cached latents for prefill."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    decode_kv_heads: int
    decode_k_dim: int
    decode_v_dim: int
    window_tokens: int | None
    up_proj: Gemm | None
    rope_dim: int


@dataclass(frozen=True)
class Elementwise:
    hidden: int
    num_norms: int
    rope_heads: int
    rope_dim: int


@dataclass(frozen=True)
class LayerKind:
    """One distinct layer shape on one rank, and how many layers of the stage have it."""

    count: int
    attn_proj: tuple[Gemm, ...]
    elementwise: Elementwise
    attention: Attention | None
    mlp: SwiGlu | None
    router: Router | None
    shared_experts: SwiGlu | None
    experts: Experts | None

    def shape_of(self, operator: str) -> object | None:
        """This kind's shape for a table operator, or None when the kind does not run it."""
        return {
            "attn_proj": self.attn_proj,
            "mlp": self.mlp,
            "router": self.router,
            "shared_experts": self.shared_experts,
            "experts": self.experts,
            "elementwise": self.elementwise,
            "attn_prefill": self.attention,
            "attn_decode": self.attention,
        }[operator]


@dataclass(frozen=True)
class ProfileShapes:
    hidden: int
    kinds: tuple[LayerKind, ...]
    lm_head: Gemm
    is_tiny: bool


def _heads(att: AttentionSpec, tp: int, caps: Caps) -> tuple[int, int]:
    """(query heads, KV heads) on one rank, capped with their ratio kept where possible."""
    heads = max(1, att.num_heads // tp)
    kv = kv_heads_per_rank(att, tp) if att.kind == "gqa" else heads
    capped = min(heads, caps.heads)
    capped_kv = max(1, capped * kv // heads)
    while capped % capped_kv:
        capped_kv -= 1
    return capped, capped_kv


def _gqa(
    att: AttentionSpec, hidden: int, tp: int, caps: Caps
) -> tuple[tuple[Gemm, ...], Attention]:
    heads, kv = _heads(att, tp, caps)
    dim, v_dim = min(att.head_dim, caps.head_dim), min(att.v_head_dim, caps.head_dim)
    q_width = heads * dim * (2 if att.has_query_gate else 1)
    proj = (Gemm(hidden, q_width + kv * (dim + v_dim)), Gemm(heads * v_dim, hidden))
    core = Attention(heads, kv, dim, v_dim, kv, dim, v_dim, att.window_tokens, None, dim)
    return proj, core


def _mla(
    att: AttentionSpec, hidden: int, tp: int, caps: Caps
) -> tuple[tuple[Gemm, ...], Attention]:
    heads, _ = _heads(att, tp, caps)
    dim = min(att.head_dim, caps.head_dim)
    rope = min(att.qk_rope_head_dim, dim // 2)
    nope, v_dim = dim - rope, min(att.v_head_dim, caps.head_dim)
    latent = min(att.kv_lora_rank, caps.rank)
    q_lora = min(att.q_lora_rank or 0, caps.rank)
    q = (
        (Gemm(hidden, q_lora), Gemm(q_lora, heads * dim))
        if q_lora
        else (Gemm(hidden, heads * dim),)
    )
    up = Gemm(latent, heads * (nope + v_dim))
    proj = (*q, Gemm(hidden, latent + rope), up, Gemm(heads * v_dim, hidden))
    window = att.window_tokens
    # Prefill pads V to the q/k head dim, as vLLM's MLA prefill does for FlashAttention.
    core = Attention(heads, heads, dim, dim, 1, latent + rope, latent, window, up, rope)
    return proj, core


_FfnShapes = tuple[SwiGlu | None, Router | None, SwiGlu | None, Experts | None]


def _ffn(ffn: FfnSpec, hidden: int, par: Parallelism, caps: Caps) -> _FfnShapes:
    """(mlp, router, shared experts, routed experts) on one rank."""
    if ffn.kind == "dense":
        return (
            SwiGlu(hidden, min(-(-ffn.intermediate_size // par.tp), caps.width)),
            None,
            None,
            None,
        )
    num_experts = min(ffn.num_experts, caps.experts)
    ep = par.ep if par.enable_expert_parallel else 1
    width = ffn.intermediate_size if ep > 1 else -(-ffn.intermediate_size // par.tp)
    shared = -(-ffn.shared_intermediate_size // par.tp)
    top_k = min(ffn.num_experts_per_tok, caps.top_k, num_experts)
    local = -(-num_experts // ep)
    experts = Experts(hidden, min(width, caps.width), local, num_experts, top_k, ep)
    shared_mlp = SwiGlu(hidden, min(shared, caps.width)) if shared else None
    return None, Router(hidden, num_experts, top_k), shared_mlp, experts


def profile_shapes(plan: MemoryPlan, *, tiny: bool) -> ProfileShapes:
    """The shapes of every operator of ``plan``'s bottleneck stage on one device."""
    caps = TINY if tiny else UNCAPPED
    roofline = RooflineModel(
        plan.spec,
        plan.gpu,
        plan.parallelism,
        plan.weight_formats,
        plan.kv_format,
        efficiency_for(plan.gpu),
    )
    tp, hidden = plan.parallelism.tp, min(plan.spec.hidden_size, caps.hidden)
    kinds = []
    for group in roofline.groups:
        att = group.attention
        core: Attention | None = None
        if att.kind == "linear":
            width = -(-group.attn_linear_params // plan.spec.hidden_size)
            proj: tuple[Gemm, ...] = (Gemm(hidden, min(width, caps.width)),)
            passes = Elementwise(hidden, plan.spec.norms_per_layer, 0, 0)
        else:
            proj, core = (_mla if att.kind == "mla" else _gqa)(att, hidden, tp, caps)
            heads = core.num_heads + core.decode_kv_heads
            passes = Elementwise(hidden, plan.spec.norms_per_layer, heads, core.rope_dim)
        ffn = _ffn(group.ffn, hidden, plan.parallelism, caps)
        kinds.append(LayerKind(group.count, proj, passes, core, *ffn))
    vocab = min(roofline.head_params // plan.spec.hidden_size, caps.vocab)
    return ProfileShapes(hidden, tuple(kinds), Gemm(hidden, vocab), tiny)


def weighted_kinds(shapes: ProfileShapes, operator: str) -> dict[object, int]:
    """Distinct shapes of ``operator`` over the layer kinds that run it, with layer counts."""
    out: dict[object, int] = {}
    for kind in shapes.kinds:
        shape = kind.shape_of(operator)
        if shape is not None:
            out[shape] = out.get(shape, 0) + kind.count
    return out
