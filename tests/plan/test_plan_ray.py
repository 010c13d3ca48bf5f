"""The Ray executor on a local Ray instance started by the test (skipped without Ray:
``uv sync --extra ray`` or ``pip install 'inferplan[ray]'``)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from inferplan.plan.executor import make_executor
from inferplan.plan.result import build_output
from inferplan.plan.search import run_search

from .planner_helpers import tiny_request

ray = pytest.importorskip("ray")

# Under `uv run` (make test), Ray's uv integration starts every worker through `uv run`, which
# hangs on this machine (no network); run this test with .venv/bin/pytest directly.
pytestmark = pytest.mark.skipif(
    "UV_RUN_RECURSION_DEPTH" in os.environ,
    reason="Ray workers started through uv run hang offline; run with .venv/bin/pytest",
)


def test_ray_gives_the_same_plan_as_local_processes() -> None:
    request = tiny_request(
        hardware=[{"gpu": "l40s", "price_per_gpu_hour": 1.0, "max_gpus": 2}],
        quantization=["fp8"],
    )
    # Workers run this interpreter: under `uv run`, Ray would otherwise start them through uv,
    # packaging the working directory (slow, and it needs the network).
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"py_executable": sys.executable},
    )
    try:
        remote = run_search(request, lambda ctx: make_executor(ctx, 1, "auto"))
    finally:
        ray.shutdown()
    local = run_search(request)
    assert json.dumps(build_output(remote, run_stress=False)) == json.dumps(
        build_output(local, run_stress=False)
    )
