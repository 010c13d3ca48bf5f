"""The planner's search against brute force, its determinism, its cache and its stress test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferplan.engine.frontend import engine_frontend, seen_result
from inferplan.engine.session import ServingOptions, simulate
from inferplan.plan import cache as cache_module
from inferplan.plan import slo
from inferplan.plan.bounds import build_plan, step_model
from inferplan.plan.cache import EvaluationCache
from inferplan.plan.capacity import build_context, prepare, stress
from inferplan.plan.executor import make_executor
from inferplan.plan.request import PlanRequest
from inferplan.plan.result import build_output
from inferplan.plan.search import SearchResult, plan_cost, run_search
from inferplan.plan.space import ReplicaConfig, replica_configs
from inferplan.plan.traffic import class_counts, mixed_workload

from .planner_helpers import tiny_request

Searched = tuple[SearchResult, dict[str, Any]]


@pytest.fixture(scope="module")
def searched() -> Searched:
    result = run_search(tiny_request())
    return result, build_output(result)


def _fleet_meets(request: PlanRequest, cfg: ReplicaConfig, replicas: int) -> bool:
    """One whole-fleet simulation at the planned load, as a user would run it."""
    ctx = build_context(request)
    plan = build_plan(request.model, cfg, ctx.max_model_len, request.memory_fraction)
    counts = class_counts(request, ctx.load_scale, request.search.fleet_window_s)
    workload = mixed_workload(request, ctx.load_scale, counts)
    options = ServingOptions(data_parallel_size=replicas, engine=cfg.engine)
    result = simulate(plan, step_model(plan, cfg.engine), workload, options)
    result, _ = seen_result(result, engine_frontend(cfg.engine))  # what the client sees
    return slo.worst(slo.evaluate(result, request)) <= 1.0


def test_search_finds_the_brute_force_cheapest(searched: Searched) -> None:
    """Every deployment (configuration x replica count) simulated whole: same cheapest cost."""
    request = tiny_request()
    ctx = build_context(request)
    feasible = []
    for cfg in replica_configs(request):
        if prepare(ctx, cfg).pruned == "memory":
            continue
        for n in range(1, cfg.max_replicas + 1):
            if _fleet_meets(request, cfg, n):
                feasible.append((plan_cost(request, cfg, n), cfg, n))
                break
    brute_cost, _, _ = min(feasible)
    best = searched[1]["best"]
    assert best["cost_per_hour_usd"] == pytest.approx(brute_cost)
    assert (best["gpu"], best["quantization"]) == ("l40s", "fp8")  # l40s bf16 needs 2


def test_best_plan_meets_every_slo_when_resimulated(searched: Searched) -> None:
    result, out = searched
    best = out["best"]
    cfg = next(
        c.cfg
        for c in result.candidates
        if c.cfg.gpu == best["gpu"]
        and c.cfg.tp == best["tensor_parallel_size"]
        and c.cfg.quantization == best["quantization"]
    )
    assert _fleet_meets(result.ctx.request, cfg, best["data_parallel_size"])
    assert all(cls["met"] for cls in best["slo_met"].values())
    again = stress(result.ctx, cfg, best["data_parallel_size"], 1.0)
    assert again["all_met"] and again["breaks_first"] is None


def test_stress_names_the_slo_that_breaks_first(searched: Searched) -> None:
    out = searched[1]
    stressed = out["stress"]
    assert stressed["traffic_factor"] == 1.2
    ratios = [r["ratio"] for r in stressed["ratios"]]
    assert ratios == sorted(ratios, reverse=True)
    if stressed["breaks_first"] is not None:
        assert stressed["breaks_first"] == stressed["ratios"][0]["slo"]
        assert ratios[0] > 1.0
    overloaded = stress(searched[0].ctx, searched[0].feasible()[0].cfg, 1, 5.0)
    assert overloaded["breaks_first"] is not None and not overloaded["all_met"]


def test_output_has_the_documented_keys(searched: Searched) -> None:
    out = searched[1]
    for key in ("best", "pareto", "evaluated", "pruned", "api", "hybrid", "pareto_throughput"):
        assert key in out
    best = out["best"]
    for key in (
        "gpu", "num_gpus", "tensor_parallel_size", "pipeline_parallel_size",
        "data_parallel_size", "quantization", "kv_cache_dtype", "max_num_seqs",
        "cost_per_hour_usd", "cost_per_million_output_tokens_usd", "slo_met", "launch_command",
    ):  # fmt: skip
        assert key in best
    assert best["num_gpus"] == best["data_parallel_size"] * best["tensor_parallel_size"]
    assert best in out["pareto"]  # the cheapest is on the cost front
    assert "api" in out and out["api"]["cost_per_hour_usd"] > 0
    json.dumps(out, allow_nan=False)


def test_same_inputs_same_output_and_workers_do_not_change_it(searched: Searched) -> None:
    request = tiny_request()
    again = build_output(run_search(request), run_stress=False)
    pooled = build_output(
        run_search(request, lambda ctx: make_executor(ctx, 2, None)), run_stress=False
    )
    first = dict(searched[1], stress=None)
    assert json.dumps(again) == json.dumps(first)
    assert json.dumps(pooled) == json.dumps(first)


def test_cache_resumes_without_simulating(tmp_path: Path) -> None:
    request = tiny_request(hardware=[{"gpu": "l40s", "price_per_gpu_hour": 1.0, "max_gpus": 2}])
    with EvaluationCache(tmp_path / "c.sqlite") as cache:
        first = build_output(run_search(request, cache=cache), run_stress=False)
        assert cache.num_hits == 0
    with EvaluationCache(tmp_path / "c.sqlite") as cache:
        second = build_output(run_search(request, cache=cache), run_stress=False)
        assert cache.num_hits == first["evaluated"] + first["confirmed"] > 0
    assert json.dumps(first) == json.dumps(second)
    # A new price re-prices the cached evaluations: still no simulation.
    cheaper = tiny_request(hardware=[{"gpu": "l40s", "price_per_gpu_hour": 0.5, "max_gpus": 2}])
    with EvaluationCache(tmp_path / "c.sqlite") as cache:
        third = build_output(run_search(cheaper, cache=cache), run_stress=False)
        assert cache.num_hits == first["evaluated"] + first["confirmed"]
    assert third["best"]["cost_per_hour_usd"] == first["best"]["cost_per_hour_usd"] / 2


def test_a_changed_constants_file_or_module_changes_the_cache_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refit edits a constants file and keeps the version: the key must not answer from
    # evaluations made before it (found when vLLM's FP8 refit left `make demo` a stale plan).
    package = Path(cache_module.__file__).resolve().parent.parent
    copy = tmp_path / "inferplan"
    for path in package.rglob("*"):
        if path.suffix in (".py", ".yaml"):
            target = copy / path.relative_to(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    monkeypatch.setattr(cache_module, "__file__", str(copy / "plan" / "cache.py"))

    def version() -> str:
        cache_module.code_version.cache_clear()
        return cache_module.code_version()

    original = version()
    assert version() == original  # the same files, the same key
    kernels = copy / "perf" / "data" / "engine_kernels.yaml"
    kernels.write_bytes(kernels.read_bytes() + b"\n# refit\n")
    refit = version()
    step = copy / "perf" / "step_seconds.py"
    step.write_bytes(step.read_bytes() + b"\n")
    assert len({original, refit, version()}) == 3
    context = build_context(tiny_request())
    monkeypatch.setattr(cache_module, "code_version", lambda: original)
    before = cache_module.context_fingerprint(context)
    monkeypatch.setattr(cache_module, "code_version", lambda: refit)
    assert cache_module.context_fingerprint(context) != before
