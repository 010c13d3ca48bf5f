"""GPU names, user YAML files and their errors, and peak-FLOPs fallbacks."""

import re
from pathlib import Path

import pytest

from inferplan.errors import InferplanError
from inferplan.specs.hardware import GIB, bundled_gpus, load_gpu


@pytest.mark.parametrize(
    ("short", "key", "name_part"),
    [
        ("a100", "a100_sxm_80gb", "SXM"),
        ("h100", "h100_sxm_80gb", "SXM"),
        ("h200", "h200_sxm_141gb", "SXM"),
        ("b200", "b200_hgx", "HGX"),
        ("gb200", "gb200_per_gpu", "GB200"),
        ("mi300x", "mi300x", "MI300X"),
        ("mi325x", "mi325x", "MI325X"),
        ("mi355x", "mi355x", "MI355X"),
        ("l40s", "l40s", "L40S"),
    ],
)
def test_short_names_resolve_to_the_sxm_hgx_parts(short: str, key: str, name_part: str) -> None:
    gpu = load_gpu(short)
    assert gpu.key == key
    assert name_part in gpu.name
    assert load_gpu(short.upper()).key == key  # case-insensitive


def test_catalog_keys_and_spellings_resolve() -> None:
    assert load_gpu("h100_pcie_80gb").key == "h100_pcie_80gb"
    assert load_gpu("H100-SXM").key == "h100_sxm_80gb"


def test_memory_is_the_reported_total_less_the_driver_reserve() -> None:
    """nvidia-smi's MiB less the 0.5 GiB the driver keeps: the A100 80GB holds 80 GiB (not 74.5),
    an H100 79.15 GiB (vLLM logs 79.11-79.22), a B200 178.6 GiB (not 167.6), a GB200 184.5 GiB."""
    assert load_gpu("a100").memory_bytes == 81920 * 2**20 - 0.5 * GIB
    assert load_gpu("h100").memory_bytes == 81559 * 2**20 - 0.5 * GIB
    assert load_gpu("h200").memory_bytes == 143771 * 2**20 - 0.5 * GIB
    assert load_gpu("b200").memory_bytes == 183359 * 2**20 - 0.5 * GIB
    assert load_gpu("mi300x").memory_bytes == 196044 * 2**20  # ROCm's total is what vLLM sees
    assert load_gpu("gb200").memory_bytes == 189471 * 2**20 - 0.5 * GIB  # not 186e9 (173 GiB)
    assert load_gpu("mi355x").memory_bytes == 288e9  # no reported total: nominal decimal GB
    assert load_gpu("h100").memory_bandwidth_bytes_s == 3.35e12
    assert load_gpu("h100").peak_flops["bf16"] == pytest.approx(989.4e12)


def test_unknown_gpu_lists_close_matches() -> None:
    with pytest.raises(InferplanError, match=r"unknown GPU 'h10'; close matches: .*h100"):
        load_gpu("h10")
    with pytest.raises(InferplanError, match="mi300x"):
        load_gpu("mi300")


def test_every_bundled_gpu_has_memory_bandwidth_and_a_bf16_class_peak() -> None:
    for gpu in bundled_gpus().values():
        assert gpu.memory_bytes > 0 and gpu.memory_bandwidth_bytes_s > 0
        assert gpu.peak("bf16") > 0


# --- peak() fallbacks -------------------------------------------------------------------------


def test_fp4_on_hopper_runs_at_the_bf16_peak() -> None:
    h100 = load_gpu("h100")
    assert "fp4" not in h100.peak_flops
    assert h100.peak("fp4") == h100.peak_flops["bf16"]
    assert h100.peak("int4") == h100.peak_flops["bf16"]


def test_fp8_on_ampere_runs_at_the_bf16_peak_and_native_formats_are_used() -> None:
    a100 = load_gpu("a100")
    assert a100.peak("fp8") == a100.peak_flops["bf16"] == 312e12
    b200 = load_gpu("b200")
    assert b200.peak("fp4") == b200.peak_flops["fp4"] == 9000e12
    assert b200.peak("fp8") == 4500e12


