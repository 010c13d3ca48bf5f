"""A step-time model backed by measured operator times (a profile of real hardware).

The table is a CSV with columns ``operator,num_tokens,context_tokens,time_s``: the time of one
layer's operator (``attn_proj``, ``mlp``, ``router``, ``shared_experts``, ``experts``,
``elementwise``, ``attn_prefill``, ``attn_decode``) or of one step's ``lm_head``, measured at a
grid of shapes. ``attn_decode`` rows are keyed by batch size and per-sequence context,
``attn_prefill`` rows by chunk length and cached tokens before it; other operators by tokens
(``context_tokens`` 0). An optional ``allreduce`` operator is one tensor-parallel all-reduce of
``num_tokens`` hidden-size activations; it replaces the roofline's TP all-reduces (EP all-to-all
and pipeline sends stay modelled). Lines starting with ``#`` are comments (``inferplan profile``
writes its provenance there). Times between grid points are linearly interpolated, and beyond the
grid linearly extrapolated from the last two points (never below zero). Operators the table lacks,
communication it lacks and overheads come from the roofline model, so a partial profile works.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferplan.errors import InferplanError
from inferplan.limits import MAX_OPERATOR_TIME_S, MAX_TOKENS
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.perf.comm import allreduce_s
from inferplan.perf.op import ACT_BYTES
from inferplan.perf.roofline import RooflineModel
from inferplan.textfile import read_user_text, shown_text

COLUMNS = ("operator", "num_tokens", "context_tokens", "time_s")
LAYER_OPERATORS = (
    "attn_proj",
    "mlp",
    "router",
    "shared_experts",
    "experts",
    "elementwise",
    "attn_prefill",
    "attn_decode",
)
STEP_OPERATORS = ("lm_head",)
COMM_OPERATORS = ("allreduce",)
OPERATORS = LAYER_OPERATORS + STEP_OPERATORS + COMM_OPERATORS


def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear interpolation, linear extrapolation from the end segments, clamped at 0."""
    if len(xs) == 1:
        return float(ys[0])
    i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(xs) - 2))
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    return max(0.0, float(ys[i] + slope * (x - xs[i])))


@dataclass(frozen=True)
class OperatorTable:
    """Measured times: operator -> num_tokens -> (sorted contexts, times)."""

    grid: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]

    def has(self, operator: str) -> bool:
        return operator in self.grid

    def time(self, operator: str, num_tokens: float, context_tokens: float = 0.0) -> float:
        rows = self.grid[operator]
        token_points = np.array(sorted(rows), dtype=np.float64)
        at_tokens = np.array(
            [_interp(context_tokens, *rows[int(t)]) for t in token_points], dtype=np.float64
        )
        return _interp(num_tokens, token_points, at_tokens)

    def context_breakpoints(self, operator: str) -> np.ndarray:
        points: set[float] = set()
        for contexts, _ in self.grid.get(operator, {}).values():
            points.update(float(c) for c in contexts)
        return np.array(sorted(points), dtype=np.float64)


def _data_lines(lines: Iterable[str], numbers: list[int]) -> Iterator[str]:
    """The non-comment lines, appending each one's line number in the file to ``numbers``."""
    for number, line in enumerate(lines, start=1):
        if not line.lstrip().startswith("#"):
            numbers.append(number)
            yield line


def _check_header(path: Path, line: int, header: list[str]) -> None:
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InferplanError(
            f"{path}:{line}: missing column(s) {', '.join(missing)}; need {', '.join(COLUMNS)}"
        )
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise InferplanError(f"{path}:{line}: column(s) {', '.join(twice)} given twice")


