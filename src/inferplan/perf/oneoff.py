"""A one-off prefill shape's seconds from cached terms, without building its operators.

Above capacity an admission step's prefill chunks (the tails of several preempted prompts) are
almost never met again, so ``perf/step_seconds.py`` times such a step without a plan. Built from
``RooflineModel._pieces`` that costs a ``StepBatch``, a new prefill attention operator per layer
group (``attention_ops``) and the pieces' look-ups, about 35 us a step in ``above``; yet of the
step's operators only the prefill attention depends on the chunks. Here the step is assembled
from what does not depend on them, cached, and that one operator's two terms in closed form:

- the operators of the micro-batch's token count (projections, FFN, elementwise passes) and of
  the decode rows and the LM head's rows come from the model's own pieces, as their terms
  (``StepSeconds._piece_terms``, cached by the piece's identity); the token count's are
  looked up under the model's piece tuple, so a model that drops its caches is followed;
- the prefill attention operator of a group (full softmax attention, GQA/MHA or MLA, with no
  window, chunk or indexer) is ``attention_ops``' operator written out: its FLOPs
  ``pair_flops x pairs + up_flops`` and bytes ``token_bytes x (cached + tokens) + io x tokens``
  over one device's share of the chunks, with ``pair_flops``, ``token_bytes``, ``io`` and the
  MLA up-projection's factors computed once per group;
- the overhead and host seconds, which depend on the sequence counts only, cached under them.

The floating-point operations are ``StepSeconds._direct``'s in its order (each operator's two
terms, the larger times its passes added to its bound's sum, then communication, hidden host
work and overhead), so the seconds are the same float. A constant operator's term is
``f0 / rate x count`` where ``_direct`` computes ``(f0 + f1 x C) / rate x count`` with
``f1 = 0.0``: the same float (``0.0 x C`` is 0.0 for a finite context and ``f0 + 0.0 == f0``).
Models outside these cases (windows, chunked or sparse attention, linear attention, vLLM's FA2
query tiles that join a mixed step's attention into one piece) are not taken here (``fits``);
``tests/perf/test_step_seconds.py`` checks the float against ``step_time`` on nine models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferplan.perf.batch import StepBatch
from inferplan.perf.bounded_cache import keep
from inferplan.perf.oneoff_tokens import TokenTerms
from inferplan.perf.oneoff_tokens import fits as dense
from inferplan.perf.op import ACT_BYTES
from inferplan.perf.overlap import hidden_host_s, host_s
from inferplan.perf.sparse_attention import read_window
from inferplan.specs.kv import kv_heads_per_rank
from inferplan.specs.model import AttentionSpec

if TYPE_CHECKING:
    from inferplan.perf.roofline import RooflineModel
    from inferplan.perf.step_seconds import StepSeconds, _Term

CACHE_SIZE = 16384  # entries each cache holds before it starts over
# Token counts a micro-batch: up to the step's token budget (8,192 by default) at one
# micro-batch, so the cache holds a run's counts without starting over (about 1 KB each).
TOKEN_CACHE_SIZE = 16384

# One group's prefill attention in closed form: (pair FLOPs, MLA up-projection factors (the
# latent rank, the heads, nope + v head dims; None without MLA), KV bytes per token, the
# activations' bytes per token, FLOP/s, bytes/s, layers). None: a group without attention.
# A micro-batch token count's terms: the layers' communication seconds, and per layer group
# the terms of its projections and of its FFN and elementwise passes.
_TokenTerms = tuple[float, tuple[tuple[tuple["_Term", ...], tuple["_Term", ...]], ...]]

# What a step's sequence counts decide: micro-batches, per layer group the decode attention's
# terms, the LM head's terms, the overhead and the host seconds.
_SeqTerms = tuple[int, tuple[tuple["_Term", ...], ...], tuple["_Term", ...], float, float]

_Prefill = tuple[float, tuple[int, float, int] | None, float, float, float, float, int]


def add_terms(
    terms: tuple[_Term, ...], context: float, compute: float, memory: float
) -> tuple[float, float]:
    """``compute`` and ``memory`` with each of a step plan's ``terms`` added at a mean decode
    context of ``context`` tokens: a constant term to its side (``v1`` true: compute), an
    affine one's ``(v0 + v1 C) / v2`` and ``(v3 + v4 C) / v5`` seconds (times ``n``) to the
    side that binds, ``times`` over (``step_seconds.py``'s plans and the one-off steps')."""
    for is_affine, v0, v1, v2, v3, v4, v5, n, times in terms:
        if not is_affine:
            if v1:
                compute += v0
            else:
                memory += v0
            continue
        compute_s = (v0 + v1 * context) / v2 * n
        memory_s = (v3 + v4 * context) / v5 * n
        if compute_s >= memory_s:
            compute += compute_s * times
        else:
            memory += memory_s * times
    return compute, memory


def fits(model: RooflineModel) -> bool:
    """Whether ``OneOffSteps`` times this model's mixed steps: every attention layer full
    softmax attention (GQA/MHA or MLA; no window, local chunk, indexer or linear state), and no
    whole query tile per decode row (``Efficiency.mixed_decode_rows``), which joins a mixed
    step's attention into one piece (``perf/attention_pieces.py``)."""
    if model.eff.mixed_decode_rows > 1:
        return False
    for layers in model.attention_pieces.groups:
        att = layers.attention
        if att.kind == "none":
            continue
        if att.kind not in ("gqa", "mla") or att.indexer is not None:
            return False
        if read_window(att) is not None or att.window_tokens or att.chunk_tokens:
            return False
    return True


