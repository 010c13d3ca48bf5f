"""The MoE exchange a published run's step model takes (plan/engine_moe.py ``run_exchange``):
TensorRT-LLM's gather under attention DP, ``trtllm-bench`` and ``trtllm-serve`` alike, and
SGLang's DP-attention gather of BF16 hidden states."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deployment_flags import deployment_flags
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.perf.roofline import RooflineModel
from inferplan.plan import closed_form
from inferplan.plan.engine_moe import run_exchange
from inferplan.plan.published import PublishedRow, bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup, run_step_model
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


def _dp_plan(ranks: int, max_seqs: int, max_tokens: int) -> MemoryPlan:
    """Attention DP over ``ranks`` GPUs (experts across them), each rank's limits as given."""
    cfg = MemoryConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, block_size=32)
    par = Parallelism(tp=1, dp=ranks, enable_expert_parallel=True)
    return plan_memory(load_model("Qwen3-30B-A3B"), load_gpu("h100"), par, cfg)


def _first(case_suffix: str) -> PublishedRow:
    return next(r for r in bundled_published() if r.case_id.endswith(case_suffix))


def test_a_trtllm_serve_run_under_attention_dp_gathers_as_trtllm_bench_does() -> None:
    """DeepSeek-R1 on eight H200s behind ``trtllm-serve`` (``--tp_size 8 --ep_size 8``: no
    attention DP, the layer all-reduces and the model keeps its default) and the same run with
    attention DP stated: TensorRT-LLM's gather (EP 8 <= top-8), as ``trtllm-bench``'s closed
    form takes it; SGLang under DP attention gathers BF16, vLLM keeps the default; no exchange
    without experts or attention DP."""
    serve = _first("deepseek-r1-h200-tensorrt-llm-aafb85")
    for row, exchange in ((serve, "alltoall"), (replace(serve, attention_dp=True), "allgather")):
        setup = run_setup(row)
        step = run_step_model(row, setup, memory_plan(setup), None)
        assert isinstance(step, RooflineModel)
        assert step.moe_exchange == exchange
    plan = _dp_plan(2, 4, 204)
    assert run_exchange(plan, "trtllm") == "allgather"
    assert run_exchange(plan, "sglang") == "allgather_bf16"
    assert run_exchange(plan, "vllm") is None
    dense = plan_memory(
        load_model("Llama-3.1-8B"), load_gpu("h100"), Parallelism(dp=2), plan.config
    )
    assert run_exchange(dense, "trtllm") is run_exchange(dense, "sglang") is None
    tp = replace(plan, parallelism=Parallelism(tp=2, enable_expert_parallel=True))
    assert run_exchange(tp, "trtllm") is run_exchange(tp, "sglang") is None


def test_the_closed_form_steps_with_the_gather_and_its_bytes_by_hand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``trtllm-bench`` run's model steps with the gather: a decode step of 64 sequences on
    two ranks moves, in each of the 48 MoE layers, half of the 64 x 2,048 BF16 activations in
    (all-gather) and half out (reduce-scatter): 2 x 131,072 bytes over NVLink4's 450 GB/s at the
    family's fraction, plus two collective latencies; no attention all-reduce (TP 1). With
    ``TRTLLM_MOE_EXCHANGE`` off it takes the all-to-all."""
    row = next(r for r in bundled_published() if run_setup(r).closed_form)
    plan = _dp_plan(2, 4, 204)
    batch = StepBatch(num_decode_seqs=64, decode_context_tokens=64 * 100)
    alltoall = build_step_model(plan).step_time(batch).by_bound_s["communication"]
    step = run_step_model(row, run_setup(row), plan, None)
    assert isinstance(step, RooflineModel)
    assert step.moe_exchange == "allgather"
    eff = step.eff
    per_layer = 2 * (eff.collective_latency_s + 131072 / (450e9 * eff.collective_bandwidth))
    gathered = step.step_time(batch).by_bound_s["communication"]
    assert gathered == pytest.approx(48 * per_layer)
    assert gathered != pytest.approx(alltoall)
    monkeypatch.setattr(closed_form, "TRTLLM_MOE_EXCHANGE", False)
    off = run_step_model(row, run_setup(row), plan, None)
    assert isinstance(off, RooflineModel)
    assert off.moe_exchange == "alltoall"


def test_simulate_takes_the_engines_exchange_under_attention_dp() -> None:
    """``simulate`` and ``plan`` build their step model through ``DeploymentFlags.step_model``:
    Qwen3-30B-A3B over two H100s with expert parallelism (attention DP 2) exchanges as
    ``validate`` runs each engine: TensorRT-LLM's gather, SGLang's BF16 gather, vLLM's
    all-to-all; without expert parallelism (no attention DP) every engine keeps the default."""
    expected = {"trtllm": "allgather", "sglang": "allgather_bf16", "vllm": "alltoall"}
    for engine, exchange in expected.items():
        for ep in (True, False):
            flags = deployment_flags(dp=2, enable_expert_parallel=ep, engine=engine)
            plan = _dp_plan(2, 4, 204)
            if not ep:
                plan = replace(plan, parallelism=Parallelism(tp=2))
            model = flags.step_model(plan)
            assert isinstance(model, RooflineModel)
            assert model.moe_exchange == (exchange if ep else "alltoall"), (engine, ep)
