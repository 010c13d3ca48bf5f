"""The GPUs and models issue 11 added, through the command line: listed by ``gpus`` and
``models``, planned by ``memory``, timed by ``roofline``, served by ``simulate``."""

import json

import pytest

from cli_run import assert_one_line_error, run


def test_gpus_and_models_list_the_additions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gpus", "--json")
    assert code == 0
    keys = {row["key"] for row in json.loads(out)}
    assert {"gh200_96gb", "b300_hgx", "gb300_per_gpu", "rtx_pro_6000_server"} <= keys
    code, out, _ = run(capsys, "models", "--json")
    ids = {row["id"] for row in json.loads(out)}
    assert {
        "zai-org/GLM-4.5-Air",
        "zai-org/GLM-4.6",
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    } <= ids


def test_memory_glm_fp8_checkpoint_on_b300(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--model", "zai-org/GLM-4.6-FP8", "--gpu", "b300", "-tp", "4"]
    code, out, _ = run(capsys, *argv, "--quantization", "fp8", "--max-model-len", "8192", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["params_total"] == 352_797_829_024
    assert data["kv_bytes_per_token"] == 2 * 8 * 128 * 92 * 2  # K and V, 92 layers, BF16
    # FP8 weights: about 353 GB over 4 GPUs, a little over 88 GB each.
    assert 87e9 < data["weights_bytes_per_device"] < 91e9
    assert data["fits"] is True


def test_memory_on_gh200_is_one_superchip_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's GH200 rows run Llama-3.1-70B FP8 on one superchip; a TP group over several
    needs the user to say how they are joined (a single-superchip node has no NVLink peer)."""
    argv = ["memory", "--model", "Llama-3.1-70B", "--gpu", "gh200", "--quantization", "fp8"]
    code, out, _ = run(capsys, *argv, "--max-model-len", "4096", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["fits"] is True
    assert data["gpu"] == "gh200_96gb"
    code, _, err = run(capsys, *argv, "-tp", "2")
    assert code == 2
    assert "--allow-cross-node-tp" in assert_one_line_error(err)


def test_roofline_glm_air_on_rtx_pro_6000(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["roofline", "--model", "GLM-4.5-Air", "--gpu", "rtx_pro_6000", "-tp", "2"]
    code, out, _ = run(capsys, *argv, "--quantization", "fp8", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["gpu"] == "rtx_pro_6000_server"
    long_prompt = data["prefill"][-1]
    assert long_prompt["bound"] == "compute"  # a 16k-token prefill on a 936 TFLOPS part
    # PCIe-only TP: the all-reduce is a visible share of every step.
    assert all(p["by_bound_s"]["communication"] > 0 for p in data["prefill"])


def test_simulate_maverick_nvfp4_on_b300(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "Llama-4-Maverick-17B-128E-Instruct", "--gpu", "b300"]
    argv += ["-tp", "4", "--quantization", "nvfp4", "--num-prompts", "20", "--json"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    data = json.loads(out)
    assert data["completed"] == 20
    assert data["mean_tpot_ms"] > 0
