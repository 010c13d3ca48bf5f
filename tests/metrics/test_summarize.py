"""summarize: hand-computed vLLM keys, goodput, inferplan keys, JSON safety, bad inputs."""

import json
import math
from collections.abc import Callable

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.metrics import BIN_RELATIVE_WIDTH, ItlHistogram, RequestRecords, StepTrace
from inferplan.metrics.stats import percentile_label
from inferplan.metrics.summary import summarize

MakeRecords = Callable[..., RequestRecords]


def tiny_itl() -> ItlHistogram:
    itl = ItlHistogram()
    itl.add_arithmetic(0.1, 0.0, 10)  # r0: 10 gaps of 0.1 s
    itl.add_arithmetic(0.2, 0.0, 20)  # r1: 20 gaps of 0.2 s
    return itl


def test_vllm_keys_by_hand(make_records: MakeRecords) -> None:
    summary = summarize(make_records(), tiny_itl(), duration_s=10.0)
    assert summary["duration"] == 10.0
    assert summary["completed"] == 3
    assert summary["failed"] == 2
    assert summary["total_input_tokens"] == 350  # completed only, like vLLM
    assert summary["total_output_tokens"] == 33
    assert summary["request_throughput"] == pytest.approx(0.3)
    assert summary["request_goodput"] is None
    assert summary["output_throughput"] == pytest.approx(3.3)
    assert summary["total_token_throughput"] == pytest.approx(38.3)
    # 1-s buckets from t=0: r0 in 0..1, r1 in 1..5, r2 in 2..3.
    assert summary["max_concurrent_requests"] == 2
    # Bucket 1: r0's last 5 tokens + r1's first token + 0.7 s of r1 at 5 tok/s.
    assert summary["max_output_tokens_per_s"] == pytest.approx(9.5)

    # TTFT [0.5, 0.3, 1.0]
    assert summary["mean_ttft_ms"] == pytest.approx(600.0)
    assert summary["median_ttft_ms"] == pytest.approx(500.0)
    assert summary["std_ttft_ms"] == pytest.approx(1000 * math.sqrt((0.01 + 0.09 + 0.16) / 3))
    assert summary["p99_ttft_ms"] == pytest.approx(1000 * (0.5 + 0.98 * 0.5))
    # TPOT [0.1, 0.2]: the one-token request has none.
    assert summary["mean_tpot_ms"] == pytest.approx(150.0)
    assert summary["median_tpot_ms"] == pytest.approx(150.0)
    assert summary["std_tpot_ms"] == pytest.approx(50.0)
    assert summary["p99_tpot_ms"] == pytest.approx(199.0)
    # E2EL [1.5, 4.3, 1.0]
    assert summary["mean_e2el_ms"] == pytest.approx(6800.0 / 3)
    assert summary["median_e2el_ms"] == pytest.approx(1500.0)
    assert summary["p99_e2el_ms"] == pytest.approx(1000 * (1.5 + 0.98 * 2.8))
    # ITL: 10 x 0.1 s and 20 x 0.2 s, pooled.
    assert summary["mean_itl_ms"] == pytest.approx(1000 * 5.0 / 30)
    assert summary["std_itl_ms"] == pytest.approx(1000 * math.sqrt(0.03 - (1 / 6) ** 2))
    assert summary["median_itl_ms"] == pytest.approx(200.0, rel=BIN_RELATIVE_WIDTH)
    assert summary["p99_itl_ms"] == pytest.approx(200.0, rel=BIN_RELATIVE_WIDTH)


def test_inferplan_keys_by_hand(make_records: MakeRecords) -> None:
    trace = StepTrace(total_blocks=10)
    trace.record(0.0, 2)
    trace.record(2.0, 6)
    trace.record(4.0, 0)
    summary = summarize(make_records(), tiny_itl(), duration_s=10.0, kv_usage=trace)
    assert summary["num_requests"] == 5
    assert summary["rejected"] == 1
    assert summary["aborted"] == 1
    assert summary["completion_rate"] == pytest.approx(0.6)
    assert summary["rejection_rate"] == pytest.approx(0.2)
    assert summary["abort_rate"] == pytest.approx(0.2)
    assert summary["mean_queue_ms"] == pytest.approx(100.0)  # [0.1, 0.2, 0.0]
    assert summary["p99_queue_ms"] == pytest.approx(1000 * (0.1 + 0.98 * 0.1))
    assert summary["mean_max_itl_ms"] == pytest.approx(175.0)  # [0.1, 0.25], completed only
    assert summary["worst_itl_ms"] == pytest.approx(200.0)  # exact, from the histogram
    assert summary["mean_client_wait_ms"] == pytest.approx(100.0)  # r1 waited 0.5 s of 5
    assert summary["max_client_wait_ms"] == pytest.approx(500.0)
    assert summary["num_preemptions"] == 3
    assert summary["num_preempted_requests"] == 2
    assert summary["recomputed_tokens"] == 390
    assert summary["swapped_bytes"] == 4096
    kv = summary["kv_usage"]
    assert kv["mean"] == pytest.approx((2 * 2 + 6 * 2) / 4 / 10)
    assert kv["max"] == pytest.approx(0.6)
    assert kv["series"]["time_s"] == [0.0, 2.0, 4.0]