def _row(path: Path, line: int, cells: dict[str, str]) -> tuple[str, int, float, float]:
    """One data row: (operator, num_tokens, context_tokens, time_s), each checked."""
    op = cells["operator"].strip()
    if op not in OPERATORS:
        raise InferplanError(
            f"{path}:{line}: unknown operator '{shown_text(op, 40)}'; valid: {', '.join(OPERATORS)}"
        )
    try:
        tokens = int(cells["num_tokens"])
        context, time_s = float(cells["context_tokens"]), float(cells["time_s"])
    except ValueError:
        raise InferplanError(
            f"{path}:{line}: num_tokens (a whole number), context_tokens and time_s must be numbers"
        ) from None
    if not (1 <= tokens <= MAX_TOKENS and 0 <= context <= MAX_TOKENS):
        raise InferplanError(
            f"{path}:{line}: need 1 <= num_tokens <= {MAX_TOKENS:,} and "
            f"0 <= context_tokens <= {MAX_TOKENS:,} (MAX_TOKENS)"
        )
    if not 0 <= time_s <= MAX_OPERATOR_TIME_S:
        raise InferplanError(
            f"{path}:{line}: time_s is {time_s}; need a finite time from 0 to "
            f"{MAX_OPERATOR_TIME_S:g} s (MAX_OPERATOR_TIME_S)"
        )
    return op, tokens, context, time_s


