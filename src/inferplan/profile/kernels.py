"""Each table operator as a PyTorch callable at one grid point, ready to time.

- GEMMs: ``x @ w`` with ``x`` of ``tokens`` rows, or ``torch._scaled_mm`` for FP8 weights
  (rows padded to 16, its alignment rule). SwiGLU blocks (MLP, shared experts) include the
  SiLU-and-multiply between their two GEMMs.
- Routed experts: a grouped GEMM as one batched matmul over the experts a step touches, each with
  the same number of rows (uniform routing, ``Experts.routed``); the gather/scatter of tokens
  is left out.
- Attention: ``scaled_dot_product_attention`` on contiguous K/V (not paged) of the KV heads on
  this rank, GQA heads grouped. Prefill: one chunk of ``num_tokens`` queries after ``context``
  cached tokens, causal with the mask aligned to the lower right (the chunk's last query sees
  every key); MLA first up-projects the cached latents. Decode: ``num_tokens`` sequences of one
  query each over ``context`` tokens. Sliding-window layers read at most their window (the
  prefill mask is causal, not banded, so a chunk longer than the window is over-counted).
- Elementwise: per norm of the layer a residual add and an RMSNorm over the hidden states, and
  rotary embeddings (rotate-half) on the query and key heads.
A point whose attention tensors would exceed ``max_kv_bytes`` is not built (returns None).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own convention)

from inferplan.profile.shapes import (
    Attention,
    Elementwise,
    Experts,
    Gemm,
    Router,
    SwiGlu,
)
from inferplan.profile.timing import Precision

Run = Callable[[], object]
FP8_ROWS = 16
_HAS_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)


@dataclass
class Env:
    """Where and in what the operators run; weights are made once per shape and reused."""

    device: str
    act: torch.dtype
    linear: Precision
    experts: Precision
    other: Precision
    max_kv_bytes: float
    linears: dict[tuple[Gemm, Precision], Linear] = field(default_factory=dict)
    experts_weights: dict[Experts, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def randn(self, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=dtype or self.act)

    def release_weights(self) -> None:
        self.linears.clear()
        self.experts_weights.clear()
        if self.device == "cuda":
            torch.cuda.empty_cache()


class Linear:
    """One weight matrix ``[k, n]`` in its precision."""

    def __init__(self, gemm: Gemm, precision: Precision, env: Env) -> None:
        self.precision = precision
        weight = env.randn(gemm.n, gemm.k) * gemm.k**-0.5
        if precision.is_fp8:  # _scaled_mm takes the second operand column-major
            self.weight = weight.to(torch.float8_e4m3fn).t()
            self.scale = torch.ones((), device=env.device, dtype=torch.float32)
        else:
            self.weight = weight.to(precision.dtype).t().contiguous()

    def rows(self, tokens: int) -> int:
        return -(-tokens // FP8_ROWS) * FP8_ROWS if self.precision.is_fp8 else tokens

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.precision.is_fp8:
            fp8 = x.to(torch.float8_e4m3fn)
            return torch._scaled_mm(fp8, self.weight, self.scale, self.scale, out_dtype=x.dtype)
        return x @ self.weight


def _linear(gemm: Gemm, precision: Precision, env: Env) -> Linear:
    key = (gemm, precision)
    if key not in env.linears:
        env.linears[key] = Linear(gemm, precision, env)
    return env.linears[key]


def _swiglu(shape: SwiGlu, tokens: int, env: Env) -> Run:
    up = _linear(Gemm(shape.hidden, 2 * shape.width), env.linear, env)
    down = _linear(Gemm(shape.width, shape.hidden), env.linear, env)
    x = env.randn(up.rows(tokens), shape.hidden)

    def run() -> object:
        gate, value = up(x).chunk(2, dim=-1)
        return down((F.silu(gate) * value).contiguous())

    return run


def _projections(shape: tuple[Gemm, ...], tokens: int, precision: Precision, env: Env) -> Run:
    layers = [_linear(g, precision, env) for g in shape]
    inputs = [env.randn(lin.rows(tokens), g.k) for lin, g in zip(layers, shape, strict=True)]

    def run() -> object:
        return [lin(x) for lin, x in zip(layers, inputs, strict=True)]

    return run


def _router(shape: Router, tokens: int, env: Env) -> Run:
    gemm = _linear(Gemm(shape.hidden, shape.num_experts), env.other, env)
    x = env.randn(gemm.rows(tokens), shape.hidden)
    return lambda: torch.topk(gemm(x).softmax(dim=-1), shape.top_k, dim=-1)


def _experts(shape: Experts, tokens: int, env: Env) -> Run:
    dtype = env.experts.dtype
    if shape not in env.experts_weights:
        scale = shape.hidden**-0.5
        up = env.randn(shape.num_local, shape.hidden, 2 * shape.width, dtype=dtype) * scale
        down = env.randn(shape.num_local, shape.width, shape.hidden, dtype=dtype) * scale
        env.experts_weights[shape] = (up, down)
    up, down = env.experts_weights[shape]
    used, rows = shape.routed(tokens)
    x = env.randn(used, rows, shape.hidden, dtype=dtype)

    def run() -> object:
        gate, value = torch.bmm(x, up[:used]).chunk(2, dim=-1)
        return torch.bmm(F.silu(gate) * value, down[:used])

    return run


def _elementwise(shape: Elementwise, tokens: int, env: Env) -> Run:
    x, residual = env.randn(tokens, shape.hidden), env.randn(tokens, shape.hidden)
    weight = env.randn(shape.hidden)
    half = shape.rope_dim // 2
    rotary = env.randn(tokens, shape.rope_heads, 2 * half) if half else None
    cos, sin = env.randn(tokens, 1, half), env.randn(tokens, 1, half)

    def run() -> object:
        hidden, res = x, residual
        for _ in range(shape.num_norms):
            res = hidden + res
            hidden = res * torch.rsqrt(res.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
        if rotary is not None:
            a, b = rotary[..., :half], rotary[..., half:]
            torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
        return hidden

    return run


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: object | None, *, is_causal: bool
) -> torch.Tensor:
    groups = q.shape[1] // k.shape[1]
    if groups > 1 and _HAS_GQA:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True
        )
    if groups > 1:  # torch < 2.5: repeat the KV heads (an extra copy, unlike the real kernels)
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)


def _kv_bytes(batch: int, heads: int, length: int, k_dim: int, v_dim: int, env: Env) -> float:
    return batch * heads * length * (k_dim + v_dim) * torch.finfo(env.act).bits / 8


def _lower_right_mask(chunk: int, length: int, env: Env) -> object:
    """Causal mask of a chunk after ``length - chunk`` cached keys. On CUDA torch's lazy bias,
    which keeps the flash kernels; on the CPU a boolean matrix (the bias module's import alone
    takes seconds, longer than a tiny profile)."""
    if env.device == "cuda":
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(chunk, length)
    keys = torch.ones(chunk, length, dtype=torch.bool, device=env.device)
    return keys.tril(diagonal=length - chunk)


def _prefill(shape: Attention, chunk: int, cached: int, env: Env) -> Run | None:
    if shape.window_tokens is not None:
        cached = min(cached, shape.window_tokens)
    length = cached + chunk
    if _kv_bytes(1, shape.num_kv_heads, length, shape.head_dim, shape.v_head_dim, env) > (
        env.max_kv_bytes
    ):
        return None
    q = env.randn(1, shape.num_heads, chunk, shape.head_dim)
    k = env.randn(1, shape.num_kv_heads, length, shape.head_dim)
    v = env.randn(1, shape.num_kv_heads, length, shape.v_head_dim)
    mask = _lower_right_mask(chunk, length, env) if cached else None
    expand = shape.up_proj if cached else None
    up = _linear(expand, env.linear, env) if expand else None
    latents = env.randn(up.rows(cached), expand.k) if up and expand else None

    def run() -> object:
        if up is not None:
            up(latents)
        return _sdpa(q, k, v, mask, is_causal=mask is None)

    return run


def _decode(shape: Attention, batch: int, context: int, env: Env) -> Run | None:
    if shape.window_tokens is not None:
        context = min(context, shape.window_tokens)
    heads, k_dim, v_dim = shape.decode_kv_heads, shape.decode_k_dim, shape.decode_v_dim
    if _kv_bytes(batch, heads, context, k_dim, v_dim, env) > env.max_kv_bytes:
        return None
    q = env.randn(batch, shape.num_heads, 1, k_dim)
    k, v = env.randn(batch, heads, context, k_dim), env.randn(batch, heads, context, v_dim)
    return lambda: _sdpa(q, k, v, None, is_causal=False)


def build(operator: str, shape: object, tokens: int, context: int, env: Env) -> Run | None:
    """A callable running ``operator`` of ``shape`` at one grid point (None: too large)."""
    if operator == "attn_prefill" and isinstance(shape, Attention):
        return _prefill(shape, tokens, context, env)
    if operator == "attn_decode" and isinstance(shape, Attention):
        return _decode(shape, tokens, context, env)
    if isinstance(shape, SwiGlu):
        return _swiglu(shape, tokens, env)
    if isinstance(shape, Router):
        return _router(shape, tokens, env)
    if isinstance(shape, Experts):
        return _experts(shape, tokens, env)
    if isinstance(shape, Elementwise):
        return _elementwise(shape, tokens, env)
    if isinstance(shape, Gemm):  # the LM head
        return _projections((shape,), tokens, env.other, env)
    if isinstance(shape, tuple):
        return _projections(shape, tokens, env.linear, env)
    raise TypeError(f"no kernel for {operator} of {shape!r}")
