"""The ``inferplan`` command: JSON output, one-line errors with exit statuses, determinism."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import assert_one_line_error, run
from inferplan.specs.catalog import BUNDLED_MODELS

LLAMA8_H100 = ["memory", "--model", "Llama-3.1-8B", "--gpu", "h100"]


# --- JSON output ----------------------------------------------------------------------------


def test_memory_json_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *LLAMA8_H100, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    for key in (
        "params_total",
        "params_active",
        "kv_bytes_per_token",
        "weights_bytes_per_device",
        "kv_capacity_tokens",
        "max_concurrent_seqs",
    ):
        assert key in data
    assert data["params_total"] == data["params_active"] == 8_030_261_248
    assert data["kv_bytes_per_token"] == 2 * 8 * 128 * 32 * 2
    assert data["weights_bytes_per_device"] == 8_030_261_248 * 2
    assert data["kv_capacity_tokens"] == data["kv_capacity_blocks"] * 16
    assert data["max_model_len"] == 131_072
    # context (as a JSON string key) -> sequences, ending at the max model length.
    assert list(data["max_concurrent_seqs"]) == ["1024", "4096", "8192", "32768", "131072"]
    assert data["max_concurrent_seqs"]["131072"] == data["kv_capacity_blocks"] // (131_072 // 16)
    assert data["fits"] is True


def test_memory_json_includes_a_custom_max_model_len(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *LLAMA8_H100, "--max-model-len", "6000", "--json")
    assert code == 0
    assert list(json.loads(out)["max_concurrent_seqs"]) == ["1024", "4096", "6000"]


def test_memory_flags_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--model", "Llama-3.1-70B", "--gpu", "h200", "-tp", "2", "--json"]
    code, out, _ = run(capsys, *argv, "--kv-cache-dtype", "fp8", "--block-size", "32")
    data = json.loads(out)
    assert code == 0
    assert data["tensor_parallel_size"] == 2
    assert data["kv_cache_dtype"] == "fp8"
    assert data["kv_bytes_per_token"] == 2 * 8 * 128 * 80 * 1
    assert data["kv_capacity_tokens"] == data["kv_capacity_blocks"] * 32


def test_memory_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *LLAMA8_H100)
    assert code == 0 and err == ""
    assert "131,072" in out and "KV cache" in out


def test_models_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [row["id"].split("/")[1] for row in rows] == list(BUNDLED_MODELS)
    by_id = {row["id"]: row for row in rows}
    assert by_id["mistralai/Mixtral-8x7B-v0.1"]["params_total"] == 46_702_792_704
    assert by_id["deepseek-ai/DeepSeek-R1"]["weights"] == "fp8"


def test_gpus_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gpus", "--json")
    rows = json.loads(out)
    assert code == 0
    shorts = {row["short_name"]: row["key"] for row in rows}
    assert shorts["h100"] == "h100_sxm_80gb"
    assert all(row["memory_bytes"] > 0 for row in rows)


def test_tables_render(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "models")[0] == 0
    assert run(capsys, "gpus")[0] == 0


def test_json_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--model", "DeepSeek-R1", "--gpu", "b200", "-tp", "8", "--json"]
    first = run(capsys, *argv)
    second = run(capsys, *argv)
    assert first == second
    assert first[1].encode() == second[1].encode()


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--model", "Llama-3.1-7B", "--gpu", "h100"], "did you mean"),
        (["--model", "Llama-3.1-8B", "--gpu", "h10"], "close matches"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "-tp", "3"], "does not divide"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "-tp", "0"], "--tensor-parallel-size"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "-tp", "-2"], "--tensor-parallel-size"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "-pp", "0"], "--pipeline-parallel-size"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "0"], "--max-model-len"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--block-size", "-1"], "--block-size"),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "h100", "--max-num-batched-tokens", "0"],
            "--max-num-batched-tokens",
        ),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "h100", "--gpu-memory-utilization", "0"],
            "--gpu-memory-utilization",
        ),
        (
            ["--model", "Llama-3.1-8B", "--gpu", "h100", "--gpu-memory-utilization", "1.5"],
            "--gpu-memory-utilization",
        ),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "-tp", "2.5"], "not a valid integer"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "4k"], "valid integer"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--quantization", "q3"], "--quantization"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--kv-cache-dtype", "x"], "kv-cache-dtype"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--engine", "tgi"], "--engine"),
        (["--model", "Llama-3.1-8B", "--gpu", "h100", "--enable-expert-parallel"], "no experts"),
        (["--model", "Llama-3.1-8B"], "Missing option '--gpu'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    code, out, err = run(capsys, "memory", *extra)
    assert code == 2
    assert expected in assert_one_line_error(err)
    assert out == ""


@pytest.mark.parametrize("flag", ["--block-size", "--max-num-seqs"])
def test_zero_block_size_and_max_num_seqs_are_refused(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    code, _, err = run(capsys, *LLAMA8_H100, flag, "0")
    assert code == 2
    assert flag in assert_one_line_error(err)


def test_malformed_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096,,}')
    code, _, err = run(capsys, "memory", "--model", str(path), "--gpu", "h100")
    assert code == 2
    line = assert_one_line_error(err)
    assert str(path) in line and "not valid JSON" in line


def test_incomplete_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    code, _, err = run(capsys, "memory", "--model", str(path), "--gpu", "h100")
    assert code == 2
    line = assert_one_line_error(err)
    assert str(path) in line and "missing field 'num_hidden_layers'" in line


def test_bad_gpu_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text("memory:\n  bandwidth_tbps: 3\ncompute_dense_tflops: {bf16: 900}\n")
    code, _, err = run(capsys, "memory", "--model", "Llama-3.1-8B", "--gpu", str(path))
    assert code == 2
    assert "memory.capacity_gb" in assert_one_line_error(err)


def test_model_that_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "memory", "--model", "Llama-3.1-70B", "--gpu", "h100", "--json")
    assert code == 1
    line = assert_one_line_error(err)
    assert "does not fit on h100_sxm_80gb x1" in line
    assert "GiB more than the" in line  # by how much
    assert "would fit with -tp " in line  # at least one alternative
    assert json.loads(out)["fits"] is False  # the plan itself is still printed


def test_kv_that_does_not_fit_suggests_a_shorter_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "memory", "--model", "Llama-3.1-8B", "--gpu", "rtx4090")
    assert code == 1
    line = assert_one_line_error(err)
    assert "one sequence of --max-model-len 131072 needs 16.0 GiB of KV cache" in line
    assert "--max-model-len " in line.split("would fit with")[1]


def test_no_arguments_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert code == 0 and "memory" in out and err == ""


# --- the console script ---------------------------------------------------------------------


def test_console_script_errors_without_traceback() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "inferplan", "memory", "--model", "nope", "--gpu", "h100"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert_one_line_error(bad.stderr)
    good = subprocess.run(
        [sys.executable, "-m", "inferplan", *LLAMA8_H100, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert good.returncode == 0 and good.stderr == ""
    assert json.loads(good.stdout)["kv_bytes_per_token"] == 131_072


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--num-scheduler-steps", "10"], "with --scheduler prefill-first only"),
        (
            ["--scheduler", "prefill-first", "--num-scheduler-steps", "0"],
            "expected an integer >= 1",
        ),
        (
            ["--scheduler", "prefill-first", "--max-num-batched-tokens", "2048"],
            "below --max-model-len 4096",
        ),
    ],
)
def test_prefill_first_flags_are_checked(
    capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    base = ["--model", "Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "4096"]
    code, out, err = run(capsys, "simulate", *base, "--num-prompts", "5", *extra, "--json")
    assert code == 2
    assert expected in assert_one_line_error(err)
    assert out == ""


def test_simulate_with_vllm_v0_multi_step_scheduling(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--model", "Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "4096"]
    args += ["--scheduler", "prefill-first", "--num-scheduler-steps", "10"]
    args += ["--num-prompts", "20", "--request-rate", "10", "--json"]
    code, out, _ = run(capsys, "simulate", *args)
    assert code == 0
    assert json.loads(out)["completed"] == 20


def test_prefix_caching_on_a_non_vllm_engine_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        capsys,
        *("simulate", "--model", "Llama-3.1-8B", "--gpu", "h200", "--engine", "trtllm"),
        *("--dataset-name", "random", "--num-prompts", "5", "--enable-prefix-caching"),
    )
    assert code == 2
    assert "--enable-prefix-caching" in assert_one_line_error(err)


@pytest.mark.parametrize(("value", "expected"), [("0", "or auto"), ("two", "or auto")])
def test_sim_workers_takes_auto_or_a_count(
    capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    code, _, err = run(capsys, "simulate", *LLAMA8_H100[1:], "--sim-workers", value)
    assert code == 2
    line = assert_one_line_error(err)
    assert "--sim-workers" in line and expected in line
