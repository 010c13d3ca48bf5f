"""Two kernel/host mechanisms of the step-time model, both off by default:

- ``dequant_gemm``: GEMMs whose weights are in a format the part has no tensor cores for (MXFP4
  on Hopper) reach only that share of ``gemm_compute``; parts with the format are unaffected.
- ``host_overlap``: that share of the host's per-step cost runs while the GPU computes, hidden
  as far as the GPU's work lasts; ``decode_line`` stays exact on both sides of the point where
  the GPU's work starts to cover it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.errors import InferplanError
from inferplan.memory.plan import weight_formats_for
from inferplan.perf.efficiency import Efficiency, efficiency_for, parse_efficiency
from inferplan.perf.moe import Routing
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.dtypes import kv_format
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import assert_line_matches, decode, prefill, spec_of


def _model(name: str, gpu: str, **changes: float) -> RooflineModel:
    spec, device = spec_of(name), load_gpu(gpu)
    eff: Efficiency = replace(efficiency_for(device), **changes)
    return RooflineModel(
        spec,
        device,
        Parallelism(),
        weight_formats_for(spec, None),
        kv_format("auto", model_dtype=spec.dtype),
        eff,
        routing=Routing(),
    )


def test_dequantised_mxfp4_experts_on_hopper_run_at_the_reduced_fraction() -> None:
    """gpt-oss's MXFP4 experts on an H200 (no FP4 tensor cores): a long prefill's experts are
    compute-bound, so halving ``dequant_gemm`` doubles their per-row time: 256 rows per expert
    (8,192 tokens x 4 of 128 experts) and a ramp of 32 rows take (512 + 32) / (256 + 32) times
    as long (grouped-GEMM fraction ``moe_gemm`` held at 1, so only ``dequant_gemm`` scales the
    per-row part). A one-sequence decode stays bound by reading the weights, as before."""
    full = _model("gpt-oss-120b", "h200", dequant_gemm=1.0, moe_gemm=1.0).step_time(prefill(8192))
    half = _model("gpt-oss-120b", "h200", dequant_gemm=0.5, moe_gemm=1.0).step_time(prefill(8192))
    experts = full.by_operator_s["experts"]
    assert half.by_operator_s["experts"] == pytest.approx(experts * 544 / 288, rel=1e-3)
    small = _model("gpt-oss-120b", "h200", dequant_gemm=0.5).step_time(decode(1, 2048))
    assert small.bound == "memory"
    # The BF16 attention projections have tensor cores on Hopper: untouched.
    assert half.by_operator_s["attn_proj"] == pytest.approx(full.by_operator_s["attn_proj"])


def test_native_fp4_parts_ignore_dequant_gemm() -> None:
    full = _model("gpt-oss-120b", "b200", dequant_gemm=1.0).step_time(prefill(8192))
    half = _model("gpt-oss-120b", "b200", dequant_gemm=0.5).step_time(prefill(8192))
    assert half.total_s == pytest.approx(full.total_s)


def test_overlapped_host_work_hides_behind_the_gpu_only_as_far_as_it_lasts() -> None:
    """20 ms of host work per step, all of it overlappable: a large decode step of
    Llama-3.1-8B on an H100 (GPU busy for longer) loses the 20 ms; a one-sequence step (the
    GPU reads the 16 GB of weights in about 6 ms) takes the host's 20 ms plus the per-layer
    costs, however little the GPU does."""
    serial = _model("Llama-3.1-8B", "h100", step_overhead_s=0.02, per_seq_overhead_s=0.0)
    hidden = _model(
        "Llama-3.1-8B", "h100", step_overhead_s=0.02, per_seq_overhead_s=0.0, host_overlap=1.0
    )
    big = decode(1024, 8192)
    gpu_s = sum(serial.step_time(big).by_bound_s[k] for k in ("compute", "memory"))
    assert gpu_s > 0.02
    assert hidden.step_time(big).total_s == pytest.approx(serial.step_time(big).total_s - 0.02)
    small = decode(1, 16)
    layers = serial.eff.layer_overhead_s * serial.stage_layers
    assert hidden.step_time(small).total_s == pytest.approx(0.02 + layers)
    assert hidden.step_time(small).total_s < serial.step_time(small).total_s


@pytest.mark.parametrize("num_seqs", [1, 8, 64, 512])
@pytest.mark.parametrize("context_per_seq", [1, 300, 9000])
def test_decode_line_stays_exact_with_host_overlap(num_seqs: int, context_per_seq: int) -> None:
    model = _model(
        "Llama-3.1-8B", "h100", step_overhead_s=0.02, per_seq_overhead_s=1e-5, host_overlap=0.7
    )
    assert_line_matches(model, num_seqs, num_seqs * context_per_seq)


def test_an_efficiency_file_rejects_an_overlap_above_one() -> None:
    data = {k: v for k, v in efficiency_for(load_gpu("h100")).to_dict().items()}
    with pytest.raises(InferplanError, match="host_overlap"):
        parse_efficiency({**data, "host_overlap": 1.5}, "x.yaml")
    with pytest.raises(InferplanError, match="dequant_gemm"):
        parse_efficiency({**data, "dequant_gemm": 0.0}, "x.yaml")
