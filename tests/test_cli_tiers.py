"""``simulate --kv-tiers``: the JSON section, bad flags as one-line errors (exit 2), and no
change without the flag."""

from __future__ import annotations

import json

import pytest

from inferplan.cli import main

SIM = [
    "simulate",
    "--model",
    "Llama-3.1-8B",
    "--gpu",
    "h200",
    "--dataset-name",
    "random",
    "--num-prompts",
    "40",
    "--random-input-len",
    "2000",
    "--random-output-len",
    "2000",
    "--max-num-seqs",
    "40",
    "--gpu-memory-utilization",
    "0.2",
    "--max-model-len",
    "8192",
    "--json",
]


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main([*SIM, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_kv_tiers_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--kv-tiers", "host:1GiB,nvme:3.84TB")
    assert code == 0, err
    data = json.loads(out)
    tiers = data["kv_tiers"]
    assert [t["name"] for t in tiers["tiers"]] == ["host", "nvme"]
    assert tiers["tiers"][0]["write_bytes_s"] == 64e9
    assert tiers["tiers"][1]["write_bytes_s"] == 6.6e9
    assert data["num_preemptions"] > 0
    not_offloaded = tiers["num_not_offloaded"] + tiers["num_not_offloaded_recompute_cheaper"]
    assert tiers["num_offloaded"] + not_offloaded == data["num_preemptions"]
    assert tiers["num_offloaded"] > 0
    moved = sum(t["written_bytes"] for t in tiers["tiers"])
    assert moved > 0
    assert len(tiers["link_utilization_series"]["write"]) == 50


def test_terminal_table_shows_the_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([a for a in SIM if a != "--json"] + ["--kv-tiers", "host:1GiB,nvme:3.84TB"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "KV tier host written / read (GB)" in out and "KV tier nvme" in out


def test_no_flag_no_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys)
    assert code == 0
    assert "kv_tiers" not in json.loads(out)


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--kv-tiers", "ssd:1TB"], "--kv-tiers"),
        (["--kv-tiers", "host"], "--kv-tiers host"),
        (["--kv-tiers", "host:1TB:x"], "--kv-tiers host"),
        (["--kv-eviction-bandwidth", "10"], "--kv-eviction-bandwidth"),
        (["--kv-tiers", "host:1TB", "--kv-eviction-bandwidth", "0"], "--kv-eviction-bandwidth"),
        (["--kv-tiers", "host:1TB", "--engine", "trtllm"], "--kv-tiers"),
        (["--kv-tiers", "host:1TB", "--scheduler", "static"], "--kv-tiers"),
        (["--kv-tiers", "host:1TB", "--scheduler", "prefill-first"], "--kv-tiers"),
    ],
)
def test_bad_tier_flags(capsys: pytest.CaptureFixture[str], extra: list[str], flag: str) -> None:
    code, _, err = _run(capsys, *extra)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], err
    assert "Traceback" not in err


def test_tiers_combine_with_admission_policies(capsys: pytest.CaptureFixture[str]) -> None:
    """Reservations and tiers together: a quantile reservation that underestimates (bias 0.3)
    still preempts, and the victims' KV goes to the host tier instead of being recomputed."""
    extra = ("--admission", "quantile", "--length-predictor", "noisy", "--predictor-bias", "0.3")
    code, out, err = _run(capsys, "--kv-tiers", "host:1TB", *extra)
    assert code == 0, err
    data = json.loads(out)
    tiers = data["kv_tiers"]
    assert data["completed"] == 40
    assert tiers["num_offloaded"] > 0 and tiers["num_offloaded"] == tiers["num_reloaded"]


def test_tiers_on_both_disaggregated_pools(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--kv-tiers", "host:1TB", "--disaggregate")
    assert code == 0, err
    pools = json.loads(out)["pools"]
    for name in ("prefill", "decode"):
        assert pools[name]["kv_tiers"]["tiers"][0]["name"] == "host"
    decode = pools["decode"]["kv_tiers"]
    assert decode["num_offloaded"] > 0 and decode["num_offloaded"] == decode["num_reloaded"]