def _table_rows(path: Path, text: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, cells by column) of every data row; the header is checked first."""
    numbers: list[int] = []
    reader = csv.reader(_data_lines(text.splitlines(), numbers))
    try:
        header = [name.strip() for name in next(reader, [])]
        _check_header(path, numbers[0] if numbers else 1, header)
        for cells in reader:
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) != len(header):
                raise InferplanError(
                    f"{path}:{numbers[-1]}: {len(cells)} fields, but the header has {len(header)}"
                )
            yield numbers[-1], dict(zip(header, cells, strict=True))
    except csv.Error as err:
        raise InferplanError(f"{path}:{numbers[-1]}: not valid CSV ({err})") from None


def load_operator_table(path: Path) -> OperatorTable:
    """Read and validate a profile CSV; errors name the file and line."""
    text = read_user_text(path, "--operator-table", hint="; an operator table is CSV")
    raw: dict[str, dict[int, dict[float, float]]] = {}
    for line, cells in _table_rows(path, text):
        op, tokens, context, time_s = _row(path, line, cells)
        raw.setdefault(op, {}).setdefault(tokens, {})[context] = time_s
    if not raw:
        raise InferplanError(f"{path}: no rows")
    grid = {
        op: {
            t: (
                np.array(sorted(ctx), dtype=np.float64),
                np.array([ctx[c] for c in sorted(ctx)], dtype=np.float64),
            )
            for t, ctx in by_tokens.items()
        }
        for op, by_tokens in raw.items()
    }
    return OperatorTable(grid)


class TableModel:
    """Measured operator times where the table has them, the roofline elsewhere."""

    def __init__(self, roofline: RooflineModel, table: OperatorTable) -> None:
        self.roofline = roofline
        self.table = table

    def _layers_running(self, operator: str) -> int:
        """Layers of the bottleneck stage that run ``operator``."""
        count = 0
        for group in self.roofline.groups:
            att, ffn = group.attention, group.ffn
            runs = {
                "attn_proj": att.kind != "none",
                "elementwise": True,
                "attn_prefill": att.kind in ("gqa", "mla"),
                "attn_decode": att.kind in ("gqa", "mla"),
                "mlp": ffn.kind == "dense",
                "router": ffn.kind == "moe",
                "experts": ffn.kind == "moe",
                "shared_experts": ffn.kind == "moe" and ffn.shared_intermediate_size > 0,
            }[operator]
            count += group.count if runs else 0
        return count

    def _measured(self, batch: StepBatch) -> dict[str, float]:
        """Measured times of the table's operators for this step: per micro-batch shapes, each
        layer that runs the operator, every pipeline stage pass (as the roofline counts them)."""
        m = self.roofline.microbatches(batch)
        passes = self.roofline.pipeline_factor(batch)
        # With DP attention each rank runs everything but the routed experts on its own share.
        dpa = self.roofline.par.attention_dp
        out: dict[str, float] = {}
        tokens = batch.num_tokens / m
        moe = next((g.ffn for g in self.roofline.groups if g.ffn.kind == "moe"), None)
        # Routing skew: the busiest rank does the work of a uniform step with more tokens.
        skew = self.roofline.expert_token_scale(moe) if moe is not None else 1.0
        for op in ("attn_proj", "mlp", "router", "shared_experts", "experts", "elementwise"):
            layers = self._layers_running(op)
            shape = tokens * skew if op == "experts" else tokens / dpa
            if self.table.has(op) and tokens and layers:
                out[op] = self.table.time(op, shape) * layers * passes
        if self.table.has("lm_head") and batch.num_logit_tokens:
            out["lm_head"] = self.table.time("lm_head", batch.num_logit_tokens / m / dpa) * m
        attention_layers = self._layers_running("attn_decode") * passes
        if self.table.has("attn_decode") and batch.num_decode_seqs and attention_layers:
            per_seq = batch.decode_context_tokens / batch.num_decode_seqs
            decode = self.table.time("attn_decode", batch.num_decode_seqs / m / dpa, per_seq)
            out["attn_decode"] = decode * attention_layers
        if self.table.has("attn_prefill") and batch.num_prefill_seqs and attention_layers:
            chunks = batch.num_prefill_seqs
            per_chunk = self.table.time(
                "attn_prefill", batch.prefill_tokens / chunks, batch.prefill_context_tokens / chunks
            )
            out["attn_prefill"] = per_chunk * chunks / m / dpa * attention_layers
        return out

    def _allreduce_delta(self, batch: StepBatch) -> float:
        """Measured minus modelled time of the step's TP all-reduces: one after attention and
        one after each dense or tensor-sharded MoE FFN (an EP MoE layer all-to-alls instead)."""
        roofline, par = self.roofline, self.roofline.par
        if not self.table.has("allreduce") or par.tp == 1 or not batch.num_tokens:
            return 0.0
        m = roofline.microbatches(batch)
        local = batch.num_tokens / m / par.attention_dp
        count = sum(
            g.count
            * (
                (g.attention.kind != "none")
                + (
                    g.ffn.kind == "dense"
                    or (g.ffn.kind == "moe" and not par.enable_expert_parallel)
                )
            )
            for g in roofline.groups
        )
        modelled = allreduce_s(
            local * roofline.spec.hidden_size * ACT_BYTES, par.tp, roofline.gpu, roofline.eff
        )
        measured = self.table.time("allreduce", local)
        return (measured - modelled) * count * roofline.pipeline_factor(batch)

    def step_time(self, batch: StepBatch) -> StepTime:
        base = self.roofline.step_time(batch)
        measured = self._measured(batch)
        by_op = {**base.by_operator_s, **measured}
        replaced = sum(base.by_operator_s.get(op, 0.0) for op in measured)
        bounds = dict(base.by_bound_s)
        delta = sum(measured.values()) - replaced
        # Measured time replaces the roofline's, split over its compute / memory shares.
        kernel = max(bounds["compute"] + bounds["memory"], 1e-30)
        for bound in ("compute", "memory"):
            bounds[bound] += delta * bounds[bound] / kernel
        bounds["communication"] = max(0.0, bounds["communication"] + self._allreduce_delta(batch))
        return StepTime(sum(bounds.values()), bounds, by_op)

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        """Exact between the table's context grid points (times are piecewise linear there)."""
        _, _, limit = self.roofline.decode_line(num_seqs, context_tokens)
        per_seq = context_tokens / num_seqs
        points = self.table.context_breakpoints("attn_decode")
        later = points[points > per_seq]
        if len(later):
            limit = min(limit, float(later[0]) * num_seqs)
        end = min(limit, context_tokens + max(num_seqs, 1) * 1024.0)
        t0 = self.step_time(
            StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context_tokens)
        )
        t1 = self.step_time(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=int(end)))
        slope = (
            (t1.total_s - t0.total_s) / (int(end) - context_tokens) if end > context_tokens else 0.0
        )
        return t0.total_s - slope * context_tokens, slope, limit
