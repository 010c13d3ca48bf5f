"""TensorRT-LLM's runtimes outside ``validate`` (``plan/trtllm_runtime.py``): the planner and
``simulate`` reach the same ``trtllm-serve`` step model that ``validate`` predicts its rows with,
and a plan request chooses the runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.perf.batch import StepBatch
from inferplan.plan.bounds import step_model
from inferplan.plan.cache import context_fingerprint
from inferplan.plan.capacity import build_context
from inferplan.plan.planfile import request_data
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup, run_step_model
from inferplan.plan.trtllm_runtime import check_trtllm_runtime, runtime_frontend
from inferplan.plan.trtllm_serve import is_trtllm_serve

from .planner_helpers import tiny_request

BATCHES = [
    StepBatch(num_decode_seqs=1, decode_context_tokens=300),
    StepBatch(num_decode_seqs=33, decode_context_tokens=33 * 400),
    StepBatch(prefill_tokens=2048, prefill_attention_pairs=2048 * 1024, num_prefill_seqs=1),
]


def test_the_planner_and_validate_share_the_trtllm_serve_step_model() -> None:
    """A ``trtllm-serve`` row's plan: ``validate``'s step model and the planner's default one
    (``simulate``'s too: the same functions) time every batch alike; ``trtllm-bench`` does not."""
    row = next(r for r in bundled_published() if is_trtllm_serve(r) and r.gpu.startswith("h100"))
    setup = run_setup(row)
    plan = memory_plan(setup)
    validated = run_step_model(row, setup, plan, None)
    serve = step_model(plan, "trtllm")
    bench = step_model(plan, "trtllm", "trtllm-bench")
    for batch in BATCHES:
        assert serve.step_time(batch).total_s == validated.step_time(batch).total_s
        assert bench.step_time(batch).total_s != serve.step_time(batch).total_s
    assert step_model(plan, "vllm", None).step_time(BATCHES[0]) == step_model(
        plan, "vllm", "trtllm-bench"
    ).step_time(BATCHES[0])  # other engines ignore it


def test_trtllm_bench_has_no_http_front_end() -> None:
    assert runtime_frontend("trtllm").per_token_s > 0  # trtllm-serve's streamed tokens
    assert runtime_frontend("trtllm", "trtllm-bench").per_token_s == 0
    assert runtime_frontend("vllm", "trtllm-bench") == runtime_frontend("vllm")


def test_a_request_names_the_runtime_only_when_it_gives_one() -> None:
    """The plan file keeps its keys for requests that do not set it; the cache fingerprint
    tells the runtimes apart for engine trtllm and is unchanged for other engines."""
    plain = tiny_request()
    assert "trtllm_runtime" not in request_data(plain)
    trt = tiny_request(engines=["trtllm"])
    bench = tiny_request(engines=["trtllm"], trtllm_runtime="trtllm-bench")
    assert request_data(bench)["trtllm_runtime"] == "trtllm-bench"
    fingerprints = {context_fingerprint(build_context(r)) for r in (trt, bench)}
    assert len(fingerprints) == 2
    explicit = tiny_request(engines=["trtllm"], trtllm_runtime="trtllm-serve")
    assert context_fingerprint(build_context(explicit)) == context_fingerprint(build_context(trt))


REQUEST = """\
model: Qwen/Qwen3-8B
traffic:
  - class: chat
    request_rate: 2
    input_len: 300
    output_len: 100
    slo: {ttft_p99_ms: 2000}
hardware:
  - {gpu: h100, price_per_gpu_hour: 2.5}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            REQUEST + "engines: [trtllm]\ntrtllm_runtime: bench\n",
            ":11: trtllm_runtime: Input should be 'trtllm-serve' or 'trtllm-bench'",
        ),
        (
            REQUEST + "trtllm_runtime: trtllm-bench\n",
            ":10: trtllm_runtime: applies to engine trtllm only (engines: vllm)",
        ),
    ],
)
def test_bad_request_runtimes_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "req.yaml"
    path.write_text(text)
    assert main(["plan", str(path), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and expected in err, err


def test_library_callers_get_one_line_errors_too() -> None:
    with pytest.raises(InferplanError, match=r"^x: unknown runtime 'bench'; valid: trtllm-serve"):
        check_trtllm_runtime("trtllm", "bench", "x")
    with pytest.raises(InferplanError, match=r"^x: applies to --engine trtllm only \(got sglang\)"):
        check_trtllm_runtime("sglang", "trtllm-serve", "x")
    check_trtllm_runtime("sglang", None, "x")  # nothing named: nothing to refuse
