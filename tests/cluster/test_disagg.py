"""Prefill/decode disaggregation: hand-computed times for one request, decode admission only
once the KV has arrived, decode-pool preemption, conservation, and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferplan.cli import main
from inferplan.cli_flags import build_memory_plan
from inferplan.cluster.disagg import Pool, simulate_disaggregated
from inferplan.cluster.kv_transfer import KvLink
from inferplan.cluster.pools import prompt_kv_bytes
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.simulator import SimulationConfig
from inferplan.metrics.records import RequestStatus
from inferplan.perf.batch import StepBatch
from inferplan.perf.factory import build_step_model
from inferplan.workload import Workload

PLAN = build_memory_plan(
    "Llama-3.1-8B", "h200", 1, 1, False, None, "auto", None, 0.9, None, None, None
)
MODEL = build_step_model(PLAN)
KVB = PLAN.kv_bytes_per_token


def _kv_bytes(tokens: int) -> float:
    return tokens * KVB


def _pool(name: str, num_blocks: int = 10_000, *, exact: bool = False, seqs: int = 256) -> Pool:
    sched = SchedulerConfig(
        max_num_batched_tokens=2048, max_num_seqs=seqs, block_size=16, num_blocks=num_blocks
    )
    return Pool(name, SimulationConfig(sched, max_model_len=4096, exact=exact), MODEL)


def _workload(arrivals: list[float], prompts: list[int], outputs: list[int]) -> Workload:
    n = len(arrivals)
    return Workload(
        arrival_s=np.array(arrivals, dtype=np.float64),
        input_tokens=np.array(prompts, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )


def _step_s(batch: StepBatch) -> float:
    return MODEL.step_time(batch).total_s


def test_one_request_by_hand() -> None:
    """TTFT = prefill step + link latency + bytes / bandwidth; then one decode step a token,
    attending to prompt + 1, prompt + 2 tokens."""
    prompt, bandwidth, latency = 1000, 25e9, 2e-3
    wl = _workload([5.0], [prompt], [3])
    result = simulate_disaggregated(
        wl, _pool("prefill"), _pool("decode"), KvLink(bandwidth, latency), _kv_bytes
    )
    prefill = _step_s(
        StepBatch(
            prefill_tokens=prompt,
            prefill_attention_pairs=prompt * (prompt + 1) / 2,
            num_prefill_seqs=1,
        )
    )
    wire = latency + prompt * KVB / bandwidth
    decode = [
        _step_s(StepBatch(num_decode_seqs=1, decode_context_tokens=prompt + k)) for k in (1, 2)
    ]
    rec = result.records
    assert rec.status[0] == int(RequestStatus.COMPLETED)
    assert rec.output_tokens[0] == 3
    assert rec.first_token_s[0] == pytest.approx(prefill + wire, rel=1e-12)
    assert rec.finish_s[0] == pytest.approx(prefill + wire + sum(decode), rel=1e-12)
    assert rec.max_itl_s[0] == pytest.approx(max(decode), rel=1e-12)
    summary = result.link.summary(result.duration_s)
    assert summary["bytes"] == prompt * KVB
    assert summary["num_transfers"] == 1


def test_one_token_requests_end_on_the_prefill_pool() -> None:
    wl = _workload([0.0, 0.0], [300, 300], [1, 1])
    result = simulate_disaggregated(
        wl, _pool("prefill"), _pool("decode"), KvLink(1e9, 0.0), _kv_bytes
    )
    assert np.all(result.records.status == int(RequestStatus.COMPLETED))
    assert result.link.summary(1.0)["num_transfers"] == 0
    assert result.decode.records.num_requests == 0


def test_a_busy_link_queues_transfers_first_come_first_served() -> None:
    """Equal prompts prefilled in one step leave together: the k-th waits k transfers."""
    n, prompt, bandwidth = 4, 500, 1e9
    wl = _workload([0.0] * n, [prompt] * n, [2] * n)
    result = simulate_disaggregated(
        wl, _pool("prefill"), _pool("decode"), KvLink(bandwidth, 0.0), _kv_bytes
    )
    wire = prompt * KVB / bandwidth
    ttft = np.sort(result.records.first_token_s - result.records.arrival_s)
    np.testing.assert_allclose(np.diff(ttft), wire, rtol=1e-9)


def test_small_decode_pool_preempts_and_conserves_requests() -> None:
    """A decode pool with a few blocks preempts (recompute) but every request ends completed
    or rejected; decode admission never precedes the KV's arrival; fast == exact."""
    rng = np.random.default_rng(7)
    n = 40
    wl = _workload(
        list(np.sort(rng.uniform(0, 1, n))),
        list(rng.integers(50, 400, n)),
        list(rng.integers(2, 300, n)),
    )
    runs = [
        simulate_disaggregated(
            wl,
            _pool("prefill", exact=exact),
            _pool("decode", 60, exact=exact),
            KvLink(5e9, 1e-4),
            _kv_bytes,
        )
        for exact in (False, True)
    ]
    fast, exact = runs
    assert exact.decode.records.num_preemptions.sum() > 0
    assert set(exact.records.status.tolist()) <= {
        int(RequestStatus.COMPLETED),
        int(RequestStatus.REJECTED),
    }
    np.testing.assert_array_equal(fast.records.status, exact.records.status)
    np.testing.assert_allclose(
        fast.records.finish_s, exact.records.finish_s, rtol=1e-9, equal_nan=True
    )
    d = exact.decode.records
    assert np.all(d.first_scheduled_s >= d.arrival_s)


