"""Speculative decoding: the cost of one draft-and-verify step and the tokens it emits.

A speculative decode step drafts ``k`` tokens per sequence and verifies them in one forward of
the target: ``1 + k`` query rows per decoding sequence (``StepBatch.num_draft_tokens``), each
attending to the sequence's KV plus the drafts before it, GEMMs and LM head over ``(1 + k) * n``
rows. The drafter runs ``k`` times on ``n`` rows before it (sequential chain drafting):

- ``eagle`` / ``eagle3``: one decoder layer of the target's width plus the LM head (Li et al.,
  "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty", ICML 2024; "EAGLE-3:
  Scaling up Inference Acceleration of Large Language Models via Training-Time Test", 2025).
  Modelled as the target's first layer and full LM head; EAGLE-3's fusion of three hidden
  states (a ``3H x H`` projection) and its reduced draft vocabulary are not modelled.
- ``mtp``: DeepSeek-V3's multi-token-prediction module (DeepSeek-AI, "DeepSeek-V3 Technical
  Report", 2024, §2.2): one more transformer block (modelled as the target's last layer, MoE in
  DeepSeek-V3) sharing the target's LM head, run ``k`` times as vLLM and SGLang reuse it.
- ``draft``: a separate draft model (its own config), run ``k`` times as a decode step.

The drafter's passes run inside the engine step: they pay no host scheduling cost of their own.

With a per-token acceptance probability ``a`` (each draft accepted independently, as in
Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding", ICML
2023, eq. 1), one step emits ``E = (1 - a^(k+1)) / (1 - a)`` tokens in expectation (``k + 1``
at ``a = 1``), counting the bonus token the verify always yields. vLLM's "mean acceptance
length" and SGLang's "accept length" are this ``E``; ``acceptance_for_length`` inverts it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from inferplan.errors import InferplanError
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.sweep import compute_bound_batch_size
from inferplan.specs.model import ModelSpec

METHODS = ("eagle", "eagle3", "mtp", "draft")
MAX_SPECULATIVE_TOKENS = 32  # far above any published setting (EAGLE uses 4-8)


def expected_tokens_per_step(acceptance: float, num_tokens: int) -> float:
    """``E = (1 - a^(k+1)) / (1 - a)``: tokens one verify emits, bonus token included."""
    if acceptance >= 1.0:
        return float(num_tokens + 1)
    return (1.0 - acceptance ** (num_tokens + 1)) / (1.0 - acceptance)


def acceptance_for_length(accept_length: float, num_tokens: int) -> float:
    """The per-token acceptance ``a`` whose ``expected_tokens_per_step`` is ``accept_length``
    (in ``[1, k + 1]``), by bisection: ``E`` rises strictly with ``a``."""
    if not 1.0 <= accept_length <= num_tokens + 1:
        raise InferplanError(
            f"--spec-accept-length: {accept_length:g} is out of range; expected a number "
            f">= 1 and <= num_speculative_tokens + 1 = {num_tokens + 1}"
        )
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens_per_step(mid, num_tokens) < accept_length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's ``--speculative-config`` fields: ``method``, ``num_speculative_tokens``; the
    acceptance ``a`` per drafted token; ``draft`` the draft model (method ``draft`` only)."""

    method: str
    num_speculative_tokens: int
    acceptance_rate: float
    draft: ModelSpec | None = None

    @property
    def accept_length(self) -> float:
        return expected_tokens_per_step(self.acceptance_rate, self.num_speculative_tokens)


def drafter_spec(target: ModelSpec, config: SpeculativeConfig) -> ModelSpec:
    """The model one drafter pass runs (see the module docstring)."""
    if config.method == "draft":
        if config.draft is None:
            raise InferplanError("--speculative-model: method 'draft' needs a draft model")
        return config.draft
    layer = target.layers[-1] if config.method == "mtp" else target.layers[0]
    return replace(target, name=f"{target.name} {config.method} head", layers=(layer,))