def test_goodput_counts(make_records: MakeRecords) -> None:
    records = make_records()
    # r0: ttft 0.5 <= 0.6 and tpot 0.1 <= 0.15: good. r1: tpot 0.2 too slow. r2: ttft 1.0 too slow.
    slo_ms = {"tpot": 150, "ttft": 600}
    summary = summarize(records, tiny_itl(), duration_s=10.0, goodput_slo_ms=slo_ms)
    assert summary["good_requests"] == 1
    assert summary["request_goodput"] == pytest.approx(0.1)
    assert summary["slo_attainment"] == pytest.approx(0.2)  # of all 5 requests
    assert list(summary["goodput_slo_ms"]) == ["tpot", "ttft"]  # sorted
    # The limit is inclusive: r2's e2el is exactly 1.0 s.
    summary = summarize(records, tiny_itl(), duration_s=10.0, goodput_slo_ms={"e2el": 1000})
    assert summary["good_requests"] == 1
    # A one-token request counts as TPOT 0 (vLLM), so only r2 meets a 0 ms TPOT SLO.
    summary = summarize(records, tiny_itl(), duration_s=10.0, goodput_slo_ms={"tpot": 0})
    assert summary["good_requests"] == 1
    per_class = summary["classes"]
    assert per_class["chat"]["good_requests"] == 1
    assert per_class["code"]["good_requests"] == 0
    assert per_class["chat"]["slo_attainment"] == pytest.approx(1 / 3)


def test_per_class_split(make_records: MakeRecords) -> None:
    classes = summarize(make_records(), tiny_itl(), duration_s=10.0)["classes"]
    assert list(classes) == ["chat", "code"]
    chat, code = classes["chat"], classes["code"]
    assert (chat["num_requests"], chat["completed"], chat["aborted"]) == (3, 2, 1)
    assert (code["num_requests"], code["completed"], code["rejected"]) == (2, 1, 1)
    assert chat["completion_rate"] == pytest.approx(2 / 3)
    # chat TTFT [0.5, 1.0]
    assert chat["ttft_s"]["mean"] == pytest.approx(0.75)
    assert chat["ttft_s"]["p50"] == pytest.approx(0.75)
    assert chat["ttft_s"]["p90"] == pytest.approx(0.95)
    assert chat["ttft_s"]["p99"] == pytest.approx(0.995)
    assert chat["tpot_s"] == pytest.approx({"mean": 0.1, "p50": 0.1, "p90": 0.1, "p99": 0.1})
    assert code["e2el_s"]["p99"] == pytest.approx(4.3)
    assert chat["output_throughput_tok_s"] == pytest.approx(1.2)
    assert chat["num_preemptions"] == 1
    assert code["recomputed_tokens"] == 300


def test_buckets_in_summary(make_records: MakeRecords) -> None:
    buckets = summarize(make_records(), tiny_itl(), duration_s=10.0)["output_buckets"]
    assert list(buckets) == ["<=256", "<=1k", "<=4k", "<=16k", ">16k"]
    counts = {label: group["num_requests"] for label, group in buckets.items()}
    assert counts == {"<=256": 2, "<=1k": 1, "<=4k": 1, "<=16k": 0, ">16k": 1}
    assert buckets["<=4k"]["rejection_rate"] == 1.0
    assert buckets[">16k"]["abort_rate"] == 1.0
    empty = buckets["<=16k"]
    assert empty["completion_rate"] is None
    assert empty["ttft_s"] == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_percentile_keys_follow_vllm(make_records: MakeRecords) -> None:
    assert [percentile_label(p) for p in (99, 99.0, 99.9, 50, 0.5)] == [
        "99",
        "99",
        "99.9",
        "50",
        "0.5",
    ]
    summary = summarize(
        make_records(),
        tiny_itl(),
        duration_s=10.0,
        percentiles=(50, 99.9),
        percentile_metrics=("ttft", "itl"),
    )
    assert "p99.9_ttft_ms" in summary and "p50_itl_ms" in summary
    assert "p99_ttft_ms" not in summary and "mean_e2el_ms" not in summary
    assert summary["p50_ttft_ms"] == summary["median_ttft_ms"]


