"""The analytic roofline: hand-computed operator times on a toy model, a published single-stream
figure, which bound dominates where, and how CUDA graphs and pipelines enter a step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.memory.plan import weight_formats_for
from inferplan.perf.batch import StepBatch, StepTime, chunk_attention_pairs
from inferplan.perf.cudagraph import CUDA_GRAPH_MAX_BATCH
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.sweep import compute_bound_batch_size, decode_row
from inferplan.specs.dtypes import KV_FORMATS
from inferplan.specs.model import parse_config
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import decode, prefill, roofline, toy_gpu, unit_efficiency

# A two-layer Llama-style toy: H=64, 4 query heads and 2 KV heads of 16, SwiGLU width 128.
TOY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 1024,
    "torch_dtype": "bfloat16",
}
BW = 1e12  # toy HBM, bytes/s
PEAK = 1e13  # toy bf16 tensor-core peak, FLOP/s (ridge point: 10 FLOP/byte)
LAYERS = 2
H = 64
MLP_PARAMS = 3 * H * 128  # gate, up, down
ATTN_PARAMS = H * 64 + 64 * H + 2 * H * 2 * 16  # q, o, and k+v for 2 KV heads of 16
HEAD_PARAMS = 256 * H  # vocab 256 is already a multiple of 64


def toy_model(eff: Efficiency | None = None) -> RooflineModel:
    spec = parse_config(dict(TOY_CONFIG), name="toy", source="toy.json")
    return RooflineModel(
        spec,
        toy_gpu(bandwidth_bytes_s=BW, bf16_flops=PEAK),
        Parallelism(),
        weight_formats_for(spec, None),
        KV_FORMATS["bf16"],
        eff or unit_efficiency(),
    )


def gemm_s(params: int, rows: int, flops_s: float = PEAK) -> float:
    """max(2*T*W / peak, bytes / bw): bf16 weights, plus bf16 activations in (H per row) and
    out (W/H per row, the GEMM's output width summed over its matrices)."""
    compute = 2 * rows * params / flops_s
    memory = (2 * params + 2 * rows * (H + params / H)) / BW
    return max(compute, memory)


@pytest.mark.parametrize("tokens", [1, 7, 64, 4096])
def test_one_gemm_by_hand(tokens: int) -> None:
    step = toy_model().step_time(prefill(tokens))
    assert step.by_operator_s["mlp"] == pytest.approx(LAYERS * gemm_s(MLP_PARAMS, tokens))
    assert step.by_operator_s["attn_proj"] == pytest.approx(LAYERS * gemm_s(ATTN_PARAMS, tokens))
    assert step.by_operator_s["lm_head"] == pytest.approx(gemm_s(HEAD_PARAMS, 1))


def test_the_toy_gemm_turns_compute_bound_past_its_ridge() -> None:
    # 1 token: 49152 B of weights dwarf 2*24576 FLOPs at 10 FLOP/B; 4096 tokens: the reverse.
    assert gemm_s(MLP_PARAMS, 1) == pytest.approx((2 * MLP_PARAMS + 2 * (H + 384)) / BW)
    assert gemm_s(MLP_PARAMS, 4096) == pytest.approx(2 * 4096 * MLP_PARAMS / PEAK)
    assert toy_model().step_time(prefill(1)).bound == "memory"
    assert toy_model().step_time(prefill(4096)).bound == "compute"


def test_gemm_ramp_halves_compute_at_half_tokens() -> None:
    """``gemm_half_tokens`` rows run at half the GEMM efficiency (a saturating ramp)."""
    model = toy_model(unit_efficiency(gemm_half_tokens=4096.0))
    step = model.step_time(prefill(4096))
    assert step.by_operator_s["mlp"] == pytest.approx(
        LAYERS * gemm_s(MLP_PARAMS, 4096, flops_s=PEAK / 2)
    )


def test_a_whole_decode_step_by_hand() -> None:
    """Two sequences attending to 200 tokens in all: every operator, summed, nothing else."""
    num_seqs, context = 2, 200
    kv_token_bytes = 2 * 2 * 16 * 2  # K and V, 2 heads of 16, bf16
    qo_bytes = 2 * 4 * 16 * 2  # the query in, the attention output out, per sequence
    attn_read = kv_token_bytes * (context + num_seqs) + qo_bytes * num_seqs  # + new KV written
    attn_flops = 4 * 4 * 16 * context  # QK^T and PV: 2 FLOPs x head_dim each, per head
    attention = max(attn_read / BW, attn_flops / PEAK)
    expected = LAYERS * (
        gemm_s(ATTN_PARAMS, num_seqs) + attention + gemm_s(MLP_PARAMS, num_seqs)
    ) + gemm_s(HEAD_PARAMS, num_seqs)
    model = toy_model()
    step = model.step_time(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context))
    assert step.total_s == pytest.approx(expected, rel=1e-12)
    assert step.by_bound_s["communication"] == 0.0
    assert step.by_bound_s["overhead"] == 0.0
    a, b, _ = model.decode_line(num_seqs, context)
    assert b == pytest.approx(LAYERS * kv_token_bytes / BW)
    assert a + b * context == pytest.approx(expected, rel=1e-12)


