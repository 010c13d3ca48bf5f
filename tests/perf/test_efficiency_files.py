"""Efficiency constants: every bundled family file loads with fractions in (0, 1], and a
calibration file that needs more than the peak is rejected with the offending key named."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from inferplan.errors import InferplanError
from inferplan.perf.efficiency import (
    FAMILY_OF_ARCHITECTURE,
    Efficiency,
    bundled_efficiency,
    efficiency_for,
    load_efficiency_file,
)
from inferplan.specs.hardware import bundled_gpus

FRACTIONS = (
    "gemm_compute",
    "memory_bandwidth",
    "attention_compute",
    "attention_memory",
    "collective_bandwidth",
)
FAMILIES = sorted({*FAMILY_OF_ARCHITECTURE.values(), "default"})


@pytest.mark.parametrize("family", FAMILIES)
def test_every_bundled_family_file_loads_with_fractions_of_peak(family: str) -> None:
    eff = bundled_efficiency(family)
    for name in FRACTIONS:
        assert 0 < getattr(eff, name) <= 1, name
    for field in fields(Efficiency):
        assert getattr(eff, field.name) >= 0, field.name
    assert eff.step_overhead_s < 5e-3  # a millisecond-scale CPU cost, not seconds


def test_every_catalog_gpu_gets_an_efficiency() -> None:
    for gpu in bundled_gpus().values():
        assert isinstance(efficiency_for(gpu), Efficiency)


def _calibration(tmp_path: Path, **changes: float) -> Path:
    values = bundled_efficiency("hopper").to_dict()
    values.update(changes)
    lines = ["efficiency:"] + [f"  {key}: {value}" for key, value in values.items()]
    path = tmp_path / "calibration.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_calibration_file_round_trips(tmp_path: Path) -> None:
    path = _calibration(tmp_path, gemm_compute=0.66)
    assert load_efficiency_file(path).gemm_compute == 0.66


@pytest.mark.parametrize("key", FRACTIONS)
def test_a_fraction_above_one_is_rejected_naming_the_key(tmp_path: Path, key: str) -> None:
    path = _calibration(tmp_path, **{key: 1.2})
    with pytest.raises(InferplanError) as err:
        load_efficiency_file(path)
    assert str(err.value).startswith(f"{path}: {key}:")


def test_an_unknown_key_is_rejected(tmp_path: Path) -> None:
    path = _calibration(tmp_path, gemm_magic=0.5)
    with pytest.raises(InferplanError, match="gemm_magic"):
        load_efficiency_file(path)


def test_a_missing_calibration_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InferplanError, match="no such --calibration file"):
        load_efficiency_file(tmp_path / "absent.yaml")