def _prefill_factors(
    att: AttentionSpec, count: int, tp: int, kv_bytes: float, rates: tuple[float, float]
) -> _Prefill | None:
    """``attention_ops``' factors of one group's prefill operator that do not depend on the
    step, computed as it computes them."""
    if att.kind == "none":
        return None
    heads = att.num_heads / tp
    up: tuple[int, float, int] | None = None
    if att.kind == "mla":
        latent = att.kv_lora_rank + att.qk_rope_head_dim
        token_bytes = latent * kv_bytes
        nope = att.head_dim - att.qk_rope_head_dim
        pair_flops = heads * (2 * att.head_dim + 2 * att.v_head_dim)
        up = (att.kv_lora_rank, heads, nope + att.v_head_dim)
    else:
        token_bytes = 2 * kv_heads_per_rank(att, tp) * att.head_dim * kv_bytes
        pair_flops = 4 * heads * att.head_dim
    io = 2 * heads * att.head_dim * ACT_BYTES
    return (pair_flops, up, token_bytes, io, rates[0], rates[1], count)


class OneOffSteps:
    """The seconds of a mixed step on a model that ``fits``, from cached terms (the module
    docstring); ``plans`` is the ``StepSeconds`` whose piece terms it shares."""

    def __init__(self, model: RooflineModel, plans: StepSeconds) -> None:
        self.model, self.plans = model, plans
        self.num_draft_tokens = plans.num_draft_tokens
        pieces = model.attention_pieces
        self._prefill = tuple(
            _prefill_factors(
                g.attention,
                g.count,
                g.tp,
                g.kv_bytes,
                (pieces._rates[i].compute, pieces._rates[i].memory),
            )
            for i, g in enumerate(pieces.groups)
        )
        self._tokens: dict[tuple[float, int], _TokenTerms] = {}
        self._seqs: dict[tuple[int, int], _SeqTerms] = {}
        self._factor = model.pipeline_factor(StepBatch())  # ``pp``, the same every step
        self._dpa = model.par.attention_dp
        self._rows_per_seq = 1 + self.num_draft_tokens  # query rows of a decoding sequence
        self._floor = model.kernel_floor_s  # the pieces' floor (``set_kernel_floor``)
        self._exchange = model.moe_exchange  # the token pieces' MoE exchange
        self._closed = TokenTerms(model) if dense(model) else None

    def seconds(
        self,
        prefill_tokens: int,
        prefill_attention_pairs: float,
        prefill_context_tokens: int,
        num_prefill_seqs: int,
        num_decode_seqs: int,
        decode_context_tokens: int,
    ) -> float:
        """``StepSeconds._direct``'s float for the step with these ``StepBatch`` fields
        (``prefill_tokens`` > 0)."""
        model = self.model
        if model.kernel_floor_s != self._floor or model.moe_exchange != self._exchange:
            self._clear()  # the model dropped its pieces (``set_kernel_floor``): so do these
        seqs = self._seqs.get((num_decode_seqs, num_prefill_seqs))
        if seqs is None:
            seqs = self._seq_terms(num_decode_seqs, num_prefill_seqs)
        m, decode, head, overhead_s, host = seqs
        factor = self._factor
        share = m * self._dpa
        num_tokens = prefill_tokens + num_decode_seqs * self._rows_per_seq
        # A step with prefill rows runs eagerly on all its rows (``decode_graph``'s first rule).
        tokens = self._tokens.get((num_tokens / m, m))
        if tokens is None:
            tokens = self._token_terms(num_tokens / m, m, factor)
        comm, around = tokens
        # The step's terms in ``_pieces``' order: per group the projections, the prefill
        # attention (a constant term made here), the decode attention, the FFN and elementwise
        # passes; the LM head last.
        prefill = prefill_tokens / share
        pairs = prefill_attention_pairs / share
        cached = prefill_context_tokens / share
        ordered: tuple[_Term, ...] = ()
        for (proj, rest), attention, decode_terms in zip(
            around, self._prefill, decode, strict=True
        ):
            if attention is None:  # no attention in these layers
                ordered += proj + decode_terms + rest
                continue
            pair_flops, up, token_bytes, io, flops_s, bytes_s, count = attention
            up_flops = 0.0 if up is None else 2 * cached * up[0] * up[1] * up[2]
            flops = pair_flops * pairs + up_flops
            read = token_bytes * (cached + prefill) + io * prefill
            compute_s = flops / flops_s * count
            memory_s = read / bytes_s * count
            if compute_s >= memory_s:  # ``_piece_terms``' constant term of the operator
                term = (False, compute_s * factor, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            else:
                term = (False, memory_s * factor, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            ordered += (*proj, term, *decode_terms, *rest)
        context = float(decode_context_tokens) / m
        compute, memory = add_terms(ordered + head, context, 0.0, 0.0)
        sends = 0.0
        if factor != 1.0:  # ``pipeline_sends``: none at one stage
            batch = self._batch(prefill_tokens, num_prefill_seqs, num_decode_seqs)
            sends = model.pipeline_sends(batch)
        communication_s = comm * factor + sends
        overhead_s = overhead_s * factor
        host_overlap = model.eff.host_overlap
        if host_overlap:
            overhead_s -= hidden_host_s(host, host_overlap, compute + memory + communication_s)
        return compute + memory + communication_s + overhead_s

    def _batch(self, prefill_tokens: int, num_prefill_seqs: int, num_decode_seqs: int) -> StepBatch:
        """A batch with these counts (the fields the cached parts depend on)."""
        return StepBatch(
            prefill_tokens,
            num_prefill_seqs=num_prefill_seqs,
            num_decode_seqs=num_decode_seqs,
            num_draft_tokens=self.num_draft_tokens,
        )

    def _clear(self) -> None:
        """Drop every cached term (the model's pieces changed)."""
        for cache in (self._tokens, self._seqs):
            cache.clear()
        self._floor = self.model.kernel_floor_s
        self._exchange = self.model.moe_exchange
        if self._closed is not None:  # its floors are the model's
            self._closed = TokenTerms(self.model)

    def _token_terms(self, tokens: float, m: int, factor: float) -> _TokenTerms:
        """The layers' communication seconds and per layer group the terms of its projections
        and of its FFN and elementwise passes at ``tokens`` a micro-batch
        (``RooflineModel._token_pieces``)."""
        if self._closed is not None:  # dense layers: in closed form (``oneoff_tokens.py``)
            entry = self._closed.terms(tokens, m, factor)
        else:
            around, comm = self.model._token_pieces(tokens)
            terms = self.plans._piece_terms
            groups = tuple(
                (terms(proj, m, factor), terms(rest, m, factor)) for proj, rest in around
            )
            entry = (comm, groups)
        return keep(self._tokens, (tokens, m), entry, TOKEN_CACHE_SIZE)

    def _seq_terms(self, num_decode_seqs: int, num_prefill_seqs: int) -> _SeqTerms:
        """What the step's sequence counts decide: its micro-batches (``microbatches``), per
        layer group the terms of its decode attention (``AttentionPieces.of``'s decode piece;
        none without attention or decode rows), the LM head's terms, the overhead
        (``RooflineModel._overhead``, eager) and the host seconds (``host_s``)."""
        model = self.model
        factor = self._factor
        batch = self._batch(0, num_prefill_seqs, num_decode_seqs)
        m = model.microbatches(batch)
        pieces = model.attention_pieces
        decode = []
        for i in range(len(pieces.groups)):
            both = pieces.of(i, batch, m)  # no prefill rows: the decode piece alone
            decode.append(self.plans._piece_terms(both[1], m, factor) if both else ())
        head = model._head_piece(batch.num_logit_tokens / m / self._dpa)
        entry = (
            m,
            tuple(decode),
            self.plans._piece_terms(head, m, factor),
            model._overhead(batch, True),  # a step with prefill rows launches eagerly
            host_s(model.eff, batch, self._dpa),
        )
        return keep(self._seqs, (num_decode_seqs, num_prefill_seqs), entry, CACHE_SIZE)