def test_prefill_attention_counts_causal_pairs() -> None:
    """FlashAttention's causal FLOPs: 4 * heads * head_dim per (query, key) pair, q(q+1)/2 pairs
    for a chunk from scratch, q*o more after o cached tokens; compute-bound here."""
    model = toy_model()
    chunk, cached = 2048, 1024
    batch = StepBatch(
        prefill_tokens=chunk,
        prefill_attention_pairs=chunk_attention_pairs(chunk, cached),
        prefill_context_tokens=cached,
        num_prefill_seqs=1,
    )
    pairs = chunk * cached + chunk * (chunk + 1) / 2
    flops = 4 * 4 * 16 * pairs
    read = 2 * 2 * 16 * 2 * (cached + chunk) + 2 * 4 * 16 * 2 * chunk
    expected = LAYERS * max(flops / PEAK, read / BW)
    assert model.step_time(batch).by_operator_s["attn_prefill"] == pytest.approx(expected)


def test_breakdowns_add_up() -> None:
    model = roofline("DeepSeek-V3", "h200", tp=8, ep=True)
    for batch in (decode(1, 100), decode(300, 3000), prefill(5000)):
        step = model.step_time(batch)
        assert sum(step.by_bound_s.values()) == pytest.approx(step.total_s, rel=1e-12)
        kernels = step.by_bound_s["compute"] + step.by_bound_s["memory"]
        assert sum(step.by_operator_s.values()) == pytest.approx(kernels, rel=1e-12)


# ---- a published figure ------------------------------------------------------------------------


@pytest.mark.parametrize("context_per_seq", [128, 1024, 4096])
def test_llama_8b_decodes_one_stream_on_one_h100_in_5_to_8_ms(context_per_seq: int) -> None:
    """Single-stream bf16 decode of Llama-3.1-8B on an H100 SXM runs at 5-8 ms per token in
    published vLLM measurements (about 8 ms TPOT at 2 req/s, vLLM v0.6.0 blog). The floor is
    the bytes read: 7.5 B weights besides the embedding table, in bf16, at 3.35 TB/s: 4.5 ms."""
    row = decode_row(roofline("Llama-3.1-8B", "h100"), 1, context_per_seq)
    floor_s = 2 * (8_030_261_248 - 128_256 * 4096) / 3.35e12
    assert row["step_time_s"] >= floor_s
    assert 5e-3 <= row["step_time_s"] <= 8e-3
    assert row["bound"] == "memory"


# ---- which bound dominates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpu", "tp"),
    [("Llama-3.1-8B", "h100", 1), ("Llama-3.1-70B", "h100", 4), ("gpt-oss-120b", "h200", 1)],
)
def test_small_decode_batches_are_memory_bound(name: str, gpu: str, tp: int) -> None:
    model = roofline(name, gpu, tp=tp)
    for num_seqs in (1, 4, 16):
        assert model.step_time(decode(num_seqs, 2048)).bound == "memory"


@pytest.mark.parametrize(
    ("name", "gpu", "tp"),
    [("Llama-3.1-8B", "h100", 1), ("Llama-3.1-70B", "h100", 4), ("gemma-3-27b-it", "b200", 1)],
)
def test_long_prefills_are_compute_bound(name: str, gpu: str, tp: int) -> None:
    assert roofline(name, gpu, tp=tp).step_time(prefill(8192)).bound == "compute"


@pytest.mark.parametrize("ep", [False, True])
def test_deepseek_tp8_single_token_spends_much_of_its_step_communicating(ep: bool) -> None:
    """61 layers x 2 collectives each, latency-bound for one token: a third of the step or more,
    more than the fixed per-step overhead."""
    step = roofline("DeepSeek-V3", "h200", tp=8, ep=ep).step_time(decode(1, 1024))
    share = step.by_bound_s["communication"] / step.total_s
    assert share >= 0.25
    assert step.by_bound_s["communication"] > step.by_bound_s["overhead"]


# ---- overheads and pipelines -------------------------------------------------------------------


