"""A step's seconds, bit for bit ``model.step_time(batch).total_s``, without rebuilding the
roofline's operators every step.

The engine times every step that is not a closed-form stretch (an admission step: the decodes
plus a new prompt chunk) with the step-time model. The roofline's operators
(``perf/roofline.py`` ``_ops``) depend on the batch's shape (prefill tokens, attention pairs,
cached tokens, chunk and decode counts) and, through its affine terms, on the decode context;
only a read window's saturation (``context >= seqs x window``: a sliding window, a local
chunk, DSA's top-k) lets the context change the operators themselves, so a windowed model's
plans are keyed by which windows saturate as well. Each key is compiled once into a
``_Plan``: the terms of the operators whose time does not depend on the context (each already
multiplied by its pipeline passes), the affine coefficients of those that do, the
communication and overhead seconds. A compile joins pieces: the roofline hands its operators
over in pieces cached under what each depends on (``_pieces``: the token count, the prefill
chunks, the decode count, the logit rows), and a piece's terms are cached here, so a new shape
(an admission step's usually is) costs a few look-ups. Evaluating a plan repeats
``RooflineModel._evaluate``'s floating-point operations in the same order (the compute and
memory sums operator by operator, the host work hidden behind the GPU's
(``perf/overlap.py``), then compute + memory + communication + overhead), so the seconds are
the same float; ``tests/perf/test_step_seconds.py`` checks that over random batches of
several models, windowed ones included. Other models (a measured operator table) are asked
directly.

A step whose prefill chunks no step had before (above capacity, an admission step's chunks are
the tails of several prompts: its shape almost never comes back) is not compiled: its pieces'
operators are evaluated at once (``_direct``), the same floating-point operations in the same
order, with no terms, plan or cache entry built. Chunks met before (below capacity a prompt's
chunk comes back beside other decode counts) get a plan, so the shapes that recur keep theirs.
On the models ``perf/oneoff.py`` writes out (full attention, no FA2 query tiles) a shape's
first sight is timed there instead, from terms cached under the token count and the sequence
counts and the prefill attention in closed form (no ``StepBatch`` or operator built), and its
second sight compiles a plan.
"""

from __future__ import annotations

from inferplan.perf.attention_pieces import Piece, is_saturated
from inferplan.perf.batch import StepBatch
from inferplan.perf.bounded_cache import keep
from inferplan.perf.oneoff import OneOffSteps, add_terms, fits
from inferplan.perf.overlap import hidden_host_s, host_s
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel

PLAN_CACHE_SIZE = 16384  # plans kept before the cache starts over (a plan is ~2 KB)

# One operator of a plan, nine fields. Constant: (False, seconds x passes, is_compute, 0...);
# affine: (True, f0, f1, flops_s, b0, b1, bytes_s, count, passes), the count and the passes
# kept apart because ``_evaluate`` multiplies by them in two steps.
_Term = tuple[bool, float, float, float, float, float, float, float, float]


# A step shape's plan: (micro-batches, terms, communication seconds, overhead seconds, host
# seconds per step, the share of them that can hide behind the GPU's work: ``host_overlap``,
# and the compute and memory sums of the constant terms before the first affine one, which
# ``terms`` then leaves out: the same additions from 0.0 in the same order, made once).
# A plain tuple: built for every new shape and unpacked at once on every call, where a
# dataclass costs more to build and a named tuple more to read.
_Plan = tuple[int, tuple[_Term, ...], float, float, float, float, float, float]


