"""SGLang's DP-attention settings (engine/session.py, plan/published_runs.py): its chunked prefill
size is divided by ``dp_size`` per rank, its conservativeness scaled by 0.3, and the flag alone
(``--dp-size`` 1) turns nothing on."""

from __future__ import annotations

from dataclasses import replace

from inferplan.engine.session import ServingOptions, simulation_config
from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import run_setup
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism


def dp_plan():  # type: ignore[no-untyped-def]
    par = Parallelism(tp=1, dp=8, enable_expert_parallel=True)
    config = MemoryConfig(max_num_batched_tokens=8192, max_num_seqs=256)
    return plan_memory(load_model("Qwen3-30B-A3B"), load_gpu("h200"), par, config)


def test_sglang_ranks_share_one_chunk_and_admit_with_a_third_of_the_ratio() -> None:
    plan = dp_plan()
    assert plan.parallelism.attention_dp == 8
    sglang = simulation_config(plan, ServingOptions(engine="sglang")).scheduler
    assert sglang.max_num_batched_tokens == 8192  # 8 ranks x 8192 // 8
    assert sglang.schedule_conservativeness == 0.3
    scaled = simulation_config(plan, ServingOptions(engine="sglang", schedule_conservativeness=2))
    assert scaled.scheduler.schedule_conservativeness == 0.6
    vllm = simulation_config(plan, ServingOptions(engine="vllm")).scheduler
    assert vllm.max_num_batched_tokens == 8 * 8192  # each rank its own budget
    assert vllm.schedule_conservativeness == 1.0


def test_sglang_enable_dp_attention_without_dp_size_is_plain_tensor_parallelism() -> None:
    row = next(
        r
        for r in bundled_published()
        if r.engine == "sglang"
        and r.settings.get("enable_dp_attention") == "true"
        and "dp_size" not in r.settings
    )
    assert row.attention_dp  # the table mirrors the flag
    par = run_setup(row).par
    assert par.tp == row.tp and par.attention_dp == 1
    with_dp = replace(row, settings={**row.settings, "dp_size": str(row.tp)})
    assert run_setup(with_dp).par.attention_dp == row.tp
