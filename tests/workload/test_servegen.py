"""ServeGen pooling, the bundled DeepSeek-R1 pool's moments, sampling and folder errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.workload import (
    build_servegen_distribution,
    bundled_servegen,
    load_servegen,
    sample_servegen,
)
from inferplan.workload.pmf import Pmf, compact_token_pmf, make_pmf
from inferplan.workload.servegen import (
    BUNDLED_SERVEGEN,
    compact_distribution,
    read_servegen_json,
    write_servegen_json,
)

SHARED_SERVEGEN = (
    Path(__file__).resolve().parents[3] / "shared" / "traces" / "servegen_reason_deepseek_r1"
)

# ../shared/traces/README.md, "Pooled results": mean, p50, p90, p99, max.
README_INPUT = (1268, 208, 2092, 23423, 57284)
README_OUTPUT = (1527, 792, 3432, 12607, 32768)


def summary(pmf: Pmf) -> tuple[float, float, float, float, float]:
    return (pmf.mean(), pmf.quantile(0.5), pmf.quantile(0.9), pmf.quantile(0.99), pmf.values[-1])


def assert_close_to_readme(pmf: Pmf, readme: tuple[int, ...], rel: float) -> None:
    mean, p50, p90, p99, largest = summary(pmf)
    assert mean == pytest.approx(readme[0], abs=0.5)
    assert p50 == readme[1]  # below 2,048 tokens: kept exactly
    assert p90 == pytest.approx(readme[2], rel=rel)
    assert p99 == pytest.approx(readme[3], rel=rel)
    assert largest == readme[4]


def test_bundled_pool_matches_readme_figures() -> None:
    pool = read_servegen_json(BUNDLED_SERVEGEN)
    assert_close_to_readme(pool.input_tokens, README_INPUT, rel=0.01)
    assert_close_to_readme(pool.output_tokens, README_OUTPUT, rel=0.01)
    assert pool.output_tokens.share_above(5000) == pytest.approx(0.061, abs=0.001)
    assert pool.output_tokens.share_above(2000) == pytest.approx(0.162, abs=0.001)
    assert pool.reason_ratio is not None
    assert pool.reason_ratio.mean() == pytest.approx(0.70, abs=0.005)
    assert pool.reason_ratio.quantile(0.5) == pytest.approx(0.76, abs=0.005)
    assert pool.reason_ratio.quantile(0.9) == pytest.approx(0.95, abs=0.005)
    assert pool.num_clients == 73
    assert pool.expected_requests == pytest.approx(1.38e6, rel=0.01)
    assert BUNDLED_SERVEGEN.stat().st_size < 150_000


@pytest.mark.skipif(not SHARED_SERVEGEN.is_dir(), reason="../shared ServeGen folder is absent")
def test_builder_reproduces_readme_and_bundled_file() -> None:
    pool = build_servegen_distribution(SHARED_SERVEGEN)
    assert_close_to_readme(pool.input_tokens, README_INPUT, rel=1e-9)
    assert_close_to_readme(pool.output_tokens, README_OUTPUT, rel=1e-9)
    assert pool.num_clients == 73
    assert pool.expected_requests == pytest.approx(1_383_669)
    compact = compact_distribution(pool)
    bundled = bundled_servegen()
    for name in ("input_tokens", "output_tokens"):
        ours, shipped = getattr(compact, name), getattr(bundled, name)
        np.testing.assert_array_equal(ours.values, shipped.values)
        np.testing.assert_allclose(ours.probabilities, shipped.probabilities, rtol=1e-5)


def test_sampled_lengths_follow_the_pool() -> None:
    input_tokens, output_tokens = sample_servegen(200_000, 0)
    assert input_tokens.dtype == output_tokens.dtype == np.int64
    assert input_tokens.min() >= 1
    assert output_tokens.max() <= 32768
    assert np.median(input_tokens) == pytest.approx(208, rel=0.03)
    assert output_tokens.mean() == pytest.approx(1527, rel=0.03)
    assert (output_tokens > 5000).mean() == pytest.approx(0.061, abs=0.003)


def test_sampling_is_deterministic() -> None:
    first = sample_servegen(1000, 42)
    second = sample_servegen(1000, np.random.default_rng(42))
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], sample_servegen(1000, 43)[0])


def write_client(
    folder: Path, client: int, rows: list[tuple[int, float]], windows: dict[str, Any]
) -> None:
    lines = [
        f"{start},{rate},1.0,Gamma,1.0,1.0" if rate else f"{start},0,0,,0,0" for start, rate in rows
    ]
    (folder / f"chunk-{client}-trace.csv").write_text("\n".join(lines) + "\n")
    encoded = {
        key: {name: str(pmf) for name, pmf in window.items()} for key, window in windows.items()
    }
    (folder / f"chunk-{client}-dataset.json").write_text(json.dumps(encoded, indent=2))


def tiny_folder(folder: Path) -> Path:
    """Two clients; expected requests: client 0 has 1200 then 300, client 1 has 0 then 1200."""
    write_client(
        folder,
        0,
        [(0, 1.0), (600, 1.0), (21600, 0.5)],
        {
            "0": {"input_tokens": {10: 1.0}, "output_tokens": {100: 0.5, 200: 0.5}},
            "21600": {"input_tokens": {20: 1.0}, "output_tokens": {100: 1.0}},
        },
    )
    write_client(
        folder,
        1,
        [(0, 0.0), (21600, 2.0)],
        {
            "0": {"input_tokens": {}, "output_tokens": {}},
            "21600": {"input_tokens": {30: 2.0}, "output_tokens": {300: 2.0}},
        },
    )
    return folder


def test_pooling_weights_windows_by_expected_requests(tmp_path: Path) -> None:
    pool = build_servegen_distribution(tiny_folder(tmp_path))
    assert pool.expected_requests == pytest.approx(2700)
    assert pool.num_clients == 2
    assert pool.input_tokens.values.tolist() == [10, 20, 30]
    np.testing.assert_allclose(pool.input_tokens.probabilities, np.array([1200, 300, 1200]) / 2700)
    assert pool.output_tokens.values.tolist() == [100, 200, 300]
    np.testing.assert_allclose(pool.output_tokens.probabilities, np.array([900, 600, 1200]) / 2700)
    assert pool.reason_ratio is None  # language-model folders have no reason_ratio


def test_json_round_trip_and_load_servegen(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    pool = build_servegen_distribution(tiny_folder(folder))
    path = tmp_path / "pool.json"
    write_servegen_json(pool, path)
    again = load_servegen(path)
    np.testing.assert_array_equal(again.output_tokens.values, pool.output_tokens.values)
    np.testing.assert_allclose(
        again.output_tokens.probabilities, pool.output_tokens.probabilities, rtol=1e-5
    )
    assert load_servegen(folder).expected_requests == pytest.approx(2700)


def test_compaction_keeps_mean_small_values_and_cap() -> None:
    rng = np.random.default_rng(0)
    values = np.arange(1, 40_001)
    pmf = make_pmf(values, rng.random(len(values)))
    compact = compact_token_pmf(pmf)
    assert len(compact.values) < 3500
    assert compact.mean() == pytest.approx(pmf.mean(), rel=1e-6)
    np.testing.assert_array_equal(compact.values[:2047], values[:2047])
    assert compact.values[-1] == 40_000
    assert compact.quantile(0.99) == pytest.approx(pmf.quantile(0.99), rel=0.006)


@pytest.mark.parametrize(
    ("breakage", "words"),
    [
        ("no_files", "no chunk-<i>-trace.csv files"),
        ("no_pair", "chunk-1-dataset.json: missing"),
        ("bad_rate", "chunk-0-trace.csv:2: expected window start s, rate req/s"),
        ("bad_json", "chunk-1-dataset.json:1: not valid JSON"),
        ("bad_pmf", "chunk-1-dataset.json:"),
    ],
)
def test_broken_folders_name_file_and_line(tmp_path: Path, breakage: str, words: str) -> None:
    folder = tiny_folder(tmp_path)
    if breakage == "no_files":
        for path in folder.iterdir():
            path.unlink()
    elif breakage == "no_pair":
        (folder / "chunk-1-dataset.json").unlink()
    elif breakage == "bad_rate":
        (folder / "chunk-0-trace.csv").write_text("0,1.0,1,Gamma,1,1\n600,fast,1,Gamma,1,1\n")
    elif breakage == "bad_json":
        (folder / "chunk-1-dataset.json").write_text("{oops")
    else:
        text = '{\n  "0": {\n    "input_tokens": "{}",\n    "output_tokens": "{}"\n  },\n'
        text += (
            '  "21600": {\n    "input_tokens": "{30: oops}",\n    "output_tokens": "{3: 1}"\n  }\n}'
        )
        (folder / "chunk-1-dataset.json").write_text(text)
        words = "chunk-1-dataset.json:7: window '21600' input_tokens: not a {value: probability}"
    with pytest.raises(InferplanError) as info:
        build_servegen_distribution(folder)
    assert words in str(info.value)


def test_bad_pool_json_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    path.write_text('{\n"input_tokens": {"values": [1, 2], "probabilities": [0.5]},\n"x": 1\n}\n')
    with pytest.raises(InferplanError, match=r"pool.json:2: input_tokens"):
        read_servegen_json(path)
    path.write_text('{\n"input_tokens": {"values": [1], "probabilities": [1]}\n}\n')
    with pytest.raises(InferplanError, match="'output_tokens' needs 'values' and 'probabilities'"):
        read_servegen_json(path)