# --- command line ---------------------------------------------------------------------------

BASE = [
    "simulate",
    "--model",
    "Llama-3.1-8B",
    "--gpu",
    "h200",
    "--num-prompts",
    "30",
    "--request-rate",
    "20",
]


def test_cli_json_has_kv_transfer_and_pools(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE, "--disaggregate", "--decode-gpu", "h100", "--decode-dp", "2", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    kv = data["kv_transfer"]
    for key in ("bytes", "mean_transfer_ms", "p99_transfer_ms", "link_utilization"):
        assert kv[key] is not None and kv[key] >= 0
    assert data["pools"]["prefill"]["gpu"] == "h200_sxm_141gb"
    assert data["pools"]["decode"]["gpu"] == "h100_sxm_80gb"
    assert data["pools"]["decode"]["replicas"] == 2
    assert kv["link_tier"] == "scale_out"  # different GPU types: different nodes
    assert data["completed"] + data["rejected"] == 30
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == data  # deterministic


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--prefill-dp", "2"], "--prefill-dp"),
        (["--disaggregate", "-dp", "2"], "--data-parallel-size"),
        (["--disaggregate", "--max-concurrency", "4"], "--max-concurrency"),
        (["--disaggregate", "--decode-tp", "0"], "--decode-tp"),
        (["--disaggregate", "--scheduler", "static"], "--disaggregate"),
        (["--disaggregate", "--decode-gpu", "nosuch"], "--decode-gpu"),
    ],
)
def test_cli_bad_disaggregation_flags(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    # click names a bad value's flag in quotes ("Invalid value for '--decode-tp'"); our own
    # checks start with it.
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert err.startswith(f"error: {flag}") or f"'{flag}'" in err


def test_sliding_window_layers_send_only_their_window() -> None:
    """gpt-oss alternates full and 128-token sliding layers: a long prompt's KV is the full
    layers' tokens plus the windows, so well under ``kv_bytes_per_token x prompt``; a prompt
    inside the window sends every token of every layer."""
    plan = build_memory_plan(
        "gpt-oss-120b", "h200", 2, 1, False, None, "auto", None, 0.9, None, None, None
    )
    kv_bytes = prompt_kv_bytes(plan)
    per_token = plan.kv_bytes_per_token
    assert kv_bytes(100) == pytest.approx(100 * per_token, rel=1e-12)
    assert kv_bytes(8000) < 0.6 * 8000 * per_token
    assert kv_bytes(8000) > 0.5 * 8000 * per_token
