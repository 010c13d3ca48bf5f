"""The routed experts' copy, activation and finalize passes (perf/moe_passes.py): their bytes by
hand, their time added to the GEMMs' on the busiest rank, and TensorRT-LLM's runs only."""

from __future__ import annotations

import pytest

from deployment_flags import deployment_flags
from inferplan.perf.moe_passes import engine_moe_passes, pass_bytes_per_pick
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup, run_step_model

from .perf_helpers import prefill, roofline, spec_of

NVFP4 = 0.5 + 1 / 16


def test_bytes_per_pick_by_hand() -> None:
    """Qwen3-30B-A3B (hidden 2,048, experts 768 wide, SwiGLU) in NVFP4: the row copied (2 x
    2,048 x 0.5625), the gate/up output read (2 x 1,536 BF16) and the down input written (768 x
    0.5625), the down output read back (2 x 2,048)."""
    assert pass_bytes_per_pick(2048, 768, NVFP4, True) == pytest.approx(2304 + 3072 + 432 + 4096)
    assert pass_bytes_per_pick(2048, 768, 2.0, False) == pytest.approx(8192 + 1536 + 1536 + 4096)


def _passes_s(model: RooflineModel, tokens: int) -> float:
    """The step's time with the passes minus without them (the passes' own seconds)."""
    model.moe_passes = True
    on = model.step_time(prefill(tokens))
    model.moe_passes = False
    off = model.step_time(prefill(tokens))
    assert "expert_passes" in on.by_operator_s and "expert_passes" not in off.by_operator_s
    assert on.by_operator_s["expert_passes"] == pytest.approx(on.total_s - off.total_s)
    return on.total_s - off.total_s


@pytest.mark.parametrize(
    ("tp", "ep", "dp"), [(1, False, 1), (2, False, 1), (1, True, 4), (2, True, 2)]
)
def test_the_passes_add_their_bytes_at_the_weight_bandwidth(tp: int, ep: bool, dp: int) -> None:
    """Qwen3-30B-A3B (BF16 checkpoint) on H100, 4,096 prompt tokens: 48 layers x 4,096 tokens x
    8 picks x the bytes per pick (tensor parallelism: every pick on each rank, experts half as
    wide; four EP ranks (TP1 x DP4 or TP2 x DP2), uniform routing: a quarter of the picks on
    the busiest, whole experts whatever the TP), at the bundled memory-bandwidth fraction,
    added to the step."""
    model = roofline("Qwen3-30B-A3B", "h100", tp=tp, dp=dp, ep=ep)
    spec, tokens = spec_of("Qwen3-30B-A3B"), 4096
    ffn = spec.moe_ffn
    assert ffn is not None and spec.hidden_size == 2048 and ffn.intermediate_size == 768
    picks = tokens * 8 / (4 if ep else 1)
    per_pick = pass_bytes_per_pick(2048, 768 / (1 if ep else tp), 2.0, True)
    rate = model.gpu.memory_bandwidth_bytes_s * model.eff.memory_bandwidth
    assert _passes_s(model, tokens) == pytest.approx(48 * picks * per_pick / rate, rel=1e-9)


def test_the_passes_are_trtllms_and_its_runs_take_them() -> None:
    """TensorRT-LLM's runs (``trtllm-bench``'s closed form, ``trtllm-serve``, ``simulate
    --engine trtllm``) time the passes; vLLM's and SGLang's keep their fitted experts' factor
    (gpt-oss-120b's first published run of each engine; ``DeploymentFlags.step_model``)."""
    assert engine_moe_passes("trtllm")
    assert not engine_moe_passes("vllm") and not engine_moe_passes("sglang")
    wanted = {"tensorrt-llm": True, "vllm": False, "sglang": False}
    seen: set[str] = set()
    for row in bundled_published():
        if row.engine in seen or row.engine not in wanted or "gpt-oss-120b" not in row.model:
            continue
        setup = run_setup(row)
        step = run_step_model(row, setup, memory_plan(setup), None)
        assert isinstance(step, RooflineModel)
        assert step.moe_passes is wanted[row.engine], row.case_id
        seen.add(row.engine)
    assert seen == set(wanted)
    plan = memory_plan(run_setup(next(r for r in bundled_published() if "q30-b200" in r.case_id)))
    for engine in ("trtllm", "vllm", "sglang"):
        model = deployment_flags(gpu="b200", engine=engine).step_model(plan)
        assert isinstance(model, RooflineModel) and model.moe_passes is (engine == "trtllm")