def test_vllm_key_order(make_records: MakeRecords) -> None:
    keys = list(summarize(make_records(), tiny_itl(), duration_s=10.0))
    head = [
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
    ]
    assert keys[: len(head)] == head
    metric_keys = [k for k in keys if k.endswith("_ms") and k.split("_")[1] in {"ttft", "tpot"}]
    assert metric_keys[:4] == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms"]


def test_json_safe_and_deterministic_with_nothing_completed(make_records: MakeRecords) -> None:
    nan5 = [float("nan")] * 5
    records = make_records(
        status=[1, 1, 2, 1, 2],
        first_scheduled_s=nan5,
        first_token_s=nan5,
        finish_s=nan5,
        max_itl_s=nan5,
    )
    first = summarize(records, ItlHistogram(), duration_s=0.0, goodput_slo_ms={"ttft": 100})
    second = summarize(records, ItlHistogram(), duration_s=0.0, goodput_slo_ms={"ttft": 100})
    text = json.dumps(first, allow_nan=False)
    assert text == json.dumps(second, allow_nan=False)
    assert first["completed"] == 0
    assert first["mean_ttft_ms"] is None and first["p99_itl_ms"] is None
    assert first["request_throughput"] is None  # zero duration
    assert first["max_concurrent_requests"] == 0
    assert first["worst_itl_ms"] is None
    assert first["kv_usage"] is None


def test_full_summary_is_plain_json(make_records: MakeRecords) -> None:
    trace = StepTrace(total_blocks=7)
    trace.record(0.0, 3)
    summary = summarize(
        make_records(),
        tiny_itl(),
        duration_s=10.0,
        percentiles=(50, 90, 99, 99.9),
        goodput_slo_ms={"ttft": 500, "tpot": 120, "e2el": 5000},
        kv_usage=trace,
    )
    decoded = json.loads(json.dumps(summary, allow_nan=False))
    assert decoded == summary

    def walk(value: object) -> None:
        if isinstance(value, dict):
            assert all(isinstance(k, str) for k in value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        else:
            assert value is None or type(value) in (int, float, str, bool)
            assert not (isinstance(value, float) and not math.isfinite(value))

    walk(summary)


def test_empty_run(make_records: MakeRecords) -> None:
    records = RequestRecords.empty(0)
    summary = summarize(records, None, duration_s=0.0)
    json.dumps(summary, allow_nan=False)
    assert summary["num_requests"] == 0
    assert summary["completion_rate"] is None
    assert summary["classes"]["default"]["num_requests"] == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"percentiles": (101,)},
        {"goodput_slo_ms": {"itl": 5.0}},
        {"goodput_slo_ms": {"ttft": -1.0}},
        {"output_buckets": (1024, 256)},
        {"output_buckets": (0, 256)},
        {"output_buckets": (256.5,)},
        {"percentile_metrics": ("ttft", "latency")},
    ],
)
def test_bad_options_are_user_errors(make_records: MakeRecords, kwargs: dict) -> None:
    with pytest.raises(InferplanError):
        summarize(make_records(), tiny_itl(), duration_s=10.0, **kwargs)


def test_duplicate_class_names_are_user_errors(make_records: MakeRecords) -> None:
    with pytest.raises(InferplanError, match="distinct"):
        summarize(make_records(class_names=("a", "a")), tiny_itl(), duration_s=10.0)


def test_latencies_start_at_arrival_not_dispatch(make_records: MakeRecords) -> None:
    """The client-side concurrency wait (dispatch -> arrival) is excluded, as in vLLM."""
    base = summarize(make_records(), tiny_itl(), duration_s=10.0)
    held = make_records(dispatch_s=np.asarray([-5.0, -5.0, -5.0, -5.0, -5.0]))
    summary = summarize(held, tiny_itl(), duration_s=10.0)
    assert summary["mean_ttft_ms"] == base["mean_ttft_ms"]
    assert summary["mean_e2el_ms"] == base["mean_e2el_ms"]
    assert summary["max_client_wait_ms"] == pytest.approx(8000.0)
