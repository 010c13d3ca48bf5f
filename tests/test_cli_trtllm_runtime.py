"""``simulate --engine trtllm``: trtllm-serve's runtime by default, ``--trtllm-runtime
trtllm-bench`` for the offline benchmark's (``plan/trtllm_runtime.py``)."""

from __future__ import annotations

import json

import pytest

from cli_run import assert_one_line_error, run
from inferplan.plan.served import release_cpu_costs
from inferplan.plan.trtllm_serve import bundled_serve_constants
from inferplan.specs.catalog import load_model

LLAMA = ("--model", "Llama-3.1-8B", "--gpu", "h100", "--engine", "trtllm")


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, float]:
    code, out, err = run(capsys, "simulate", *LLAMA, *args, "--json")
    assert code == 0, err
    summary: dict[str, float] = json.loads(out)
    return summary


def _burst(num: int, *runtime: str) -> tuple[str, ...]:
    """``num`` requests of 128 + 65 tokens sent at once: one context step, then 64 decode
    steps of ``num`` sequences."""
    lengths = ("--random-input-len", "128", "--random-output-len", "65")
    return ("--num-prompts", str(num), *lengths, *runtime)


def test_one_sequence_pays_the_bench_host_costs_only_with_trtllm_bench(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request alone decodes in a captured graph under both runtimes, at the same GPU
    time. trtllm-bench adds the release's host work per step (2.123 ms + 6.231 us per sequence,
    of which 16.72 % hides behind the GPU: 1.773 ms by hand); trtllm-serve's host work
    (5 ms a step and 150 us a sequence) hides behind the GPU entirely (overlap scheduler), so
    TPOT differs by exactly the bench's exposed host time. The front end's per-token cost
    shifts every token alike. Without the served runtime's kernel floor
    (``perf/kernel_floor.py``: trtllm-serve's graphs set it, trtllm-bench's closed-form runtime
    has none), which would add to serve's GPU time."""
    monkeypatch.setattr("inferplan.perf.roofline.SERVED_KERNEL_FLOOR_S", 0.0)
    serve = _simulate(capsys, *_burst(1))
    bench = _simulate(capsys, *_burst(1, "--trtllm-runtime", "trtllm-bench"))
    release = release_cpu_costs()["trtllm-pytorch"]
    host_s = release["step_overhead_s"] + release["per_seq_overhead_s"]
    expected_ms = host_s * (1 - release["host_overlap"]) * 1e3  # 1.773 ms with today's file
    assert bench["mean_tpot_ms"] - serve["mean_tpot_ms"] == pytest.approx(expected_ms, rel=1e-6)
    explicit = _simulate(capsys, *_burst(1, "--trtllm-runtime", "trtllm-serve"))
    assert explicit == serve


def test_trtllm_serve_runs_uncaptured_decode_batches_eagerly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """trtllm-serve captures decode graphs for 1..32, 64 and 128 sequences, unpadded: 33
    sequences launch every layer from Python (the eager cost per layer, on top of the step)
    and their host cost on the executor's thread (per step, and per sequence) may outlast the
    GPU's step: by hand max(32 sequences' step, host + 33 x per-sequence cost) + 32 layers x
    (eager launch + layer overhead), from the bundled files, where 32 sequences replay a graph
    (max(GPU, their host work): host-bound with 5 ms a step); the jump from 32 to 33 is at least
    the eager launches. trtllm-bench graphs every batch: one more sequence costs it
    almost nothing."""
    layers = load_model("Llama-3.1-8B").num_layers
    serve = bundled_serve_constants().host_s
    layer_s = release_cpu_costs()["trtllm-pytorch"]["layer_overhead_s"]
    host_s = serve.get("step_overhead_s", 0.0) + 33 * serve["per_seq_overhead_s"]
    serve_32, serve_33 = (_simulate(capsys, *_burst(n))["mean_tpot_ms"] for n in (32, 33))
    step_32_s = serve_32 / 1e3 - layers * layer_s  # max(GPU, host) of 32 sequences' step
    launches_s = layers * (serve["eager_layer_overhead_s"] + layer_s)
    expected_ms = (max(step_32_s, host_s) + launches_s) * 1e3
    assert serve_33 == pytest.approx(expected_ms, rel=1e-3)
    assert serve_33 - serve_32 >= layers * serve["eager_layer_overhead_s"] * 1e3
    bench = ("--trtllm-runtime", "trtllm-bench")
    bench_32, bench_33 = (_simulate(capsys, *_burst(n, *bench))["mean_tpot_ms"] for n in (32, 33))
    assert 0 <= bench_33 - bench_32 < 0.01 * bench_32


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--trtllm-runtime", "bench"), "'--trtllm-runtime': 'bench' is not one of"),
        (("--engine", "vllm", "--trtllm-runtime", "trtllm-bench"), "--trtllm-runtime: applies"),
    ],
)
def test_bad_runtimes_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], expected: str
) -> None:
    code, _, err = run(capsys, "simulate", *LLAMA, *args, "--num-prompts", "2")
    assert code == 2
    assert expected in assert_one_line_error(err)


def test_help_names_both_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "--help")
    assert code == 0
    assert "--trtllm-runtime" in out and "trtllm-serve" in out and "trtllm-bench" in out
