"""``--calibration FILE``: efficiency constants from a file replace the bundled ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.perf.efficiency import bundled_efficiency


def _write(path: Path, **changes: float) -> Path:
    values = {**bundled_efficiency("hopper").to_dict(), **changes}
    lines = ["efficiency:", *(f"  {key}: {value}" for key, value in values.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _decode_step_s(capsys: pytest.CaptureFixture[str], *extra: str) -> float:
    argv = [
        "roofline",
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "h100",
        "--batch-sizes",
        "1",
        "--input-len",
        "128",
        "--json",
        *extra,
    ]
    assert main(argv) == 0
    return float(json.loads(capsys.readouterr().out)["decode"][0]["step_time_s"])


def test_a_calibration_file_changes_the_step_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundled = _decode_step_s(capsys)
    same = _decode_step_s(capsys, "--calibration", str(_write(tmp_path / "same.yaml")))
    assert same == bundled
    half = bundled_efficiency("hopper").memory_bandwidth / 2  # half the bundled fraction
    slow_file = _write(tmp_path / "slow.yaml", memory_bandwidth=half)
    slow = _decode_step_s(capsys, "--calibration", str(slow_file))
    assert slow > 1.5 * bundled  # a single decode is bound by streaming the weights


def test_a_fraction_above_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "bad.yaml", gemm_compute=1.5)
    assert (
        main(["roofline", "--model", "Llama-3.1-8B", "--gpu", "h100", "--calibration", str(path)])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "gemm_compute" in err and "\n" not in err
