"""Physical limits the step-time model must respect, whatever its efficiency constants say.

Every efficiency is a fraction in (0, 1] of a peak, and overheads are >= 0, so no step can be
faster than the bare roofline of the work it must do:

- decode reads every weight a token touches (all non-expert weights, and at least ``k`` routed
  experts per MoE layer: one token alone picks ``k`` distinct ones) plus the KV each sequence
  attends to (capped by a sliding window), and linear-attention layers read their state once:
  ``step >= bytes / (HBM bandwidth x devices)``;
- prefill multiplies every token by every weight it touches except the LM head, which only the
  last position of a prompt needs: ``tokens/s <= peak x devices / (2 x body params)``, with the
  peak of the fastest format the model's matmuls run in;
- tensor parallelism splits each operator's FLOPs and bytes over ``N`` ranks at best (sharding
  rounds up, replication of KV heads or MLA down-projections only adds), GEMM efficiency depends
  on the rows, which TP does not change, and the per-step overhead does not shrink, so
  ``kernel(N) >= kernel(1) / N`` and ``step(N) >= kernel(1) / N + overhead(1)``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from inferplan.memory.weights import attention_rank_params
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.kv import kv_values_per_token, linear_state_values
from inferplan.specs.parallel import Parallelism
from inferplan.specs.params import count_params, expert_params
from perf.perf_helpers import GPUS, MODELS, decode, is_valid_split, prefill, roofline, spec_of

SPLITS = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2))
PROPERTY = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)
RTOL = 1e-12


def decode_floor_bytes(model: RooflineModel, num_seqs: int, context_per_seq: int) -> float:
    """The fewest bytes all devices together must read for one decode step (see module doc)."""
    spec, fmt = model.spec, model.formats
    hidden = spec.hidden_size
    total = spec.vocab_size * hidden * fmt.other.bytes_per_value  # the LM head
    for layer in spec.layers:
        att, ffn = layer.attention, layer.ffn
        linear, _ = attention_rank_params(att, hidden, 1)
        total += linear * fmt.linear.bytes_per_value
        if ffn.kind == "dense":
            total += 3 * hidden * ffn.intermediate_size * fmt.linear.bytes_per_value
        else:
            touched = ffn.num_experts_per_tok * expert_params(ffn, hidden)
            total += touched * fmt.experts.bytes_per_value
            total += 3 * hidden * ffn.shared_intermediate_size * fmt.linear.bytes_per_value
            total += hidden * ffn.num_experts * fmt.other.bytes_per_value
        attended = context_per_seq
        if att.window_tokens is not None:
            attended = min(attended, att.window_tokens)
        kv_bytes = kv_values_per_token(att, 1) * attended * model.kv.bytes_per_value
        total += num_seqs * kv_bytes
        total += num_seqs * linear_state_values(att, 1) * 2.0  # bf16 state, read once
    return total


@PROPERTY
@given(
    name=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    split=st.sampled_from(SPLITS),
    num_seqs=st.integers(1, 2048),
    context_per_seq=st.integers(1, 131072),
)
def test_decode_never_beats_the_bandwidth_floor(
    name: str, gpu: str, split: tuple[int, int], num_seqs: int, context_per_seq: int
) -> None:
    tp, pp = split
    assume(is_valid_split(name, Parallelism(tp=tp, pp=pp)))
    model = roofline(name, gpu, tp=tp, pp=pp)
    step = model.step_time(decode(num_seqs, context_per_seq))
    floor_s = decode_floor_bytes(model, num_seqs, context_per_seq) / (
        model.gpu.memory_bandwidth_bytes_s * tp * pp
    )
    assert step.total_s >= floor_s * (1 - RTOL)


@PROPERTY
@given(
    name=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    split=st.sampled_from(SPLITS),
    prompt_tokens=st.integers(1, 65536),
)
def test_prefill_never_beats_the_flops_ceiling(
    name: str, gpu: str, split: tuple[int, int], prompt_tokens: int
) -> None:
    tp, pp = split
    assume(is_valid_split(name, Parallelism(tp=tp, pp=pp)))
    model = roofline(name, gpu, tp=tp, pp=pp)
    counts = count_params(spec_of(name))
    body_params = counts.active_compute - counts.lm_head
    fmt = model.formats
    peak = max(model.gpu.peak(f.compute_dtype) for f in (fmt.linear, fmt.experts, fmt.other))
    step = model.step_time(prefill(prompt_tokens))
    ceiling_tok_s = peak * tp * pp / (2 * body_params)
    assert prompt_tokens / step.total_s <= ceiling_tok_s * (1 + RTOL)


def _kernel_s(model: RooflineModel, num_seqs: int, context_per_seq: int, prompt: int) -> float:
    step = model.step_time(decode(num_seqs, context_per_seq) if not prompt else prefill(prompt))
    return step.by_bound_s["compute"] + step.by_bound_s["memory"]


@PROPERTY
@given(
    name=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    tp=st.sampled_from((2, 4, 8)),
    ep=st.booleans(),
    num_seqs=st.integers(1, 1024),
    context_per_seq=st.integers(1, 65536),
    prompt=st.sampled_from((0, 0, 1, 37, 512, 8192)),
)
def test_tensor_parallelism_divides_work_at_best_by_tp(
    name: str,
    gpu: str,
    tp: int,
    ep: bool,
    num_seqs: int,
    context_per_seq: int,
    prompt: int,
) -> None:
    assume(not ep or spec_of(name).is_moe)
    assume(is_valid_split(name, Parallelism(tp=tp, enable_expert_parallel=ep)))
    one, many = roofline(name, gpu), roofline(name, gpu, tp=tp, ep=ep)
    kernel_one = _kernel_s(one, num_seqs, context_per_seq, prompt)
    kernel_many = _kernel_s(many, num_seqs, context_per_seq, prompt)
    assert kernel_many >= kernel_one / tp * (1 - RTOL)
    batch = decode(num_seqs, context_per_seq) if not prompt else prefill(prompt)
    overhead = one.step_time(batch).by_bound_s["overhead"]
    assert many.step_time(batch).total_s >= (kernel_one / tp + overhead) * (1 - RTOL)
