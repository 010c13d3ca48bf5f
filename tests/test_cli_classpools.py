"""``simulate --pools`` from the command line: the JSON section, the console section, default
output unchanged, determinism, and one-line errors (exit 2) naming the flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferplan.cli import main

BASE = [
    "simulate",
    "--model",
    "Llama-3.1-8B",
    "--gpu",
    "h200",
    "-dp",
    "4",
    "--dataset-name",
    "mixed",
    "--num-prompts",
    "120",
    "--request-rate",
    "40",
    "--max-num-seqs",
    "8",
    "--max-model-len",
    "8192",
]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    code, out, err = _run(capsys, *BASE, *flags, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_pools_json_and_what_stays_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    plain = _json(capsys, "--router", "least_outstanding")
    assert "class_pools" not in plain
    shared = _json(capsys, "--router", "least_outstanding", "--pools", "all=4")
    assert shared.pop("class_pools")["pools"]["all"]["classes"] == ["chat", "reasoning"]
    assert shared == plain  # one pool of every replica is the shared pool
    split = _json(capsys, "--pools", "reasoning=1,chat=3", "--repartition", "queue:2")
    section = split["class_pools"]
    assert section["default_pool"] == "chat"
    assert list(section["pools"]) == ["reasoning", "chat"]
    reasoning = section["pools"]["reasoning"]
    assert reasoning["num_requests"] == split["classes"]["reasoning"]["num_requests"]
    assert reasoning["ttft_s"] == split["classes"]["reasoning"]["ttft_s"]
    assert section["repartition"]["signal"] == "queue"
    assert section["num_moves"] == len(section["moves"]) >= 1
    again = _json(capsys, "--pools", "reasoning=1,chat=3", "--repartition", "queue:2")
    assert again == split


def test_one_pool_is_the_shared_pool_behind_a_tokenizer_stage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SGLang's front end delays each request at its tokenizer stage (6 ms a request): the pools
    pass through it as the run without pools does, and go back on the client's clock."""
    plain = _json(capsys, "--engine", "sglang", "--router", "least_outstanding")
    shared = _json(
        capsys, "--engine", "sglang", "--router", "least_outstanding", "--pools", "all=4"
    )
    shared.pop("class_pools")
    assert shared == plain


def test_console_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(
        capsys, *BASE, "--pools", "reasoning=1,chat=3", "--repartition", "queue:2"
    )
    assert code == 0, err
    assert "class pools" in out and "replica moves:" in out and "chat (default)" in out


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--pools", "reasoning=1,chat=2"], "--pools: the pools' replicas add up to 3, not the 4"),
        (["--pools", "reasoning:1,chat=3"], "--pools: expected NAME=COUNT"),
        (["--pools", "reasonin=1,chat=3"], "--pools: pool 'reasonin' names no class"),
        (["--pools", "reasoning=1,chat=3", "--repartition", "depth:3"], "--repartition:"),
        (["--pools", "reasoning=1,chat=3", "--default-pool", "x"], "--default-pool:"),
        (["--repartition", "queue:3"], "--repartition: needs --pools"),
        (["--default-pool", "chat"], "--default-pool: needs --pools"),
        (
            ["--pools", "reasoning=1,chat=3", "--repartition-interval-s", "2"],
            "--repartition-interval-s: needs --repartition",
        ),
        (
            [
                "--pools",
                "reasoning=1,chat=3",
                "--repartition",
                "queue:3",
                "--repartition-interval-s",
                "0",
            ],
            "--repartition-interval-s",
        ),
        (["--pools", "reasoning=1,chat=3", "--disaggregate"], "--pools: class pools split"),
        (["--reasoning-share", "1.5"], "--reasoning-share"),
    ],
)
def test_bad_flags(capsys: pytest.CaptureFixture[str], flags: list[str], named: str) -> None:
    code, _, err = _run(capsys, *BASE, *flags)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], err


def test_reasoning_share_needs_the_mixed_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h200", "--reasoning-share", "0.5"]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and err.startswith("error: --reasoning-share does not apply"), err


def test_trace_classes_route_to_pools(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A plain CSV trace's ``class`` column names the classes; unknown ones go to the default."""
    trace = tmp_path / "t.csv"
    rows = [f"{i * 0.1},{100 + i},{20},{c}" for i, c in enumerate(["a", "b", "c", "a", "b"])]
    trace.write_text("arrival_s,input_tokens,output_tokens,class\n" + "\n".join(rows) + "\n")
    argv = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h200", "-dp", "3"]
    argv += ["--dataset-name", "trace", "--dataset-path", str(trace), "--json"]
    code, out, err = _run(capsys, *argv, "--pools", "a=1,rest=2", "--default-pool", "rest")
    assert code == 0, err
    pools = json.loads(out)["class_pools"]["pools"]
    assert pools["a"]["classes"] == ["a"] and pools["a"]["num_requests"] == 2
    assert pools["rest"]["classes"] == ["b", "c"] and pools["rest"]["num_requests"] == 3
