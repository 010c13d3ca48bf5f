"""The analytic step-time model: a roofline per operator, with calibrated efficiencies.

Each operator takes ``max(FLOPs / (peak x eff), bytes / (bandwidth x eff))`` on one device, at the
peak of its matmuls' dtype; operators add. Per layer: attention projections and core (causal
prefill pairs, decode KV reads, MLA, sliding windows), the FFN (dense, or router + touched
experts + shared experts), elementwise passes, TP all-reduces (EP exchanges for MoE layers); per
step the LM head and fixed overheads. Pipeline parallelism keeps ``m = min(pp, sequences)``
micro-batches in flight as vLLM v1's batch queue and TensorRT-LLM run them: no fill-and-drain
bubble a step, each micro-batch paying its own host work and launches (``perf/pipeline_costs.py``).
Every operator is affine in the decode context ``C``, so a pure-decode stretch has a step time
``a + b*C`` until a bound flips or a window saturates (``decode_line``); ``docs/modeling.md``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferplan.memory.weights import WeightFormats, attention_rank_params
from inferplan.perf.attention_pieces import AttentionLayers, AttentionPieces, Piece
from inferplan.perf.batch import StepBatch, StepTime, window_range
from inferplan.perf.bounded_cache import keep
from inferplan.perf.comm import allreduce_s, p2p_s
from inferplan.perf.cudagraph import CudaGraphs, decode_graph
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.gemm_shape import half_rows
from inferplan.perf.kernel_floor import (
    KERNEL_FLOOR_S,
    SERVED_KERNEL_FLOOR_S,
    elementwise_kernels,
    ffn_kernels,
    floored,
    projection_kernels,
)
from inferplan.perf.moe import RankTable, Routing, default_routing, rank_table
from inferplan.perf.moe_comm import moe_exchange_s
from inferplan.perf.moe_passes import expert_passes
from inferplan.perf.multi_rank import logits_gather_ops, with_rank_sync
from inferplan.perf.op import ACT_BYTES, Op
from inferplan.perf.overlap import hidden_host_s, host_s, overlapped_line
from inferplan.perf.pipeline_costs import stage_pass_overhead_s
from inferplan.perf.sparse_attention import read_window
from inferplan.specs.dtypes import NumberFormat
from inferplan.specs.hardware import GpuSpec
from inferplan.specs.model import AttentionSpec, FfnSpec, ModelSpec
from inferplan.specs.parallel import Parallelism, stage_layer_counts
from inferplan.specs.params import expert_params, ffn_matrices
from inferplan.specs.topology import Topology, topology_for

# Entries each of the model's caches (lines, operators, pieces) holds before it starts over.
LINE_CACHE_SIZE = 4096
_TokenParts = tuple[tuple[tuple[Piece, Piece], ...], float]  # ``_token_pieces``


@dataclass(frozen=True)
class _Group:
    attention: AttentionSpec
    ffn: FfnSpec
    count: int
    attn_linear_params: int
    attn_other_params: int


class RooflineModel:
    """Step times of one replica of ``spec`` on ``gpu`` split as ``par`` (a StepTimeModel)."""

    def __init__(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        par: Parallelism,
        formats: WeightFormats,
        kv: NumberFormat,
        eff: Efficiency,
        *,
        routing: Routing | None = None,
        cuda_graphs: bool = True,
        topology: Topology | None = None,
    ) -> None:
        self.spec, self.gpu, self.par = spec, gpu, par
        self.formats, self.kv, self.eff = formats, kv, with_rank_sync(eff, par)  # multi_rank
        self.routing = routing or default_routing(eff.routing_skew)
        self.topology = topology or topology_for(gpu)
        self._expert_ops: dict[tuple[int, int, int], tuple[Op, float]] = {}
        self._gemm_ops: dict[tuple[str, float, float, int, int, bool], Op] = {}
        self.cuda_graphs = cuda_graphs
        self._graphs: CudaGraphs | None = None  # ``graphs``
        self.moe_exchange = "alltoall"  # "allgather", "allgather_bf16": perf/moe_comm.py
        self.moe_passes = False  # the experts' copy, activation and finalize (perf/moe_passes.py)
        self.bandwidth = gpu.memory_bandwidth_bytes_s
        self.stage_layers = max(stage_layer_counts(spec.num_layers, par.pp))
        self.groups = self._bottleneck_groups()
        self.padded_vocab = -(-spec.vocab_size // 64) * 64
        self.head_params = -(-self.padded_vocab // par.tp) * spec.hidden_size
        self._lines: dict[int, tuple[float, float, float, float]] = {}
        # ``_pieces``' caches (the attention core's in ``perf/attention_pieces.py``).
        self._token_parts: dict[tuple[float, str, bool], _TokenParts] = {}
        self._head_pieces: dict[float, Piece] = {}
        kv_bytes = self.kv.bytes_per_value
        layers = [
            AttentionLayers(g.attention, g.count, par.tp, par.attention_dp, kv_bytes)
            for g in self.groups
        ]
        self.attention_pieces = AttentionPieces(tuple(layers), gpu, eff)
        self.kernel_floor_s = KERNEL_FLOOR_S  # a launch's shortest time (perf/kernel_floor.py)
        for group in self.groups:  # a placement that cannot exist fails here, not mid-run
            if group.ffn.kind == "moe":
                self.expert_table(group.ffn)

    def _bottleneck_groups(self) -> tuple[_Group, ...]:
        """Layer shapes of the stage with the most layers (the first such), counted."""
        counts = stage_layer_counts(self.spec.num_layers, self.par.pp)
        start = sum(counts[: counts.index(max(counts))])
        layers = self.spec.layers[start : start + max(counts)]
        tally: dict[tuple[AttentionSpec, FfnSpec], int] = {}
        for layer in layers:
            key = (layer.attention, layer.ffn)
            tally[key] = tally.get(key, 0) + 1
        out = []
        for (att, ffn), count in tally.items():
            linear, other = attention_rank_params(att, self.spec.hidden_size, self.par.tp)
            out.append(_Group(att, ffn, count, linear, other))
        return tuple(out)

    @property
    def graphs(self) -> CudaGraphs | None:
        """An engine's decode graphs (``perf/cudagraph.py``): a pure decode runs its padded size,
        eager above the largest. None: graphs up to CUDA_GRAPH_MAX_BATCH, no padding."""
        return self._graphs

    @graphs.setter
    def graphs(self, graphs: CudaGraphs | None) -> None:
        """Set where the model serves an engine (``plan/served.py`` ``served_graphs``): its
        graphs are a served PyTorch runtime's (vLLM, SGLang, ``trtllm-serve``; None for
        TensorRT-LLM's C++ engines and ``trtllm-bench``), whose launches pay
        ``SERVED_KERNEL_FLOOR_S`` each (``perf/kernel_floor.py``)."""
        self._graphs = graphs
        self.set_kernel_floor(SERVED_KERNEL_FLOOR_S if graphs is not None else KERNEL_FLOOR_S)

    def set_kernel_floor(self, floor_s: float) -> None:
        """Every operator of a layer at least its launches times ``floor_s``
        (``perf/kernel_floor.py``); the operators cached so far are dropped."""
        self.kernel_floor_s = floor_s
        self.attention_pieces.floor_s = floor_s
        self.attention_pieces.clear()
        self._token_parts.clear()
        self._lines.clear()

    # ---- the StepTimeModel protocol ---------------------------------------------------------

    def step_time(self, batch: StepBatch) -> StepTime:
        pieces, fixed = self._pieces(batch)
        return self._evaluate(pieces, fixed, batch, float(batch.decode_context_tokens))

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        """``(a, b, limit)``: a pure decode step of ``num_seqs`` sequences attending to ``C``
        tokens in total takes ``a + b*C`` seconds for ``context_tokens <= C < limit``.

        A line depends on the batch size and on which side of each operator's crossover the
        context lies, so it is cached per batch size with the context range it holds for."""
        cached = self._lines.get(num_seqs)
        if cached is not None and cached[2] <= context_tokens < cached[3]:
            return cached[0], cached[1], cached[3]
        a, b, lower, limit = self._decode_line(num_seqs, context_tokens)
        keep(self._lines, num_seqs, (a, b, lower, limit), LINE_CACHE_SIZE)
        return a, b, limit

    def batch_line(self, batch: StepBatch) -> tuple[float, float, float]:
        """``decode_line`` of any step (prefill chunks' operators do not depend on the decode
        context ``C``): ``a + b*C`` for ``batch.decode_context_tokens <= C < limit``."""
        a, b, _, limit = self._line(batch)
        return a, b, limit

    def _decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float, float]:
        return self._line(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context_tokens))

    def _line(self, batch: StepBatch) -> tuple[float, float, float, float]:
        num_seqs, context_tokens = batch.num_decode_seqs, batch.decode_context_tokens
        ops, fixed = self._ops(batch)
        factor = self.pipeline_factor(batch)
        m = self.microbatches(batch)
        context = context_tokens / m
        a = b = 0.0
        lower, limit = 0.0, float("inf")
        for op in ops:
            compute, memory = op.terms(context)
            times = (factor if op.per_stage else m) * op.count
            if compute >= memory:
                a += op.f0 / op.flops_s * times
                b += op.f1 / op.flops_s * times
            else:
                a += op.b0 / op.bytes_s * times
                b += op.b1 / op.bytes_s * times
            point = op.crossing(context)
            if point is not None and point > context:
                limit = min(limit, point * m)
            elif point is not None:
                lower = max(lower, point * m)
        a += sum(fixed.values()) * factor + self.pipeline_sends(batch)
        b /= m
        windows = [read_window(g.attention) for g in self.groups]
        window_lower, window_limit = window_range(windows, num_seqs, context_tokens)
        line = (a, b, max(lower, window_lower), min(limit, window_limit))
        hideable = self.eff.host_overlap * host_s(self.eff, batch, self.par.attention_dp)
        return overlapped_line(line, fixed["overhead"] * factor, hideable, context_tokens)

    # ---- pipeline (public: perf/step_seconds.py, perf/table.py), then operators --------------

    def microbatches(self, batch: StepBatch) -> int:
        """Micro-batches in flight: one per stage, at most one per sequence."""
        return self.microbatches_of(batch.num_decode_seqs + batch.num_prefill_seqs)

    def microbatches_of(self, num_seqs: int) -> int:
        """``microbatches`` of a batch of ``num_seqs`` sequences."""
        return max(1, min(self.par.pp, num_seqs))

    def pipeline_factor(self, batch: StepBatch) -> float:
        """Bottleneck-stage times per step: ``pp``. The ``m`` micro-batches are in flight at
        once (one per stage), so a step (every sequence one token further) takes one pass of a
        micro-batch through the ``pp`` stages, whatever ``m``; a lone sequence pays the same."""
        return float(self.par.pp)

    def pipeline_sends(self, batch: StepBatch) -> float:
        """The ``pp - 1`` stage-to-stage sends of one micro-batch's pass."""
        if self.par.pp == 1:
            return 0.0
        m = self.microbatches(batch)
        activation = batch.num_tokens / m * self.spec.hidden_size * ACT_BYTES
        group = self.par.tp * self.par.pp
        sends = p2p_s(activation, self.gpu, self.eff, group_size=group, topology=self.topology)
        return (self.par.pp - 1) * sends

    def _per_row(self, fmt: NumberFormat) -> float:
        """GEMM time per row against a native GEMM's: formats without tensor cores on the part
        pay ``1 / dequant_gemm`` on the per-row (MMA) part only, not on the small-batch ramp."""
        return 1.0 if fmt.compute_dtype in self.gpu.peak_flops else 1 / self.eff.dequant_gemm

    def _gemm_flops_s(self, fmt: NumberFormat, rows: float, half: float | None = None) -> float:
        per_row = self._per_row(fmt)
        half = self.eff.gemm_half_tokens if half is None else half
        efficiency = self.eff.gemm_compute * rows / (rows * per_row + half)
        return self.gpu.peak(fmt.compute_dtype) * max(efficiency, 1e-3)

    def _gemm(
        self,
        name: str,
        params: float,
        rows: float,
        fmt: NumberFormat,
        count: int,
        per_stage: bool = True,
    ) -> Op:
        key = (name, params, rows, id(fmt), count, per_stage)  # a step plan's compile asks
        cached = self._gemm_ops.get(key)  # for the same rows often (``perf/step_seconds.py``)
        if cached is not None:
            return cached
        hidden = self.spec.hidden_size
        act = rows * ACT_BYTES * (hidden + params / hidden)
        op = Op(
            name,
            2 * rows * params,
            0.0,
            params * fmt.bytes_per_value + act,
            0.0,
            self._gemm_flops_s(fmt, rows, half_rows(self.eff, name, params, hidden)),
            self.bandwidth * self.eff.memory_bandwidth,
            count,
            per_stage,
        )
        return keep(self._gemm_ops, key, op, LINE_CACHE_SIZE)

    def _ops(self, batch: StepBatch) -> tuple[list[Op], dict[str, float]]:
        """One device's operators, in the order their times add (``_pieces`` flattened)."""
        pieces, fixed = self._pieces(batch)
        return [op for piece in pieces for op in piece], fixed

    def _pieces(self, batch: StepBatch) -> tuple[list[Piece], dict[str, float]]:
        """One device's operators in order, in pieces that each depend on part of the batch and
        are cached under it (a new step shape mostly reuses them): per layer group the
        projections, then the attention core, then the FFN and elementwise passes; the LM head
        last. With DP attention (vLLM DP + EP) each of the ``dpa`` ranks runs attention and
        dense layers on its own share of the batch; routed experts see every rank's tokens."""
        m = self.microbatches(batch)
        dpa = self.par.attention_dp
        # A pure decode replaying a captured graph runs its padded rows in the GEMMs (the
        # padding reads no KV: attention keeps the real rows).
        rows, eager = decode_graph(self._graphs, self.cuda_graphs, batch, dpa)
        around, comm = self._token_pieces(rows / m)
        pieces: list[Piece] = []
        for i, (proj, rest) in enumerate(around):
            pieces += (proj, *self.attention_pieces.of(i, batch, m), rest)
        logits = batch.num_logit_tokens / m / dpa
        head = self._head_pieces.get(logits)
        pieces.append(self._head_piece(logits) if head is None else head)
        return pieces, {"communication": comm, "overhead": self._overhead(batch, eager)}

    def _head_piece(self, logits: float) -> Piece:
        """The LM head for ``logits`` rows a micro-batch, cached: it runs on the last stage
        only, once per micro-batch."""
        head = self._head_pieces.get(logits)
        if head is None:
            lm_head = self._gemm("lm_head", self.head_params, logits, self.formats.other, 1, False)
            ops = (lm_head, *logits_gather_ops(logits, self))  # perf/multi_rank.py
            head = keep(self._head_pieces, logits, ops, LINE_CACHE_SIZE)
        return head

    def _token_pieces(self, tokens: float) -> _TokenParts:
        """Per layer group, the operators that depend on the micro-batch's ``tokens`` only
        (the projections; the FFN and elementwise passes), and the layers' communication."""
        key = (tokens, self.moe_exchange, self.moe_passes)
        cached = self._token_parts.get(key)
        if cached is not None:
            return cached
        local = tokens / self.par.attention_dp
        around: list[tuple[Piece, Piece]] = []
        comm = 0.0
        for group in self.groups:
            proj: Piece = ()
            if group.attention.kind != "none":
                fmt = self.formats.linear
                op = self._gemm("attn_proj", group.attn_linear_params, local, fmt, group.count)
                proj = (floored(op, projection_kernels(group.attention), self.kernel_floor_s),)
            ffn_ops, ffn_comm = self._ffn(group, tokens)
            # A Nemotron-H block has a mixer or an FFN, not both: no all-reduce for the other.
            mixer_comm = self._attn_allreduce(local) if group.attention.kind != "none" else 0.0
            comm += (ffn_comm + mixer_comm) * group.count
            elementwise = Op(
                "elementwise",
                0.0,
                0.0,
                self.eff.elementwise_passes * local * self.spec.hidden_size * ACT_BYTES,
                0.0,
                1.0,
                self.bandwidth * self.eff.memory_bandwidth,
                group.count,
            )
            elementwise = floored(
                elementwise, elementwise_kernels(group.attention), self.kernel_floor_s
            )
            ffn_ops = [
                op
                if op.name == "expert_passes"  # their launches are among the experts'
                else floored(op, ffn_kernels(group.ffn, op.name), self.kernel_floor_s)
                for op in ffn_ops
            ]
            around.append((proj, (*ffn_ops, elementwise)))
        return keep(self._token_parts, key, (tuple(around), comm), LINE_CACHE_SIZE)

    def _attn_allreduce(self, tokens: float) -> float:
        return allreduce_s(
            tokens * self.spec.hidden_size * ACT_BYTES,
            self.par.tp,
            self.gpu,
            self.eff,
            self.topology,
        )

    def _ffn(self, group: _Group, tokens: float) -> tuple[list[Op], float]:
        """FFN operators and their per-layer communication time. Dense layers, the router and
        shared experts run on this rank's tokens; routed experts on every rank's."""
        ffn, count, hidden = group.ffn, group.count, self.spec.hidden_size
        local = tokens / self.par.attention_dp
        tp, act_bytes = self.par.tp, local * hidden * ACT_BYTES
        if ffn.kind == "none":
            return [], 0.0
        if ffn.kind == "dense":
            params = ffn_matrices(ffn) * hidden * ffn.intermediate_size / tp
            return [self._gemm("mlp", params, local, self.formats.linear, count)], allreduce_s(
                act_bytes, tp, self.gpu, self.eff, self.topology
            )
        ops = [self._gemm("router", hidden * ffn.num_experts, local, self.formats.other, count)]
        if ffn.shared_intermediate_size:
            shared = ffn_matrices(ffn) * hidden * ffn.shared_intermediate_size / tp
            ops.append(self._gemm("shared_experts", shared, local, self.formats.linear, count))
        experts, hit = self._experts(ffn, tokens, count)
        ops.append(experts)
        if self.moe_passes:  # TensorRT-LLM's copy, activation and finalize (perf/moe_passes.py)
            rate = self.bandwidth * self.eff.memory_bandwidth
            table, fmt = self.expert_table(ffn), self.formats.experts
            ops.append(expert_passes(ffn, hidden, tokens, count, table, tp, fmt, rate))
        if self.par.enable_expert_parallel:  # all-to-all or all-gather (perf/moe_comm.py)
            args = (self.par, self.formats.experts, self.gpu, self.eff, self.topology)
            return ops, moe_exchange_s(self.moe_exchange, tokens * hidden, hit, *args)
        return ops, allreduce_s(act_bytes, tp, self.gpu, self.eff, self.topology)

    def expert_table(self, ffn: FfnSpec) -> RankTable:
        """Per-rank routing picture of one MoE layer shape (its placement on the EP ranks)."""
        ep = self.par.ep if self.par.enable_expert_parallel else 1
        return rank_table(
            self.routing,
            ffn.num_experts,
            ffn.num_experts_per_tok,
            ep,
            self.par.num_redundant_experts if ep > 1 else 0,
        )

    def expert_token_scale(self, ffn: FfnSpec) -> float:
        """How many times its fair share of the picks the busiest EP rank gets (1 without EP):
        a measured table's experts time, taken under uniform routing, is looked up at this
        many times the step's tokens."""
        table = self.expert_table(ffn)
        return float(table.assignment_share.max() * table.num_ranks)

    def _experts(self, ffn: FfnSpec, tokens: float, count: int) -> tuple[Op, float]:
        """The routed experts on the slowest rank, and the largest per-rank dispatch
        probability. Cached per token count: the op does not depend on the context."""
        key = (id(ffn), max(1, round(tokens)), count)
        cached = self._expert_ops.get(key)
        if cached is None:
            cached = keep(
                self._expert_ops, key, self._expert_rank_op(ffn, key[1], count), LINE_CACHE_SIZE
            )
        return cached

    def _expert_rank_terms(self, ffn: FfnSpec, tokens: float) -> dict[str, np.ndarray]:
        """Per EP rank: FLOPs, bytes and achieved rates of the routed experts of one layer."""
        table = self.expert_table(ffn)
        ep = table.num_ranks
        one = expert_params(ffn, self.spec.hidden_size) / (1 if ep > 1 else self.par.tp)
        fmt = self.formats.experts
        touched = table.touched(tokens)
        assignments = tokens * ffn.num_experts_per_tok * table.assignment_share
        rows = assignments / np.maximum(touched, 1e-9)
        per_row = self._per_row(fmt) / self.eff.moe_gemm  # grouped GEMMs: padded tiles
        efficiency = self.eff.gemm_compute * rows / (rows * per_row + self.eff.gemm_half_tokens)
        act = assignments * ACT_BYTES * (self.spec.hidden_size + one / self.spec.hidden_size)
        return {
            "flops": 2 * assignments * one,
            "bytes": touched * one * fmt.bytes_per_value + act,
            "flops_s": self.gpu.peak(fmt.compute_dtype) * np.maximum(efficiency, 1e-3),
            "bytes_s": np.full(ep, self.bandwidth * self.eff.memory_bandwidth),
        }

    def expert_rank_times(self, ffn: FfnSpec, tokens: float) -> tuple[np.ndarray, np.ndarray]:
        """(compute, memory) seconds of one MoE layer's routed experts on each EP rank."""
        terms = self._expert_rank_terms(ffn, tokens)
        return terms["flops"] / terms["flops_s"], terms["bytes"] / terms["bytes_s"]

    def _expert_rank_op(self, ffn: FfnSpec, tokens: int, count: int) -> tuple[Op, float]:
        terms = self._expert_rank_terms(ffn, tokens)
        compute, memory = terms["flops"] / terms["flops_s"], terms["bytes"] / terms["bytes_s"]
        slowest = int(np.argmax(np.maximum(compute, memory)))
        op = Op(
            "experts",
            float(terms["flops"][slowest]),
            0.0,
            float(terms["bytes"][slowest]),
            0.0,
            float(terms["flops_s"][slowest]),
            float(terms["bytes_s"][slowest]),
            count,
        )
        return op, float(self.expert_table(ffn).hit_probability.max())

    def _overhead(self, batch: StepBatch, eager: bool) -> float:
        """Per-step CPU and launch costs of one rank's scheduler and forward, per stage pass
        (micro-batches each pay the host's step work and their launches: perf/pipeline_costs)."""
        return stage_pass_overhead_s(
            self.eff,
            batch,
            attention_dp=self.par.attention_dp,
            stage_layers=self.stage_layers,
            microbatches=self.microbatches(batch),
            pipeline_factor=self.pipeline_factor(batch),
            eager=eager,
        )

    # ---- evaluation -------------------------------------------------------------------------

    def _evaluate(
        self, pieces: list[Piece], fixed: dict[str, float], batch: StepBatch, context: float
    ) -> StepTime:
        """The step's time: each operator's larger term added to its bound's sum in order (the
        same floats ``perf/step_seconds.py``'s plans add), then the fixed costs."""
        m = self.microbatches(batch)
        factor = self.pipeline_factor(batch)
        compute_s = memory_s = 0.0
        by_op: dict[str, float] = {}
        for piece in pieces:
            for op in piece:
                compute, memory = op.terms(context / m)
                times = factor if op.per_stage else m
                if compute >= memory:
                    seconds = compute * times
                    compute_s += seconds
                else:
                    seconds = memory * times
                    memory_s += seconds
                by_op[op.name] = by_op.get(op.name, 0.0) + seconds
        communication_s = fixed["communication"] * factor + self.pipeline_sends(batch)
        gpu_s = compute_s + memory_s + communication_s
        host = host_s(self.eff, batch, self.par.attention_dp)
        hidden = hidden_host_s(host, self.eff.host_overlap, gpu_s)
        bounds = {
            "compute": compute_s,
            "memory": memory_s,
            "communication": communication_s,
            "overhead": fixed["overhead"] * factor - hidden,
        }
        return StepTime(sum(bounds.values()), bounds, by_op)
