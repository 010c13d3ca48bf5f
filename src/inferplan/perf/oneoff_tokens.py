"""A new micro-batch token count's operator terms in closed form, for ``perf/oneoff.py``.

Above capacity about a quarter of the one-off admission steps bring a token count no step had
(``above`` 20,000: 5,965 counts in 24,593 mixed steps). ``RooflineModel._token_pieces`` then
builds its operators (``_gemm`` per projection and FFN GEMM, the elementwise pass, each
``floored``), and ``StepSeconds._piece_terms`` turns them into terms: about 40 us a count. Here
each GEMM's factors that do not depend on the rows (the weight bytes, the activation width,
the half-efficiency rows, the peak, the floor's bytes) are computed once, and a count's terms
from them with ``_gemm``'s, ``floored``'s and ``_piece_terms``' floating-point operations in
their order, so the terms are the same floats. Models with routed experts (their operator comes
from the per-rank routing tables, ``RooflineModel._experts``) keep the pieces (``fits`` is
False); ``tests/perf/test_step_seconds.py`` checks the step's float against ``step_time``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferplan.perf.comm import allreduce_s
from inferplan.perf.gemm_shape import half_rows
from inferplan.perf.kernel_floor import elementwise_kernels, ffn_kernels, projection_kernels
from inferplan.perf.op import ACT_BYTES
from inferplan.specs.dtypes import NumberFormat
from inferplan.specs.params import ffn_matrices

if TYPE_CHECKING:
    from inferplan.perf.roofline import RooflineModel
    from inferplan.perf.step_seconds import _Term

# One GEMM's factors: (params, the activation width ``hidden + params / hidden``, the weight
# bytes, ``gemm_compute``, the per-row factor, the half-efficiency rows, the peak FLOP/s, the
# bytes/s, the floor's bytes (None: no floor), layers, runs on every stage).
_Gemm = tuple[float, float, float, float, float, float, float, float, float | None, int, bool]
# One layer group: its projection GEMM (None without attention), its dense FFN GEMM (None
# without an FFN), its elementwise pass's (passes, bytes/s, floor's bytes, layers), whether it
# has attention and an FFN (their all-reduces).
_Group = tuple[_Gemm | None, _Gemm | None, tuple[float, float, float | None, int], bool, bool]


def fits(model: RooflineModel) -> bool:
    """Whether every layer group's FFN is dense or absent (no routed experts)."""
    return all(group.ffn.kind in ("dense", "none") for group in model.groups)


class TokenTerms:
    """``_token_pieces``' communication and per group the projection terms and the FFN and
    elementwise terms, at a micro-batch's token count, for a model that ``fits``."""

    def __init__(self, model: RooflineModel) -> None:
        self.model = model
        self.floor_s = model.kernel_floor_s
        hidden = model.spec.hidden_size
        bytes_s = model.bandwidth * model.eff.memory_bandwidth
        groups: list[_Group] = []
        for group in model.groups:
            proj = ffn = None
            if group.attention.kind != "none":
                kernels = projection_kernels(group.attention)
                proj = self._gemm("attn_proj", group.attn_linear_params, group.count, kernels)
            if group.ffn.kind == "dense":
                params = (
                    ffn_matrices(group.ffn) * hidden * group.ffn.intermediate_size / model.par.tp
                )
                ffn = self._gemm("mlp", params, group.count, ffn_kernels(group.ffn, "mlp"))
            floor = self._floor(elementwise_kernels(group.attention), bytes_s)
            elementwise = (model.eff.elementwise_passes, bytes_s, floor, group.count)
            groups.append((proj, ffn, elementwise, proj is not None, ffn is not None))
        self.groups = tuple(groups)

    def _floor(self, kernels: int, bytes_s: float) -> float | None:
        """``floored``'s least bytes for ``kernels`` launches, None where it floors nothing."""
        if self.floor_s <= 0.0 or kernels <= 0:
            return None
        return kernels * self.floor_s * bytes_s

    def _gemm(self, name: str, params: float, count: int, kernels: int) -> _Gemm:
        """``RooflineModel._gemm``'s factors of one GEMM in the linear format, on every stage."""
        model = self.model
        fmt: NumberFormat = model.formats.linear
        hidden = model.spec.hidden_size
        bytes_s = model.bandwidth * model.eff.memory_bandwidth
        return (
            params,
            hidden + params / hidden,
            params * fmt.bytes_per_value,
            model.eff.gemm_compute,
            model._per_row(fmt),
            half_rows(model.eff, name, params, hidden),
            model.gpu.peak(fmt.compute_dtype),
            bytes_s,
            self._floor(kernels, bytes_s),
            count,
            True,
        )

    def terms(
        self, tokens: float, m: int, factor: float
    ) -> tuple[float, tuple[tuple[tuple[_Term, ...], tuple[_Term, ...]], ...]]:
        """The layers' communication seconds and per group (projection terms, FFN and
        elementwise terms) at ``tokens`` a micro-batch split in ``m``: ``_piece_terms`` of
        ``_token_pieces(tokens)``, the same floats."""
        model = self.model
        local = tokens / model.par.attention_dp
        hidden = model.spec.hidden_size
        tp = model.par.tp
        comm = 0.0
        out = []
        for proj, ffn, (passes, bytes_s, floor, count), has_attention, has_ffn in self.groups:
            ffn_comm = mixer_comm = 0.0
            if has_ffn:
                ffn_comm = allreduce_s(
                    local * hidden * ACT_BYTES, tp, model.gpu, model.eff, model.topology
                )
            if has_attention:
                mixer_comm = model._attn_allreduce(local)
            comm += (ffn_comm + mixer_comm) * count
            b0 = passes * local * hidden * ACT_BYTES
            if floor is not None and not b0 >= floor:
                b0 = floor
            compute_s = 0.0 / 1.0 * count
            memory_s = b0 / bytes_s * count
            if compute_s >= memory_s:
                elementwise = (False, compute_s * factor, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            else:
                elementwise = (False, memory_s * factor, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            proj_terms = () if proj is None else (_gemm_term(proj, local, m, factor),)
            rest = (
                (elementwise,) if ffn is None else (_gemm_term(ffn, local, m, factor), elementwise)
            )
            out.append((proj_terms, rest))
        return comm, tuple(out)


def _gemm_term(gemm: _Gemm, rows: float, m: int, factor: float) -> _Term:
    """``_piece_terms``' constant term of ``_gemm``'s operator at ``rows``, floored."""
    params, width, weight_bytes, compute, per_row, half, peak, bytes_s, floor, count, stage = gemm
    flops = 2 * rows * params
    read = weight_bytes + rows * ACT_BYTES * width
    flops_s = peak * max(compute * rows / (rows * per_row + half), 1e-3)
    if floor is not None and not read >= floor:
        read = floor
    compute_s = flops / flops_s * count
    memory_s = read / bytes_s * count
    times = factor if stage else m
    if compute_s >= memory_s:
        return (False, compute_s * times, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return (False, memory_s * times, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
