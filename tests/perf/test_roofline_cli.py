"""``inferplan roofline``: the JSON rows users and scripts read, and one-line errors."""

from __future__ import annotations

import json

import pytest

from inferplan.cli import main

ARGS = ["roofline", "--model", "Llama-3.1-8B", "--gpu", "h100"]
ROW_KEYS = {"context_len", "step_time_s", "tokens_per_s", "bound"}


def test_json_has_decode_and_prefill_rows(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*ARGS, "--batch-sizes", "1,64", "--input-len", "128,4096", "--context-len", "512,2048"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [row["input_len"] for row in result["prefill"]] == [128, 4096]
    assert [(row["batch_size"], row["context_len"]) for row in result["decode"]] == [
        (1, 512),
        (64, 512),
        (1, 2048),
        (64, 2048),
    ]
    for row in result["prefill"] + result["decode"]:
        assert set(row) >= ROW_KEYS
        assert row["bound"] in {"compute", "memory", "communication", "overhead"}
        assert row["step_time_s"] > 0
    for row in result["decode"]:
        assert row["tokens_per_s"] == pytest.approx(row["batch_size"] / row["step_time_s"])
    for row in result["prefill"]:
        assert row["tokens_per_s"] == pytest.approx(row["input_len"] / row["step_time_s"])
    assert isinstance(result["compute_bound_batch_size"], int)


def test_the_table_output_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--batch-sizes", "1", "--input-len", "128"]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--batch-sizes", "x"),
        ("--batch-sizes", "0"),
        ("--input-len", "1,,two"),
        ("--context-len", "-5"),
        ("--moe-skew", "9"),
    ],
)
def test_bad_values_give_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    assert main([*ARGS, flag, value, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert flag in lines[0]
