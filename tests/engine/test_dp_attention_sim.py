"""A DP-attention replica (vLLM DP + EP) simulates as one replica with the ranks' summed limits."""

from __future__ import annotations

import numpy as np

from inferplan.cli_flags import build_memory_plan
from inferplan.engine.session import ServingOptions, simulate
from inferplan.metrics.records import RequestStatus
from inferplan.perf.factory import build_step_model
from inferplan.workload import build_workload


def test_dp_attention_replica_fast_equals_exact() -> None:
    plan = build_memory_plan(
        "Qwen3-30B-A3B", "h100", 2, 1, True, None, "auto", 4096, 0.9, 512, 8, None, dp=2
    )
    assert plan.parallelism.num_replicas == 1
    model = build_step_model(plan)
    workload = build_workload(
        "random",
        num_prompts=60,
        random_input_len=300,
        random_output_len=200,
        random_range_ratio=0.5,
        request_rate=30.0,
        seed=3,
    )
    fast = simulate(plan, model, workload, ServingOptions(data_parallel_size=1))
    exact = simulate(plan, model, workload, ServingOptions(data_parallel_size=1, exact=True))
    assert np.all(fast.records.status == RequestStatus.COMPLETED)
    assert fast.num_steps == exact.num_steps
    np.testing.assert_allclose(fast.records.finish_s, exact.records.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.records.first_token_s, exact.records.first_token_s, rtol=1e-9)
    # Two ranks of 8 sequences each run side by side in the one replica.
    assert int(fast.records.num_preemptions.sum()) == int(exact.records.num_preemptions.sum())


def test_cli_simulates_dp_attention(capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from inferplan.cli import main

    status = main(
        [
            "simulate",
            "--model",
            "Qwen3-30B-A3B",
            "--gpu",
            "h100",
            "-tp",
            "2",
            "-dp",
            "2",
            "--enable-expert-parallel",
            "--num-prompts",
            "40",
            "--random-input-len",
            "200",
            "--random-output-len",
            "50",
            "--json",
        ]
    )
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["completed"] == 40
    assert summary["data_parallel_size"] == 2
