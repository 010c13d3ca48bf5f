"""A tiny plan request shared by the planner's tests: small model, short simulations."""

from __future__ import annotations

from typing import Any

from inferplan.plan.request import PlanRequest, parse_request

TINY: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "traffic": [
        {
            "class": "chat",
            "request_rate": 6,
            "input_len": {"mean": 600, "sigma": 0.5, "max": 2000},
            "output_len": {"mean": 200, "sigma": 0.5, "max": 600},
            "slo": {"ttft_p99_ms": 1500, "tpot_p99_ms": 40},
        },
        {
            "class": "batch",
            "request_rate": 1,
            "input_len": 2000,
            "output_len": 400,
            "slo": {"e2el_p90_s": 30},
        },
    ],
    "hardware": [
        {"gpu": "h100", "price_per_gpu_hour": 2.5, "max_gpus": 4},
        {"gpu": "l40s", "price_per_gpu_hour": 1.0, "max_gpus": 4},
    ],
    "quantization": ["bf16", "fp8"],
    "parallelism": {"tensor_parallel_size": [1, 2], "pipeline_parallel_size": [1]},
    "max_num_seqs": [64],
    "max_num_batched_tokens": [2048],
    "api": {"input_per_million_usd": 0.05, "output_per_million_usd": 0.2},
    "search": {"window_s": 40, "fleet_window_s": 60, "min_class_requests": 10, "max_requests": 500},
}


def tiny_request(**changes: Any) -> PlanRequest:
    data = {**TINY, **changes}
    return parse_request(data, "tiny.yaml")
