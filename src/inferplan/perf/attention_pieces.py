"""The attention core of a step's layer groups, in pieces cached under what each depends on.

``RooflineModel._pieces`` assembles a step's operators from pieces, so that a step shape never
seen before (``perf/step_seconds.py`` compiles a plan per shape; an admission step's shape is
usually new) mostly reuses operators built for other shapes. The attention core
(``attention_ops``) splits in two: its prefill operators depend on the prefill chunks' fields
only, its decode operator on the decoding sequences only (their number, their draft tokens, and
whether a read window saturates, ``attention_ops._decode_op``'s test; the context itself enters
only through the operator's affine terms). Where the two interleave or share an operator (DSA's
indexer: indexer prefill, indexer decode, core prefill, core decode; a linear-attention layer's
single operator) a group's attention stays one piece under both keys. Either way the operators
come in ``attention_ops``' order, so a step's sums add the same floats in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.perf.attention_ops import AttentionRates, attention_ops
from inferplan.perf.batch import StepBatch
from inferplan.perf.bounded_cache import keep
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.kernel_floor import KERNEL_FLOOR_S, floored
from inferplan.perf.op import Op
from inferplan.perf.sparse_attention import read_window
from inferplan.specs.hardware import GpuSpec
from inferplan.specs.model import AttentionSpec

CACHE_SIZE = 4096  # pieces kept before the cache starts over

Piece = tuple[Op, ...]  # consecutive operators of a step, cached under what they depend on


@dataclass(frozen=True)
class AttentionLayers:
    """``count`` layers of one attention shape on one device: ``tp`` ranks split its heads,
    ``dpa`` attention-DP ranks its sequences; its KV cache holds ``kv_bytes`` per value."""

    attention: AttentionSpec
    count: int
    tp: int
    dpa: int
    kv_bytes: float


def is_saturated(window: int | None, num_seqs: int, context_tokens: int, share: int) -> bool:
    """Whether a read ``window`` caps what decoding sequences read: ``attention_ops._decode_op``'s
    test, on one device's ``share`` (micro-batches x DP-attention ranks) of the batch."""
    return window is not None and context_tokens / share >= num_seqs / share * window


class AttentionPieces:
    """The attention operators of each layer group of one step, as cached pieces."""

    def __init__(self, groups: tuple[AttentionLayers, ...], gpu: GpuSpec, eff: Efficiency) -> None:
        self.groups, self.gpu, self.eff = groups, gpu, eff
        self.windows = tuple(read_window(g.attention) for g in groups)
        self._rates = tuple(_rates(g.attention, gpu, eff) for g in groups)
        self._joint = tuple(
            g.attention.kind == "linear" or g.attention.indexer is not None for g in groups
        )
        # A decode row's cost depends on whether the step carries a prefill chunk where a kernel
        # runs it in a whole query tile (``Efficiency.mixed_decode_rows``): there a mixed step's
        # attention stays one piece.
        self._tiled = eff.mixed_decode_rows > 1
        self._cache: dict[tuple[float | bool, ...], Piece] = {}
        self.floor_s = KERNEL_FLOOR_S  # a launch's shortest time (``perf/kernel_floor.py``)

    def clear(self) -> None:
        """Drop the cached pieces (their floor changed)."""
        self._cache.clear()

    def of(self, i: int, batch: StepBatch, m: int) -> tuple[Piece, ...]:
        """Group ``i``'s attention operators for ``batch`` split in ``m`` micro-batches."""
        layers = self.groups[i]
        if layers.attention.kind == "none":
            return ()
        n, ctx = batch.num_decode_seqs, batch.decode_context_tokens
        saturated = is_saturated(self.windows[i], n, ctx, m * layers.dpa)
        prefill = (
            batch.prefill_tokens,
            batch.prefill_attention_pairs,
            batch.prefill_context_tokens,
            batch.num_prefill_seqs,
        )
        decode = (n, batch.num_draft_tokens, saturated)
        if self._joint[i] or (self._tiled and n and batch.prefill_tokens):
            return (self._piece((i, m, *prefill, *decode), batch, m),)
        prefill_ops = self._cache.get((i, m, *prefill))
        if prefill_ops is None:
            prefill_ops = self._piece((i, m, *prefill), batch, m, "prefill")
        decode_ops = self._cache.get((i, m, *decode))
        if decode_ops is None:
            decode_ops = self._piece((i, m, *decode), batch, m, "decode")
        return prefill_ops, decode_ops

    def _piece(
        self, key: tuple[float | bool, ...], batch: StepBatch, m: int, parts: str = "both"
    ) -> Piece:
        """The operators under ``key`` (its group, ``m``, then the fields they depend on; the
        three kinds of key differ in length), built from ``batch``'s ``parts`` on a miss."""
        cached = self._cache.get(key)
        if cached is None:
            cached = keep(self._cache, key, self._build(int(key[0]), batch, m, parts), CACHE_SIZE)
        return cached

    def _build(self, i: int, batch: StepBatch, m: int, parts: str = "both") -> Piece:
        """Group ``i``'s attention on one device: its micro-batch's share of the batch (and,
        with DP attention, its rank's share); decode terms stay linear in the replica's
        context. ``parts``: all of the batch, or only its prefill chunks or its decoding
        sequences (``attention_ops``; no batch of one side is built for it)."""
        layers = self.groups[i]
        shape = (layers.tp, m, layers.dpa)
        ops = attention_ops(
            layers.attention, layers.count, batch, shape, layers.kv_bytes, self._rates[i], parts
        )
        # The decode kernel's floor on its fixed part: its KV stream adds (``kernel_floor``).
        return tuple(floored(op, 1, self.floor_s) if op.name == "attn_decode" else op for op in ops)


def _rates(att: AttentionSpec, gpu: GpuSpec, eff: Efficiency) -> AttentionRates:
    """What one device sustains for ``att``: softmax attention runs at the part's
    ``attention_prefill_speedup`` over its family (its exponentials), a linear-attention layer
    has no softmax."""
    softmax = gpu.attention_prefill_speedup if att.kind != "linear" else 1.0
    return AttentionRates(
        gpu.peak("bf16") * eff.attention_compute * softmax,
        gpu.memory_bandwidth_bytes_s * eff.attention_memory,
        gpu.peak("fp8") * eff.attention_compute,
        eff.mixed_decode_rows,
    )
