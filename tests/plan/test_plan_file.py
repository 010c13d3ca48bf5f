"""The plan file: written, re-run, diffed; the CLI's plan command end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplan.cli import main

from .planner_helpers import TINY


def _write(path: Path, **changes: Any) -> Path:
    path.write_text(yaml.safe_dump({**TINY, **changes}, sort_keys=False))
    return path


def test_plan_writes_a_file_that_reruns_and_diffs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hardware = [{"gpu": "l40s", "price_per_gpu_hour": 1.0, "max_gpus": 2}]
    request = _write(tmp_path / "req.yaml", hardware=hardware)
    cache = str(tmp_path / "cache.sqlite")
    old = tmp_path / "old.yaml"
    assert main(["plan", str(request), "--cache", cache, "-o", str(old), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["best"]["gpu"] == "l40s"
    # Re-run from the plan file itself: same answer.
    assert main(["plan", str(old), "--cache", cache, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first
    # New prices: the diff names them as the reason and shows the cost change.
    pricier = [{"gpu": "l40s", "price_per_gpu_hour": 2.0, "max_gpus": 2}]
    _write(request, hardware=pricier)
    new = tmp_path / "new.yaml"
    assert main(["plan", str(request), "--cache", cache, "-o", str(new), "--json"]) == 0
    capsys.readouterr()
    assert main(["plan", "diff", str(old), str(new), "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["why"] == ["new prices or hardware limits"]
    assert diff["inputs"] == [{"key": "hardware[0].price_per_gpu_hour", "old": 1.0, "new": 2.0}]
    assert diff["cost_per_hour_usd"]["relative_change"] == 1.0
    assert main(["plan", "diff", str(old), str(new)]) == 0
    assert "new prices" in capsys.readouterr().out


def test_diff_of_new_traffic_and_slos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = {"inferplan_plan": 1, "request": TINY, "result": {"best": None, "verdict": "x"}}
    traffic = [dict(TINY["traffic"][0], request_rate=12), TINY["traffic"][1]]
    b = {**a, "request": {**TINY, "traffic": traffic}}
    slo = [dict(TINY["traffic"][0], slo={"ttft_p99_ms": 500}), TINY["traffic"][1]]
    c = {**a, "request": {**TINY, "traffic": slo}}
    for name, doc in (("a", a), ("b", b), ("c", c)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    assert main(["plan", "diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["why"] == ["new traffic"]
    assert main(["plan", "diff", str(tmp_path / "a.yaml"), str(tmp_path / "c.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["why"] == ["new SLOs"]


def test_diff_refuses_a_file_that_is_not_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = _write(tmp_path / "req.yaml")
    assert main(["plan", "diff", str(request), str(request)]) == 2
    assert "not a plan file" in capsys.readouterr().err


def test_no_feasible_plan_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traffic = [dict(TINY["traffic"][0], slo={"tpot_p99_ms": 1})]
    request = _write(tmp_path / "req.yaml", traffic=traffic)
    assert main(["plan", str(request), "--no-cache", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["best"] is None and out["evaluated"] == 0
