"""Nemotron-H's one-sublayer blocks in the step-time model: a Mamba-2 block reads and writes
each sequence's fixed state every step and no KV; a block without a mixer has no attention
projection or all-reduce; one without an FFN has no MLP."""

from __future__ import annotations

import pytest

from inferplan.memory.plan import weight_formats_for
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.dtypes import kv_format
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism

from .perf_helpers import decode, spec_of, unit_efficiency

NAME = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
STATE_BYTES = 6144 * 3 * 2 + 64 * 64 * 128 * 4  # bf16 conv state + fp32 SSM state, one layer


def _model(tp: int = 1) -> RooflineModel:
    spec = spec_of(NAME)
    return RooflineModel(
        spec,
        load_gpu("h100"),
        Parallelism(tp=tp),
        weight_formats_for(spec, None),
        kv_format("auto", model_dtype=spec.dtype),
        unit_efficiency(),
    )


@pytest.mark.parametrize("num_seqs", [1, 64])
def test_mamba_blocks_stream_their_state_whatever_the_context(num_seqs: int) -> None:
    model = _model()
    bandwidth = model.gpu.memory_bandwidth_bytes_s
    for context in (100, 10_000):
        step = model.step_time(decode(num_seqs, context))
        expected = 23 * 2 * STATE_BYTES * num_seqs / bandwidth
        assert step.by_operator_s["attn_linear"] == pytest.approx(expected, rel=1e-12)


def test_blocks_without_a_mixer_or_ffn_add_no_operator_or_collective() -> None:
    one, two = _model(1), _model(2)
    ops = one.step_time(decode(8, 1000)).by_operator_s
    assert "mlp" not in ops  # no dense MLP blocks in the pattern
    # Per layer with TP: one all-reduce after each mixer (29) and each MoE (23), not two each.
    batch = decode(8, 1000)
    per_call = two._attn_allreduce(8)
    assert two.step_time(batch).by_bound_s["communication"] == pytest.approx(52 * per_call)
