"""Regressions of issue 9 ("Hardening"), one group per class of defect, each failing before the
fix (items 1, 2 and 9, the engine's, are tested on the engine's branch).

Every bad input is one ``error:`` line naming the flag or ``file:line``, exit 2; a model that
does not fit exits 1; a completed run exits 0; nothing is a traceback (``docs/errors.md``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplan import cli, cli_colocated, cli_fit
from inferplan.cli import main
from inferplan.memory.plan import MemoryConfig
from inferplan.plan.validation import Deployment, _plan
from time_limit import time_limit
from tiny_configs import tiny_llama

LLAMA = ["--model", "Llama-3.1-8B", "--gpu", "h100"]
TINY_CONFIG = tiny_llama()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with time_limit(120):
        code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, _, err = run(capsys, *argv)
    message = one_error(err)
    assert code == 2, err
    return message


# ---- 3. one reader for every user file ------------------------------------------------------

TRACE_CSV = "arrival_s,input_tokens,output_tokens\n0,10,5\n1,20,5\n"
BAD_CONTENTS: dict[str, bytes] = {
    "not_utf8": b'{"a": "\xff\xfe"}\n',
    "deep": b"[" * 5000 + b"]" * 5000,  # deeper than Python recursion (1,000)
    "huge_int": b'{"hidden_size": 1' + b"0" * 5000 + b"}\n",
    "empty": b"",
}


def file_flags(kind: str, path: str) -> list[str]:
    return {
        "config": ["memory", "--model", path, "--gpu", "h100"],
        "gpu": ["memory", "--model", "Llama-3.1-8B", "--gpu", path],
        "calibration": ["roofline", *LLAMA, "--calibration", path],
        "table": ["roofline", *LLAMA, "--operator-table", path],
        "trace": ["simulate", *LLAMA, "--dataset-name", "trace", "--dataset-path", path],
        "result": ["calibrate", *LLAMA, path, "-o", str(Path(path).parent / "fit.yaml")],
    }[kind]


SUFFIX = {
    "config": ".json",
    "gpu": ".yaml",
    "calibration": ".yaml",
    "table": ".csv",
    "result": ".json",
}


@pytest.mark.parametrize("kind", ["config", "gpu", "calibration", "table", "trace", "result"])
@pytest.mark.parametrize("content", sorted(BAD_CONTENTS))
def test_every_user_file_gets_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, content: str
) -> None:
    path = tmp_path / f"bad{SUFFIX.get(kind, '.jsonl')}"
    path.write_bytes(BAD_CONTENTS[content])
    message = refused(capsys, *file_flags(kind, str(path)))
    assert str(path) in message


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")
def test_deeply_nested_yaml_is_refused_by_the_scanner_with_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The pure-Python scanner's work grows with the square of the depth before a RecursionError
    # (the long fuzz profile once timed out on this file); libyaml stops at depth 1,000.
    path = tmp_path / "gpu.yaml"
    path.write_bytes(BAD_CONTENTS["deep"])
    message = refused(capsys, *file_flags("gpu", str(path)))
    assert message == f"error: {path}:1: not valid YAML (exceeded maximum nesting depth)"


@pytest.mark.parametrize("kind", ["config", "gpu", "calibration", "table", "trace", "result"])
def test_a_folder_an_empty_path_or_an_impossible_name_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    folder = tmp_path / f"folder{SUFFIX.get(kind, '.csv')}"
    folder.mkdir()
    assert "folder" in refused(capsys, *file_flags(kind, str(folder)))
    refused(capsys, *file_flags(kind, ""))
    refused(capsys, *file_flags(kind, "a" * 5000 + SUFFIX.get(kind, ".csv")))  # too long a name


def test_a_byte_order_mark_is_read_as_utf8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(b"\xef\xbb\xbf" + json.dumps(TINY_CONFIG).encode())
    code, _, err = run(capsys, "memory", "--model", str(config), "--gpu", "h100", "--json")
    assert code == 0, err


def test_a_duplicate_json_key_names_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 256,\n "hidden_size": 512}\n')
    assert f"{path}:2: key 'hidden_size' is given twice" in refused(
        capsys, "memory", "--model", str(path), "--gpu", "h100"
    )


# ---- 4. numbers beyond range, refused at the edge ---------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--num-prompts", "1000000000000"], "MAX_NUM_REQUESTS"),
        (["--num-prompts", "5", "--random-input-len", str(2**63 - 1)], "MAX_TOKENS"),
        (["-dp", "1000000000000"], "MAX_DEVICES"),
        (["--num-prompts", "5", "--request-rate", "1e-320"], "MAX_SPAN_S"),
        (["--num-prompts", "5", "--request-rate", "1e-100"], "MAX_SPAN_S"),
        (["--num-prompts", "5", "--request-rate", "1", "--burstiness", "5e-324"], "burstiness"),
        (["--num-prompts", "5", "--goodput", "ttft:inf"], "MAX_SLO_MS"),
    ],
)
def test_numbers_beyond_range_name_their_bound(
    capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    assert named in refused(capsys, "simulate", *LLAMA, *flags)


def test_a_subnormal_request_rate_is_named_as_given_with_a_finite_span(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 5 / 1e-320 overflows to inf: the message once said "9.99989e-321" and "inf years".
    message = refused(capsys, "simulate", *LLAMA, "--num-prompts", "5", "--request-rate", "1e-320")
    assert "--request-rate 1e-320 with 5 requests" in message
    assert "spans over 5.7e+300 years" in message and "inf" not in message


def test_a_request_rate_spanning_under_a_year_still_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", *LLAMA, "--num-prompts", "3", "--request-rate", "1e-4", "--json"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["completed"] == 3


def test_the_benchmarks_long_output_run_is_within_the_span_bound() -> None:
    """benchmarks/bench_simulator.py's 10x-longer-outputs run sends 100,000 requests at a tenth
    of the rate (0.003 req/s: 1.06 years of arrivals); a one-year bound refused it."""
    from inferplan.workload.synthetic import check_span

    check_span(100_000, 0.003)


@pytest.mark.parametrize(
    ("kind", "text", "named"),
    [
        ("config", json.dumps({**TINY_CONFIG, "num_hidden_layers": 1_000_000_000}), "4,096"),
        (
            "gpu",
            "memory:\n  capacity_gb: .inf\n  bandwidth_tbps: 3\ncompute_dense_tflops:\n"
            "  bf16: 900\n",
            "capacity_gb",
        ),
        ("table", "operator,num_tokens,context_tokens,time_s\nmlp,1,0,inf\n", ":2:"),
        ("calibration", "efficiency:\n  gemm_compute: .nan\n", "gemm_compute"),
    ],
)
def test_numbers_beyond_range_in_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, text: str, named: str
) -> None:
    path = tmp_path / f"file{SUFFIX[kind]}"
    path.write_text(text)
    message = refused(capsys, *file_flags(kind, str(path)))
    assert str(path) in message and named in message


def test_trace_arrivals_spanning_decades_are_refused_but_epoch_times_are_read(
    tmp_path: Path,
) -> None:
    from inferplan.errors import InferplanError
    from inferplan.workload import load_trace

    mixed = tmp_path / "mixed.csv"
    mixed.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1.7e9,20,5\n")
    with pytest.raises(InferplanError, match=r"mixed\.csv:3: arrivals span 53\.9 years"):
        load_trace(mixed)
    epoch = tmp_path / "epoch.csv"
    epoch.write_text("arrival_s,input_tokens,output_tokens\n1.7e9,10,5\n1700000003.5,20,5\n")
    assert list(load_trace(epoch).arrival_s) == [1.7e9, 1700000003.5]


# ---- 6. typed config.json fields -------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"mlp_only_layers": 5, "num_experts": 4, "num_experts_per_tok": 2}, "'mlp_only_layers'"),
        ({"hidden_size": 4, "num_attention_heads": 8}, "head_dim"),
        ({"layer_types": "full_attention"}, "'layer_types'"),
        ({"quantization_config": "fp8"}, "'quantization_config'"),
        ({"torch_dtype": 16}, "'torch_dtype'"),
        ({"use_sliding_window": "yes", "sliding_window": 128}, "'use_sliding_window'"),
    ],
)
def test_config_fields_of_the_wrong_type_name_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, overrides: dict[str, Any], named: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_CONFIG, **overrides}))
    message = refused(capsys, "memory", "--model", str(path), "--gpu", "h100")
    assert named in message and str(path) in message


def test_multimodal_token_count_must_be_an_integer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "patch_size": 14,
        "image_size": 224,
    }
    cfg = {**TINY_CONFIG, "vision_config": vision, "mm_tokens_per_image": "abc"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert "'mm_tokens_per_image'" in refused(
        capsys, "memory", "--model", str(path), "--gpu", "h100"
    )


# ---- 7. every flag checked before the simulation ----------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--metric-percentiles", "150"], "--metric-percentiles"),
        (["--goodput", "foo:5"], "--goodput"),
        (["--goodput", "ttft:5", "--goodput", "ttft:6"], "twice"),
    ],
)
def test_bad_flags_fail_before_the_simulation(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    named: str,
) -> None:
    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulation ran before the flags were checked")

    monkeypatch.setattr(cli_colocated, "run_simulation", must_not_run)
    assert named in refused(capsys, "simulate", *LLAMA, "--num-prompts", "5", *flags)


# ---- 8. what real engines refuse ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--block-size", "7"], "vLLM accepts 1, 8, 16, 32, 64, 128"),
        (["--max-model-len", "200000"], "above the 131072 positions"),
        (["--max-num-seqs", "512", "--max-num-batched-tokens", "256"], "max_num_batched_tokens"),
    ],
)
def test_engine_refusals(capsys: pytest.CaptureFixture[str], flags: list[str], named: str) -> None:
    assert named in refused(capsys, "memory", *LLAMA, *flags)


def test_an_engine_warning_is_a_warning_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "memory", *LLAMA, "--engine", "trtllm", "--max-model-len", "140000", "--json"
    )
    assert code == 0
    assert err.startswith("warning: --max-model-len 140000 is above")


def test_vllm_lowers_its_default_sequences_to_the_token_budget() -> None:
    from inferplan.cli_flags import build_memory_plan

    args = ("Llama-3.1-8B", "h100", 1, 1, False, None, "auto", None, 0.9)
    plan = build_memory_plan(*args, 512, None, None)
    assert plan.config.max_num_seqs == 512  # vLLM: min(1024, max_num_batched_tokens)
    assert build_memory_plan(*args, None, None, None).config.max_num_seqs == 1024


def test_roofline_exits_1_when_the_model_does_not_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "roofline", "--model", "Llama-3.1-70B", "--gpu", "l40s", "--json")
    assert code == 1
    assert json.loads(out)["prefill"]  # the step times are still shown
    assert "does not fit" in one_error(err)


def test_duplicate_trace_columns_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,Input_Tokens\n0,10,5,20\n")
    message = refused(capsys, *file_flags("trace", str(path)))
    assert f"{path}:1:" in message and "twice" in message


def test_servegen_lengths_below_one_are_refused(tmp_path: Path) -> None:
    from inferplan.errors import InferplanError
    from inferplan.workload.servegen import read_servegen_json

    path = tmp_path / "pool.json"
    pmf = {"values": [0, 5], "probabilities": [0.5, 0.5]}
    ok = {"values": [5], "probabilities": [1.0]}
    path.write_text(json.dumps({"input_tokens": pmf, "output_tokens": ok}))
    with pytest.raises(InferplanError, match=r"pool\.json:1: input_tokens: length 0 tokens"):
        read_servegen_json(path)


# ---- 8 and 10. calibrate ------------------------------------------------------------------------

RESULT = {
    "completed": 10,
    "total_input_tokens": 5120,
    "total_output_tokens": 320,
    "request_rate": 4.0,
    "burstiness": 1.0,
    "max_concurrency": None,
    "mean_tpot_ms": 9.0,
}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("max_concurrency", 2.5, "whole number"),
        ("request_rate", -1, "'request_rate'"),
        ("request_rate", 1e-300, "MAX_SPAN_S"),
        ("burstiness", "abc", "'burstiness'"),
        ("completed", 2.5, "'completed'"),
        ("total_output_tokens", 0, "'total_output_tokens'"),
    ],
)
def test_a_bad_result_value_names_the_file_and_key_not_a_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, value: object, expected: str
) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({**RESULT, key: value}))
    output = tmp_path / "fit.yaml"
    message = refused(capsys, "calibrate", *LLAMA, str(path), "-o", str(output))
    assert str(path) in message and expected in message
    assert "--" not in message.removeprefix("error: ")


def test_a_result_whose_requests_cannot_run_is_refused_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Found by the fuzz suite: prompts above the model's length were all rejected, and the
    # metric of no completed request reached the fit as None (a TypeError).
    path = tmp_path / "result.json"
    path.write_text(json.dumps({**RESULT, "total_input_tokens": 5_000_000}))
    message = refused(capsys, "calibrate", *LLAMA, str(path), "-o", str(tmp_path / "fit.yaml"))
    assert str(path) in message and "none of the 10 re-simulated requests completed" in message


def test_an_unwritable_output_fails_before_the_fit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("the fit ran before -o was checked")

    monkeypatch.setattr(cli_fit, "fit_simplex", must_not_fit)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(RESULT))
    missing = tmp_path / "absent" / "fit.yaml"
    assert "--output" in refused(capsys, "calibrate", *LLAMA, str(path), "-o", str(missing))
    assert "folder" in refused(capsys, "calibrate", *LLAMA, str(path), "-o", str(tmp_path))


def _deployment(**kwargs: Any) -> Deployment:
    memory = MemoryConfig(block_size=kwargs.pop("block_size", 16))
    return Deployment("Qwen3-30B-A3B", "h100", 2, 1, None, "auto", memory, **kwargs)


def test_calibrate_deployment_keeps_pipeline_and_expert_parallelism() -> None:
    plan = _plan(_deployment(pp=2, enable_expert_parallel=True))
    assert plan.parallelism.pp == 2
    assert plan.parallelism.enable_expert_parallel


def test_block_size_32_is_not_tensorrt_llm() -> None:
    vllm = _plan(_deployment(block_size=32))
    assert vllm.config.gpu_memory_utilization == 0.9
    trtllm = _plan(_deployment(block_size=32, engine="trtllm"))
    assert trtllm.config.gpu_memory_utilization > 0.9  # 0.9 of what is left after weights


# ---- 11. exit codes ----------------------------------------------------------------------------


def test_a_bug_is_one_line_and_exit_3_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.delenv("INFERPLAN_TRACEBACK", raising=False)
    monkeypatch.setattr(cli, "memory_json", broken)
    code, _, err = run(capsys, "memory", *LLAMA)
    assert code == cli.INTERNAL_ERROR_EXIT
    assert err.startswith("error: internal error (KeyError") and len(err.splitlines()) == 1


def test_out_of_memory_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(cli, "memory_json", exhausted)
    code, _, err = run(capsys, "memory", *LLAMA)
    assert code == 2 and one_error(err).startswith("error: out of memory")


def test_a_completed_run_with_rejected_requests_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", *LLAMA, "--max-model-len", "2048", "--num-prompts", "4"]
    code, out, err = run(capsys, *argv, "--random-input-len", "4000", "--json")
    assert code == 0, err
    assert json.loads(out)["rejected"] == 4
    # The run served nothing: stderr says how many were refused and why (stdout stays JSON).
    assert err == ("note: 4 of 4 requests rejected: 4 prompt + output over --max-model-len 2,048\n")


def test_rejections_name_each_reason_that_holds(capsys: pytest.CaptureFixture[str]) -> None:
    # 1,000-token prompts of 100-token outputs; the prefill-first scheduler (vLLM V0 without
    # chunked prefill) schedules whole prompts, so a budget of 512 tokens refuses every prompt.
    argv = ["simulate", *LLAMA, "--scheduler", "prefill-first", "--json"]
    flags = ["--num-prompts", "8", "--random-input-len", "1000", "--random-output-len", "100"]
    flags += ["--max-num-batched-tokens", "512", "--max-model-len", "512"]
    code, out, err = run(capsys, *argv, *flags)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["rejected"] == 8 and summary["completed"] == 0
    assert err == (
        "note: 8 of 8 requests rejected: 8 prompt + output over --max-model-len 512; "
        "8 prompt over --max-num-batched-tokens 512 (prompts are scheduled whole)\n"
    )


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--engine", "sglang", "--scheduler", "static"], "--scheduler static"),
        (["--engine", "sglang", "--scheduling-policy", "spf"], "--scheduling-policy spf"),
        (
            ["--model", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "--engine", "sglang"],
            "--engine sglang",
        ),
    ],
)
def test_sglang_refuses_what_it_does_not_emulate(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    """SGLang's scheduler is its own (no --scheduler), FCFS only, and has no state pool for
    Mamba layers: each is one error line, not a silent vLLM run or an aborted simulation."""
    base = ["simulate", *LLAMA, "--num-prompts", "5"]
    if "--model" in argv:
        base = ["simulate", "--gpu", "h100", "--num-prompts", "5"]
    assert refused(capsys, *base, *argv).startswith(f"error: {flag}")