class StepSeconds:
    """``model.step_time(batch).total_s`` for the engine's steps, cached per batch shape for a
    ``RooflineModel`` (the module docstring); any other model is asked each time."""

    def __init__(self, model: StepTimeModel, num_draft_tokens: int = 0) -> None:
        self.model = model
        # Speculative decoding's verify (``engine/speculation.py``): every decoding sequence of
        # every step this instance times runs ``1 + num_draft_tokens`` query rows.
        self.num_draft_tokens = num_draft_tokens
        # Plans for the roofline only. A read window (sliding, a local chunk, DSA's top-k) that
        # saturates (``context >= seqs x window``) swaps its decode operator, so a windowed
        # model's plans are also keyed by which of its windows saturate.
        roofline = model if type(model) is RooflineModel else None
        self.roofline = roofline
        windows = () if roofline is None else roofline.attention_pieces.windows
        self._windows = tuple(sorted({w for w in windows if w is not None}))
        self._dpa = 1 if roofline is None else roofline.par.attention_dp
        self._plans: dict[tuple[float, ...], _Plan] = {}
        self._terms: dict[tuple[int, int], tuple[Piece, tuple[_Term, ...]]] = {}
        self._chunks: dict[tuple[float, ...], bool] = {}  # prefill chunks met (``_is_new_prefill``)
        self._graphs: object = None if roofline is None else roofline.graphs
        self._floor_s = 0.0 if roofline is None else roofline.kernel_floor_s
        # One-off prefill shapes from cached terms (``perf/oneoff.py``), made where the graphs
        # are first seen (``seconds``): a model whose pieces it cannot time keeps ``_direct``.
        self._oneoff: OneOffSteps | None = None
        if roofline is not None and fits(roofline):
            self._oneoff = OneOffSteps(roofline, self)

    def __call__(self, batch: StepBatch) -> float:
        return self.seconds(
            batch.prefill_tokens,
            batch.prefill_attention_pairs,
            batch.prefill_context_tokens,
            batch.num_prefill_seqs,
            batch.num_decode_seqs,
            batch.decode_context_tokens,
        )

    def seconds(
        self,
        prefill_tokens: int,
        prefill_attention_pairs: float,
        prefill_context_tokens: int,
        num_prefill_seqs: int,
        num_decode_seqs: int,
        decode_context_tokens: int,
    ) -> float:
        """The seconds of the step whose ``StepBatch`` has these fields."""
        key: tuple[float, ...] = (
            prefill_tokens,
            prefill_attention_pairs,
            prefill_context_tokens,
            num_prefill_seqs,
            num_decode_seqs,
        )
        roofline = self.roofline
        if self._windows and roofline is not None:
            share = roofline.microbatches_of(num_decode_seqs + num_prefill_seqs) * self._dpa
            for window in self._windows:
                key += (is_saturated(window, num_decode_seqs, decode_context_tokens, share),)
        if roofline is not None and (
            roofline.graphs is not self._graphs or roofline.kernel_floor_s != self._floor_s
        ):
            # the engine's CUDA graphs and kernel floor may be set after the model is built
            self._plans.clear()
            self._graphs, self._floor_s = roofline.graphs, roofline.kernel_floor_s
            self._oneoff = OneOffSteps(roofline, self) if fits(roofline) else None
        plan = self._plans.get(key)
        if plan is None:
            oneoff = self._oneoff
            if oneoff is not None and prefill_tokens and key not in self._chunks:
                keep(self._chunks, key, True, PLAN_CACHE_SIZE)  # a second sight compiles
                return oneoff.seconds(
                    prefill_tokens,
                    prefill_attention_pairs,
                    prefill_context_tokens,
                    num_prefill_seqs,
                    num_decode_seqs,
                    decode_context_tokens,
                )
            batch = StepBatch(
                prefill_tokens,
                prefill_attention_pairs,
                prefill_context_tokens,
                num_prefill_seqs,
                num_decode_seqs,
                decode_context_tokens,
                num_draft_tokens=self.num_draft_tokens,
            )
            if roofline is None:
                return self.model.step_time(batch).total_s
            if oneoff is None and prefill_tokens and self._is_new_prefill(key):
                return self._direct(roofline, batch)
            plan = self._compile(roofline, batch, key)
        microbatches, terms, communication_s, overhead_s, host, host_overlap, compute, memory = plan
        context = float(decode_context_tokens) / microbatches
        compute, memory = add_terms(terms, context, compute, memory)
        if host_overlap:  # without an overlap nothing hides: ``hidden_host_s`` would be 0.0
            gpu_s = compute + memory + communication_s
            overhead_s -= hidden_host_s(host, host_overlap, gpu_s)
        return compute + memory + communication_s + overhead_s

    def _is_new_prefill(self, key: tuple[float, ...]) -> bool:
        """Whether no step before had these prefill chunks (the key's first four fields), which
        are then noted. Above capacity an admission step's chunks (several prompts' tails) are
        almost never met again, so neither is its shape; below capacity a prompt's chunk comes
        back with other decode counts, and those shapes recur."""
        chunks = key[:4]
        if chunks in self._chunks:
            return False
        keep(self._chunks, chunks, True, PLAN_CACHE_SIZE)
        return True

    def _direct(self, model: RooflineModel, batch: StepBatch) -> float:
        """The batch's seconds from its pieces' operators, with no plan built or kept: a plan's
        floating-point operations in its order (``_compile``'s terms and ``seconds``' sums), for
        a shape that is unlikely to come back."""
        pieces, fixed = model._pieces(batch)
        m = model.microbatches(batch)
        factor = model.pipeline_factor(batch)
        context = float(batch.decode_context_tokens) / m
        compute = memory = 0.0
        for piece in pieces:
            for op in piece:
                count = op.count
                compute_s = (op.f0 + op.f1 * context) / op.flops_s * count
                memory_s = (op.b0 + op.b1 * context) / op.bytes_s * count
                if compute_s >= memory_s:
                    compute += compute_s * (factor if op.per_stage else m)
                else:
                    memory += memory_s * (factor if op.per_stage else m)
        communication_s = fixed["communication"] * factor + model.pipeline_sends(batch)
        overhead_s = fixed["overhead"] * factor
        host_overlap = model.eff.host_overlap
        if host_overlap:
            host = host_s(model.eff, batch, model.par.attention_dp)
            overhead_s -= hidden_host_s(host, host_overlap, compute + memory + communication_s)
        return compute + memory + communication_s + overhead_s

    def _compile(self, model: RooflineModel, batch: StepBatch, key: tuple[float, ...]) -> _Plan:
        """The batch's operators as a plan, cached under ``key`` (its shape). The model hands
        its operators over in pieces it keeps cached (``RooflineModel._pieces``), so a new
        shape mostly joins the terms of pieces met before."""
        pieces, fixed = model._pieces(batch)
        m = model.microbatches(batch)
        factor = model.pipeline_factor(batch)
        terms: list[_Term] = []
        for piece in pieces:
            terms += self._piece_terms(piece, m, factor)
        # ``seconds``' first additions, while no affine term came: they do not depend on the
        # context, so they are made here, from 0.0 in the same order (the same floats).
        compute = memory = 0.0
        lead = 0
        while lead < len(terms) and not terms[lead][0]:
            if terms[lead][2]:
                compute += terms[lead][1]
            else:
                memory += terms[lead][1]
            lead += 1
        plan = (
            m,
            tuple(terms[lead:]),
            fixed["communication"] * factor + model.pipeline_sends(batch),
            fixed["overhead"] * factor,
            host_s(model.eff, batch, model.par.attention_dp),
            model.eff.host_overlap,
            compute,
            memory,
        )
        return keep(self._plans, key, plan, PLAN_CACHE_SIZE)

    def _piece_terms(self, piece: Piece, m: int, factor: float) -> tuple[_Term, ...]:
        """The terms of one piece's operators at ``m`` micro-batches, cached by the piece's
        identity (held in the entry, so the id is not reused while cached) and ``m``; the
        roofline's ``factor`` (``pp``) is the same for every step."""
        key = (id(piece), m)
        entry = self._terms.get(key)
        if entry is not None and entry[0] is piece:
            return entry[1]
        terms: list[_Term] = []
        for op in piece:
            times = factor if op.per_stage else m
            if op.f1 == 0 and op.b1 == 0:  # its terms are the same at every context
                compute_s, memory_s = op.terms(0.0)
                is_compute = compute_s >= memory_s
                seconds = (compute_s if is_compute else memory_s) * times
                terms.append((False, seconds, float(is_compute), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            else:
                terms.append(
                    (True, op.f0, op.f1, op.flops_s, op.b0, op.b1, op.bytes_s, op.count, times)
                )
        return keep(self._terms, key, (piece, tuple(terms)), PLAN_CACHE_SIZE)[1]
