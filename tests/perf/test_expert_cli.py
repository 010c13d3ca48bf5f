"""The expert-parallel flags on the command line: the per-rank report, a measured histogram
with traffic classes, and one-line errors for layouts that cannot exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplan.cli import main

EP = ["--model", "Qwen3-30B-A3B", "--gpu", "h100", "-dp", "4", "--enable-expert-parallel"]


def test_roofline_reports_every_rank(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["roofline", *EP, "--moe-skew", "0.6", "--batch-sizes", "8", "--input-len", "512"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["expert_parallel"]
    assert report["routing"] == "zipf:0.6" and report["placement"] == "linear"
    assert len(report["ranks"]) == 4
    assert sum(r["load_share"] for r in report["ranks"]) == pytest.approx(1.0)
    assert report["max_load_share"] > report["mean_load_share"] == pytest.approx(0.25)
    slowest = max(report["ranks"], key=lambda r: r["experts_time_s"])
    assert slowest["rank"] == report["slowest_rank"] == 0
    assert main(argv) == 0  # the terminal table renders too
    assert "expert parallelism" in capsys.readouterr().out


def test_a_class_histogram_steers_the_hot_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The random workload's one class ('default') loads experts 96-127, the last rank under
    linear placement; another class, absent from the run, loads rank 0's experts."""
    path = tmp_path / "loads.csv"
    rows = [f"{e},100,default" for e in range(96, 128)] + [f"{e},100,other" for e in range(32)]
    path.write_text("expert,load,class\n" + "\n".join(rows) + "\n")
    argv = ["simulate", *EP, "--expert-routing", str(path), "--num-prompts", "20"]
    assert main([*argv, "--random-input-len", "256", "--random-output-len", "16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["expert_parallel"]
    assert report["routing"] == str(path)
    assert report["slowest_rank"] == 3
    assert report["max_load_share"] == pytest.approx(1.0)
    # Without a workload (roofline) the file's total counts: ranks 0 and 3 share the load.
    argv = ["roofline", *EP, "--expert-routing", str(path), "--batch-sizes", "1", "--json"]
    assert main([*argv, "--input-len", "128"]) == 0
    shares = [
        r["load_share"] for r in json.loads(capsys.readouterr().out)["expert_parallel"]["ranks"]
    ]
    assert shares == pytest.approx([0.5, 0.0, 0.0, 0.5])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--num-redundant-experts", "3", "--expert-placement", "eplb"], "multiple of 4"),
        (["--num-redundant-experts", "4"], "need --expert-placement eplb"),
        (["--expert-routing", "zipf:9"], "--expert-routing: Zipf exponent must be in [0, 5]"),
        (["--expert-routing", "zipf:1", "--moe-skew", "1"], "--moe-skew: give either"),
        (["--expert-routing", "missing.csv"], "missing.csv: no such expert-load file"),
        (["--gpus-per-node", "0"], "--gpus-per-node: must be >= 1"),
    ],
)
def test_bad_expert_flags_are_one_line_errors(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["roofline", *EP, "--batch-sizes", "1", "--input-len", "128", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message in err
