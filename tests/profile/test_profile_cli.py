"""``inferplan profile`` and ``--operator-table`` through the command line: a CPU profile feeds
``roofline`` and ``simulate``; bad input and a missing PyTorch give one line and exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.profile import NO_TORCH

DEPLOYMENT = ["--model", "Llama-3.1-8B", "--gpu", "h100"]
PROFILE = ["profile", *DEPLOYMENT, "--gpu-name", "ci-cpu"]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert captured.out == ""
    return lines[0]


@pytest.fixture(scope="module")
def profile_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("cli") / "profile.csv"
    assert main([*PROFILE, "--device", "cpu", "-o", str(path), "--json"]) == 0
    return path


def test_profile_json_says_a_cpu_profile_is_not_for_planning(
    profile_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = profile_csv.with_name("again.csv")
    assert main([*PROFILE, "--tiny", "-o", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["device"] == "cpu" and result["tiny"] and not result["for_planning"]
    assert "not for planning" in result["warning"]
    assert set(result["operators"]) >= {"attn_decode", "attn_prefill", "mlp", "lm_head"}
    assert result["num_rows"] == sum(e["points"] for e in result["operators"].values())
    assert out.read_text().count("\n") > result["num_rows"]


def test_profile_tables_carry_the_warning(
    profile_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*PROFILE, "-o", str(profile_csv.with_name("tables.csv"))]) == 0
    assert "not for planning" in capsys.readouterr().out


def test_roofline_and_simulate_read_the_profile(
    profile_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ["--operator-table", str(profile_csv)]
    sizes = ["--batch-sizes", "1,4", "--input-len", "64", "--context-len", "512"]
    assert main(["roofline", *DEPLOYMENT, *sizes, "--json"]) == 0
    modelled = json.loads(capsys.readouterr().out)
    assert main(["roofline", *DEPLOYMENT, *table, *sizes, "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert [r["step_time_s"] for r in measured["decode"]] != [
        r["step_time_s"] for r in modelled["decode"]
    ]
    workload = ["--num-prompts", "20", "--random-input-len", "64", "--random-output-len", "8"]
    assert main(["simulate", *DEPLOYMENT, *table, *workload, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["completed"] == 20 and summary["mean_ttft_ms"] > 0


def test_without_torch_profile_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    assert main([*PROFILE, "-o", str(tmp_path / "p.csv")]) == 2
    assert one_line_error(capsys) == f"error: {NO_TORCH}"
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--device", "tpu"], "--device"),
        (["--gpu-name", " "], "--gpu-name"),
        (["--operator-table", "x.csv"], "--operator-table"),
        (["-o", "/no/such/folder/p.csv"], "--output"),
        (["-tp", "3"], "-tp"),
    ],
)
def test_bad_profile_flags_give_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    assert main([*PROFILE, *extra]) == 2
    assert flag in one_line_error(capsys)


def test_cuda_without_a_gpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main([*PROFILE, "--device", "cuda"]) == 2
    assert "--device cuda" in one_line_error(capsys)


def test_calibrate_refuses_an_operator_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", *DEPLOYMENT, "--operator-table", "x.csv", "bench.json"]) == 2
    assert "--operator-table" in one_line_error(capsys)


def test_a_bad_operator_table_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("# a comment\noperator,num_tokens,context_tokens,time_s\nmlp,1,0,slow\n")
    assert main(["roofline", *DEPLOYMENT, "--operator-table", str(bad)]) == 2
    assert f"{bad}:3:" in one_line_error(capsys)
