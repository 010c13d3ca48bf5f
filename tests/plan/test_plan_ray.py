"""The Ray executor on a local Ray instance started by the test (skipped without Ray:
``uv sync --extra ray`` or ``pip install 'inferplan[ray]'``)."""

from __future__ import annotations

import json

import pytest

from inferplan.plan.executor import make_executor
from inferplan.plan.result import build_output
from inferplan.plan.search import run_search

from .planner_helpers import tiny_request

ray = pytest.importorskip("ray")


def test_ray_gives_the_same_plan_as_local_processes() -> None:
    request = tiny_request(
        hardware=[{"gpu": "l40s", "price_per_gpu_hour": 1.0, "max_gpus": 2}],
        quantization=["fp8"],
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_search(request, lambda ctx: make_executor(ctx, 1, "auto"))
    finally:
        ray.shutdown()
    local = run_search(request)
    assert json.dumps(build_output(remote, run_stress=False)) == json.dumps(
        build_output(local, run_stress=False)
    )