class SpeculativeModel:
    """Draft-and-verify step times of one replica, beside the plain decode step."""

    def __init__(self, target: RooflineModel, config: SpeculativeConfig) -> None:
        self.target, self.config = target, config
        # The drafter runs within the target's step: no host cost of its own. It is not
        # pipelined: its passes run on one stage (the last, beside the LM head), TP-split.
        eff = replace(target.eff, step_overhead_s=0.0, per_seq_overhead_s=0.0)
        self.drafter = RooflineModel(
            drafter_spec(target.spec, config),
            target.gpu,
            replace(target.par, pp=1),
            target.formats,
            target.kv,
            eff,
            routing=target.routing,
            cuda_graphs=target.cuda_graphs,
            topology=target.topology,
        )
        # An MoE drafter layer (MTP) exchanges and runs its experts' passes as the target's
        # engine does (``plan/engine_moe.py`` set them on the target).
        self.drafter.moe_exchange, self.drafter.moe_passes = target.moe_exchange, target.moe_passes

    def verify_time(self, num_seqs: int, context_tokens: int) -> StepTime:
        """The target's forward over ``1 + k`` rows per sequence (``context_tokens`` total)."""
        batch = StepBatch(
            num_decode_seqs=num_seqs,
            decode_context_tokens=context_tokens,
            num_draft_tokens=self.config.num_speculative_tokens,
        )
        return self.target.step_time(batch)

    def draft_time_s(self, num_seqs: int, context_tokens: int) -> float:
        """``k`` drafter passes, pass ``i`` one token further into every sequence."""
        total = 0.0
        for i in range(self.config.num_speculative_tokens):
            batch = StepBatch(
                num_decode_seqs=num_seqs, decode_context_tokens=context_tokens + i * num_seqs
            )
            total += self.drafter.step_time(batch).total_s
        return total

    def step_time_s(self, num_seqs: int, context_tokens: int) -> float:
        """One speculative step: draft, then verify."""
        verify = self.verify_time(num_seqs, context_tokens).total_s
        return verify + self.draft_time_s(num_seqs, context_tokens)


class _Verify:
    """The target's step with every decoding sequence verifying ``k`` drafts (for the
    compute-bound search of ``perf/sweep.py``)."""

    def __init__(self, model: SpeculativeModel) -> None:
        self.model = model

    def step_time(self, batch: StepBatch) -> StepTime:
        drafts = self.model.config.num_speculative_tokens
        return self.model.target.step_time(replace(batch, num_draft_tokens=drafts))

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        raise NotImplementedError  # not used by the search


def speedup(model: SpeculativeModel, num_seqs: int, context_len: int) -> float:
    """Decode tokens/s with speculation over tokens/s without, at one batch and context."""
    context = num_seqs * context_len
    plain = model.target.step_time(
        StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context)
    )
    return model.config.accept_length * plain.total_s / model.step_time_s(num_seqs, context)


def break_even_batch(model: SpeculativeModel, context_len: int, limit: int = 4096) -> int | None:
    """Smallest decode batch (<= ``limit``) at which speculation stops paying (speedup < 1),
    by bisection: verifying ``1 + k`` rows per sequence costs more, relative to one row, as the
    GEMMs leave the memory-bound regime. None if it still pays at ``limit``."""
    if speedup(model, limit, context_len) >= 1.0:
        return None
    if speedup(model, 1, context_len) < 1.0:
        return 1
    lo, hi = 1, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if speedup(model, mid, context_len) < 1.0:
            hi = mid
        else:
            lo = mid
    return hi


def speculative_report(
    model: SpeculativeModel, batch_sizes: list[int], context_lens: list[int], kv_tokens: int
) -> dict[str, Any]:
    """The ``roofline`` command's speculative section; the break-even batch is searched among
    the batches whose KV fits (``kv_tokens`` of cache, at most 65,536 sequences)."""
    config = model.config
    rows = []
    for context_len in context_lens:
        for n in batch_sizes:
            context = n * context_len
            plain = model.target.step_time(
                StepBatch(num_decode_seqs=n, decode_context_tokens=context)
            )
            verify = model.verify_time(n, context)
            draft_s = model.draft_time_s(n, context)
            step_s = verify.total_s + draft_s
            rows.append(
                {
                    "batch_size": n,
                    "context_len": context_len,
                    "plain_step_time_s": plain.total_s,
                    "plain_tokens_per_s": n / plain.total_s,
                    "verify_time_s": verify.total_s,
                    "draft_time_s": draft_s,
                    "step_time_s": step_s,
                    "tokens_per_s": n * config.accept_length / step_s,
                    "speedup": config.accept_length * plain.total_s / step_s,
                    "verify_bound": verify.bound,
                }
            )
    return {
        "method": config.method,
        "num_speculative_tokens": config.num_speculative_tokens,
        "acceptance_rate": config.acceptance_rate,
        "accept_length": config.accept_length,
        "drafter": model.drafter.spec.name,
        "decode": rows,
        "verify_compute_bound_batch_size": compute_bound_batch_size(_Verify(model)),
        "break_even": [_break_even_row(model, c, kv_tokens) for c in context_lens],
    }


def _break_even_row(model: SpeculativeModel, context_len: int, kv_tokens: int) -> dict[str, Any]:
    fitting = min(65536, max(1, kv_tokens // context_len))
    return {
        "context_len": context_len,
        "max_batch_size": fitting,
        "break_even_batch_size": break_even_batch(model, context_len, fitting),
    }