def test_tf32_falls_back_to_fp32() -> None:
    mi355x = load_gpu("mi355x")
    assert "tf32" not in mi355x.peak_flops
    assert mi355x.peak("tf32") == mi355x.peak_flops["fp32"]


def test_missing_format_never_runs_faster_than_bf16() -> None:
    tpu = load_gpu("tpu_v5e")
    assert tpu.peak("tf32") <= tpu.peak("bf16")


# --- user YAML files --------------------------------------------------------------------------

SINGLE = """\
name: Lab GPU 96GB
vendor: lab
memory:
  capacity_gb: 96
  bandwidth_tbps: 4.0
compute_dense_tflops:
  bf16: 500
  fp8: 1000
"""


def write(tmp_path: Path, text: str, name: str = "gpu.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_single_accelerator_at_top_level(tmp_path: Path) -> None:
    gpu = load_gpu(str(write(tmp_path, SINGLE)))
    assert gpu.name == "Lab GPU 96GB"
    assert gpu.memory_bytes == 96e9  # decimal GB
    assert gpu.memory_bandwidth_bytes_s == 4.0e12
    assert gpu.peak("bf16") == 500e12
    assert gpu.peak("fp4") == 500e12  # no fp4: bf16
    assert gpu.scale_up_domain_size == 1


def test_catalog_with_one_entry(tmp_path: Path) -> None:
    text = "accelerators:\n  lab96:\n" + "".join(f"    {line}\n" for line in SINGLE.splitlines())
    gpu = load_gpu(str(write(tmp_path, text)))
    assert gpu.key == "lab96"
    assert gpu.memory_bytes == 96e9


def test_catalog_with_two_entries_is_refused(tmp_path: Path) -> None:
    body = "".join(f"    {line}\n" for line in SINGLE.splitlines())
    path = write(tmp_path, f"accelerators:\n  a:\n{body}  b:\n{body}")
    with pytest.raises(InferplanError, match="holds 2 accelerators"):
        load_gpu(str(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SINGLE.replace("  capacity_gb: 96\n", ""), "memory.capacity_gb"),
        (SINGLE.replace("bandwidth_tbps: 4.0", "bandwidth_tbps: -4.0"), "bandwidth_tbps"),
        (SINGLE.split("compute_dense_tflops")[0], "compute_dense_tflops"),
        ("memory: [1, 2\n", "not valid YAML"),
        ("- just\n- a list\n", "YAML mapping"),
        ("", "YAML mapping"),
    ],
    ids=["no-capacity", "negative-bandwidth", "no-peaks", "bad-syntax", "list", "empty"],
)
def test_bad_yaml_gives_one_line_naming_the_file(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InferplanError) as err:
        load_gpu(str(path))
    message = str(err.value)
    assert str(path) in message
    assert expected in message
    assert "\n" not in message


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nmemory:\n  capacity_gb: [96\n")
    with pytest.raises(InferplanError, match=re.escape(str(path)) + r":\d+: not valid YAML"):
        load_gpu(str(path))


def test_empty_peaks_error_names_the_file(tmp_path: Path) -> None:
    no_peaks = SINGLE.replace("  bf16: 500\n  fp8: 1000\n", "")
    path = write(tmp_path, no_peaks.replace("compute_dense_tflops:", "compute_dense_tflops: {}"))
    with pytest.raises(InferplanError) as err:
        load_gpu(str(path))
    assert str(path) in str(err.value)


def test_negative_peak_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, SINGLE.replace("bf16: 500", "bf16: -500"))
    with pytest.raises(InferplanError, match="compute_dense_tflops"):
        load_gpu(str(path))


def test_missing_yaml_file(tmp_path: Path) -> None:
    with pytest.raises(InferplanError, match="no such GPU file"):
        load_gpu(str(tmp_path / "absent.yaml"))
