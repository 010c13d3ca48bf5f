"""``simulate --random-prefix-len/--prefix-groups``: hit rate in the JSON, errors, defaults."""

import json

import pytest

from cli_run import run

PREFIX5 = ("--random-prefix-len", "5")
SIM = ("simulate", "--model", "Llama-3.1-8B", "--gpu", "h100", "--num-prompts", "20")


def test_shared_prefix_hits_and_off_has_no_hit_rate(capsys: pytest.CaptureFixture[str]) -> None:
    args = (*SIM, "--random-input-len", "200", "--random-prefix-len", "800", "--json")
    code, out, _ = run(capsys, *args, "--request-rate", "1")
    assert code == 0
    data = json.loads(out)
    # 19 of 20 requests hit the prefix's 50 full blocks: 19 * 800 of 20 * 1000 tokens.
    assert data["cached_tokens"] == 19 * 800
    assert data["prefix_cache_hit_rate"] == pytest.approx(19 * 800 / 20_000)
    assert data["total_input_tokens"] == 20 * 1000
    assert data["prefix_cache_replicas"] == [
        {"cached_tokens": 19 * 800, "hit_rate": data["prefix_cache_hit_rate"]}
    ]
    code, out, _ = run(capsys, *args, "--request-rate", "1", "--no-enable-prefix-caching")
    off = json.loads(out)
    assert code == 0 and "prefix_cache_hit_rate" not in off
    assert "prefix_cache_replicas" not in off


def test_hits_per_replica_with_data_parallelism(capsys: pytest.CaptureFixture[str]) -> None:
    """Round robin over 2 replicas, one request at a time: each replica misses once (its
    first request), then hits the prefix's 50 blocks."""
    args = (*SIM, "--random-input-len", "200", "--random-prefix-len", "800", "-dp", "2")
    code, out, _ = run(capsys, *args, "--request-rate", "1", "--json")
    assert code == 0
    replicas = json.loads(out)["prefix_cache_replicas"]
    assert [r["cached_tokens"] for r in replicas] == [9 * 800, 9 * 800]
    assert replicas[0]["hit_rate"] == pytest.approx(9 * 800 / 10_000)


def test_default_flags_are_the_workload_without_a_prefix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, plain, _ = run(capsys, *SIM, "--json")
    code0, zero, _ = run(capsys, *SIM, "--random-prefix-len", "0", "--json")
    assert code == code0 == 0 and plain == zero
    assert "prefix_cache_hit_rate" not in json.loads(plain)


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (("--prefix-groups", "3"), "--prefix-groups"),
        (
            ("--dataset-name", "trace", "--dataset-path", "azure_llm_2023_conv", *PREFIX5),
            "--random-prefix-len applies to",
        ),
        (("--random-prefix-len", "-1"), "--random-prefix-len"),
    ],
)
def test_bad_prefix_flags_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], flag: str
) -> None:
    code, _, err = run(capsys, *SIM, *extra)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0]


def test_disaggregated_pools_report_their_hit_rates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = (*SIM, "--random-input-len", "200", "--random-prefix-len", "800", "--disaggregate")
    code, out, err = run(capsys, *args, "--request-rate", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    prefill, decode = data["pools"]["prefill"], data["pools"]["decode"]
    assert prefill["cached_tokens"] == data["cached_tokens"] == 19 * 800
    assert prefill["prefix_cache_hit_rate"] == pytest.approx(19 * 800 / 20_000)
    # The decode replica caches each received prompt: 19 requests hit the prefix there too.
    assert decode["cached_tokens"] == 19 * 800
    assert decode["prefix_cache_hit_rate"] == pytest.approx(19 * 800 / 20_000)
    assert prefill["prefix_cache_replicas"][0]["cached_tokens"] == 19 * 800
    code, out, _ = run(capsys, *args, "--request-rate", "1", "--no-enable-prefix-caching", "--json")
    off = json.loads(out)
    assert code == 0 and "cached_tokens" not in off["pools"]["prefill"]
    assert "cached_tokens" not in off["pools"]["decode"]
    assert off["kv_transfer"]["bytes"] == data["kv_transfer"]["bytes"]  # whole KV either way
    assert off["mean_ttft_ms"] > data["mean_ttft_ms"]
