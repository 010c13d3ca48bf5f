"""``scripts/sharegpt_waves.py`` on a user's ``--data``: a run lacking a metric the line reads,
or one with nothing simulated, gives a line with the reason, never a traceback."""

from __future__ import annotations

import csv
import io
from importlib import resources
from pathlib import Path

import pytest

from .fit_script import load_script


def _one_run(tmp_path: Path, drop: str) -> Path:
    """The bundle's first ShareGPT run at rate ``inf``, without its ``drop`` row."""
    text = resources.files("inferplan.plan").joinpath("data/published.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    runs = sorted(
        r["case_id"] for r in rows if r["dataset"] == "sharegpt" and not r["max_concurrency"]
    )
    kept = [r for r in rows if r["case_id"] == runs[0] and r["metric"] != drop]
    path = tmp_path / "run.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    return path


@pytest.mark.parametrize("drop", ["ttft_p99", "request_throughput", "tpot_median"])
def test_a_missing_metric_is_a_reason(
    tmp_path: Path, drop: str, capsys: pytest.CaptureFixture[str]
) -> None:
    waves = load_script("sharegpt_waves")
    assert waves.main(["--data", str(_one_run(tmp_path, drop))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].endswith(
        f"no measured {drop} (the line reads "
        "ttft_median, ttft_p99, request_throughput, tpot_median, output_throughput)"
    )


def test_nothing_simulated_has_no_ratio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose simulation gives no value (None) for a TTFT: its ratio is left out."""
    waves = load_script("sharegpt_waves")
    predicted = dict.fromkeys(waves.NEEDED, 1.0) | {"ttft_median": None, "ttft_p99": None}
    monkeypatch.setattr(waves.published_runs, "predict_run", lambda *args: predicted)
    monkeypatch.setattr(waves, "pool_share", lambda first: 1.0)
    assert waves.main(["--data", str(_one_run(tmp_path, ""))]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.count("  n/a ") == 2 and "x" not in line.split("|")[1]