def test_decode_past_the_largest_cuda_graph_runs_eager() -> None:
    """vLLM captures decode graphs up to 512 sequences (engines notes 1.6); a bigger batch pays a
    launch overhead per layer, and so does every step with --enforce-eager."""
    graphs = roofline("Llama-3.1-8B")
    eager = roofline("Llama-3.1-8B", cuda_graphs=False)
    eff = graphs.eff
    largest, bigger = CUDA_GRAPH_MAX_BATCH, CUDA_GRAPH_MAX_BATCH + 1
    jump = (
        graphs.step_time(decode(bigger, 100)).by_bound_s["overhead"]
        - graphs.step_time(decode(largest, 100)).by_bound_s["overhead"]
    )
    assert jump == pytest.approx(eff.per_seq_overhead_s + eff.eager_layer_overhead_s * 32)
    gap = (
        eager.step_time(decode(8, 100)).by_bound_s["overhead"]
        - graphs.step_time(decode(8, 100)).by_bound_s["overhead"]
    )
    assert gap == pytest.approx(eff.eager_layer_overhead_s * 32)


def test_layer_overhead_is_paid_per_layer_every_step() -> None:
    """A fixed time per layer and step (kernel floors, CUDA graphs or not): 32 layers of
    Llama-3.1-8B add 32 x its value to every step's overhead, decode or prefill alike."""
    base = roofline("Llama-3.1-8B")
    slower = RooflineModel(
        base.spec,
        base.gpu,
        base.par,
        base.formats,
        base.kv,
        replace(base.eff, layer_overhead_s=5e-6),
    )
    for batch in (decode(8, 1000), decode(700, 1000), prefill(512)):
        added = slower.step_time(batch).by_bound_s["overhead"]
        added -= base.step_time(batch).by_bound_s["overhead"]
        assert added == pytest.approx(32 * 5e-6)


def test_pipeline_micro_batches_in_flight_cost_pp_stage_times() -> None:
    """vLLM v1 keeps pp micro-batches in flight: two sequences in two micro-batches of one
    advance a token in the same pp = 2 stage times as one sequence alone (GPipe's per-step
    fill and drain, 3 stage times, once made this 1.5x slower). The LM head runs once per
    micro-batch on the last stage, so it is taken out of the comparison."""
    flat = roofline("Llama-3.1-8B", pp=2)
    one_seq = flat.step_time(decode(1, 1000))
    two_seqs = flat.step_time(decode(2, 1000))

    def stages(step: StepTime) -> float:
        return step.by_bound_s["memory"] - step.by_operator_s["lm_head"]

    assert stages(two_seqs) == pytest.approx(stages(one_seq), rel=0.02)


@pytest.mark.parametrize("pp", [2, 4])
def test_pipelined_step_is_one_micro_batch_through_every_stage(pp: int) -> None:
    """In flight, pp micro-batches of n sequences advance in the time one micro-batch takes
    through all pp stages, which is the flat model's step for n sequences (the same layers, the
    same rows per GEMM): on main the per-step bubble made it (2pp - 1)/pp times that."""
    flat, piped = roofline("Llama-3.1-8B"), roofline("Llama-3.1-8B", pp=pp)
    n = 16

    def stages(step: StepTime) -> float:
        return step.by_bound_s["memory"] - step.by_operator_s["lm_head"]

    one = flat.step_time(decode(n, 3000))
    in_flight = piped.step_time(decode(pp * n, 3000))
    assert stages(in_flight) == pytest.approx(stages(one), rel=0.02)


@pytest.mark.parametrize("name", ["Llama-3.1-8B", "gemma-3-27b-it"])
def test_one_microbatch_pipeline_costs_the_flat_step_plus_the_sends(name: str) -> None:
    """With one micro-batch the stages run one after another: the same layers, the LM head once,
    plus one stage-to-stage send. Both models split evenly over 2 stages (32 and 62 layers)."""
    flat, piped = roofline(name), roofline(name, pp=2)
    batch = decode(1, 1000)
    sends = piped.step_time(batch).by_bound_s["communication"]
    assert piped.step_time(batch).total_s == pytest.approx(
        flat.step_time(batch).total_s + sends, rel=1e-9
    )


def test_compute_bound_batch_size_is_where_weight_gemms_turn() -> None:
    """The smallest decode batch whose step (one token of context each) is compute-bound; for
    bf16 on an H100 it sits near the GEMM ridge, P * eta_c * 2 B / (2 * BW * eta_m) rows (213
    with the fitted Hopper constants) less the ramp's half-efficiency rows, plus activation
    traffic."""
    model = roofline("Llama-3.1-8B", "h100")
    eff = model.eff
    ridge = model.gpu.peak("bf16") * eff.gemm_compute / (model.bandwidth * eff.memory_bandwidth)
    turn = compute_bound_batch_size(model)
    assert turn is not None
    assert ridge - eff.gemm_half_tokens <= turn <= ridge + 20

    def compute_bound(num_seqs: int) -> bool:
        parts = model.step_time(decode(num_seqs, 1)).by_bound_s
        return parts["compute"] > parts["memory"]

    assert compute_bound(turn)
    assert not compute_bound(turn - 1)
