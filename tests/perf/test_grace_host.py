"""The host CPU's speed (``perf/overlap.py`` ``on_host``): a Grace-hosted part runs a release's
per-step and per-sequence host work ``grace_host`` times as long as an x86 server's, and behind
the overlap scheduler (``host_overlap`` 1) a step takes the longer of the GPU's work and the
host's, so only host-bound steps slow down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.errors import InferplanError
from inferplan.memory.plan import weight_formats_for
from inferplan.perf.efficiency import Efficiency, efficiency_for, parse_efficiency
from inferplan.perf.moe import Routing
from inferplan.perf.overlap import on_host
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup, run_step_model
from inferplan.specs.dtypes import kv_format
from inferplan.specs.hardware import _parse_catalog, load_gpu
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import decode, spec_of


def _eff(gpu: str, **changes: float) -> Efficiency:
    return replace(efficiency_for(load_gpu(gpu)), **changes)


def _model(gpu: str, eff: Efficiency) -> RooflineModel:
    spec = spec_of("Llama-3.1-8B")
    return RooflineModel(
        spec,
        load_gpu(gpu),
        Parallelism(),
        weight_formats_for(spec, None),
        kv_format("auto", model_dtype=spec.dtype),
        eff,
        routing=Routing(),
    )


def test_the_catalog_names_the_grace_hosted_parts() -> None:
    grace = {g: load_gpu(g).host_cpu for g in ("gb200", "gb300", "gh200")}
    x86 = {g: load_gpu(g).host_cpu for g in ("b200", "b300", "h100", "h200", "l40s")}
    assert set(grace.values()) == {"grace"}
    assert set(x86.values()) == {"x86"}


def test_an_unknown_host_cpu_is_refused_without_a_traceback() -> None:
    entry = {
        "memory": {"capacity_gb": 80, "bandwidth_tbps": 3.35},
        "compute_dense_tflops": {"bf16": 989},
        "host_cpu": "arm",
    }
    with pytest.raises(InferplanError, match="host_cpu"):
        _parse_catalog({"accelerators": {"mine": entry}}, "mine.yaml")


def test_on_host_scales_the_host_work_on_grace_only() -> None:
    eff = _eff("gb200", step_overhead_s=2e-3, per_seq_overhead_s=1e-5, grace_host=1.5)
    grace = on_host(eff, load_gpu("gb200"))
    assert grace.step_overhead_s == pytest.approx(3e-3)
    assert grace.per_seq_overhead_s == pytest.approx(1.5e-5)
    assert grace.grace_host == 1.0
    # Nothing else moves, and the costs are the Grace host's now: a second call is a no-op.
    assert replace(grace, step_overhead_s=2e-3, per_seq_overhead_s=1e-5, grace_host=1.5) == eff
    assert on_host(grace, load_gpu("gb200")) == grace
    assert on_host(eff, load_gpu("b200")) is eff


def test_grace_host_is_read_and_bounded_in_a_calibration_file() -> None:
    data = {k: v for k, v in efficiency_for(load_gpu("b200")).to_dict().items()}
    assert parse_efficiency({**data, "grace_host": 1.7}, "f.yaml").grace_host == 1.7
    with pytest.raises(InferplanError, match="grace_host"):
        parse_efficiency({**data, "grace_host": 10.0}, "f.yaml")


def test_behind_the_overlap_scheduler_only_host_bound_steps_slow_down_on_grace() -> None:
    """A step is max(GPU, host) + the per-layer cost: with the host far below a 256-row decode's
    GPU time the Grace factor changes nothing; with it far above, the step grows by exactly the
    host's extra time (per step and per sequence, by hand)."""
    gpu = load_gpu("gb200")
    batch = decode(256, 2048)
    quiet = _eff("gb200", host_overlap=1.0, step_overhead_s=1e-5, per_seq_overhead_s=0.0)
    x86 = _model("gb200", quiet).step_time(batch).total_s
    slow = _model("gb200", on_host(replace(quiet, grace_host=2.0), gpu)).step_time(batch).total_s
    assert slow == pytest.approx(x86, rel=1e-12)

    busy = _eff("gb200", host_overlap=1.0, step_overhead_s=0.2, per_seq_overhead_s=1e-4)
    host = 0.2 + 256 * 1e-4
    x86 = _model("gb200", busy).step_time(batch).total_s
    slow = _model("gb200", on_host(replace(busy, grace_host=2.0), gpu)).step_time(batch).total_s
    assert slow - x86 == pytest.approx(host, rel=1e-9)
    # Without the overlap (the host and the GPU take turns) both add in full: the same excess.
    turns = replace(busy, host_overlap=0.0)
    x86 = _model("gb200", turns).step_time(batch).total_s
    slow = _model("gb200", on_host(replace(turns, grace_host=2.0), gpu)).step_time(batch).total_s
    assert slow - x86 == pytest.approx(host, rel=1e-9)


def test_a_published_runs_model_takes_the_host_at_the_host_cpus_speed() -> None:
    """``run_step_model`` (the closed form's and the simulated rows' model): a TensorRT-LLM run
    on a Grace-hosted GB200 takes the release's host costs ``grace_host`` times (here 2), per
    step and per sequence, nothing else; the same run on a B200 (x86 host) keeps them."""
    costs = {"step_overhead_s": 1e-3, "per_seq_overhead_s": 1e-5}
    for gpu, factor in (("gb200_per_gpu", 2.0), ("b200_hgx", 1.0)):
        first = next(r for r in bundled_published() if r.engine == "tensorrt-llm" and r.gpu == gpu)
        setup = run_setup(first)
        plan = memory_plan(setup)
        stated = replace(efficiency_for(plan.gpu), grace_host=2.0, **costs)
        step = run_step_model(first, setup, plan, stated)
        assert isinstance(step, RooflineModel)
        assert step.eff.step_overhead_s == pytest.approx(1e-3 * factor)
        assert step.eff.per_seq_overhead_s == pytest.approx(1e-5 * factor)
        assert step.eff.layer_overhead_s == stated.layer_overhead_s
