"""The plan request file: the bundled example is accepted; mistakes are one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.plan.request import check_names, load_request

EXAMPLE = Path(__file__).parents[2] / "src/inferplan/plan/data/plan-example.yaml"

GOOD = """\
model: Qwen/Qwen3-8B
traffic:
  - class: chat
    request_rate: 2
    input_len: {mean: 300, sigma: 0.5, max: 1000}
    output_len: {mean: 100, sigma: 0.5, max: 400}
    slo: {ttft_p99_ms: 2000}
hardware:
  - {gpu: h100, price_per_gpu_hour: 2.5}
"""


def test_the_bundled_example_is_accepted_with_defaults() -> None:
    request = load_request(EXAMPLE)
    check_names(request, str(EXAMPLE))
    assert [c.name for c in request.traffic] == ["chat", "reasoning"]
    assert request.kv_cache_dtype == ["auto"] and request.engines == ["vllm"]
    assert request.daily_profile == [1.0] * 24 and request.headroom == 1.0
    assert request.hardware[0].gpus_per_node == 8
    assert request.traffic[1].dataset == "reasoning"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("request_rate: 2", "request_rate: -2"), ":4: traffic[0].request_rate:"),
        (GOOD.replace("ttft_p99_ms", "ttft_p99"), ":7: traffic[0].slo: unknown target 'ttft_p99'"),
        (GOOD + "quantisation: [fp8]\n", ":10: quantisation: Extra inputs"),
        (GOOD.replace("class: chat", "klass: chat"), "traffic[0].class: Field required"),
        (GOOD + "daily_profile: [1, 2]\n", ":10: daily_profile: List should have at least 24"),
        (GOOD.replace("h100", "h1000"), ":9: hardware[0].gpu: unknown GPU"),
        (GOOD + "quantization: [fp7]\n", ":10: quantization[0]: unknown format 'fp7'"),
        (GOOD + "engines: [tgi]\n", ":10: engines[0]: engine 'tgi'"),
        (GOOD.replace("    input_len: {mean: 300, sigma: 0.5, max: 1000}\n", ""), "give input_len"),
        (GOOD + "search: {router: random}\n", "search.router: unknown router"),
        ("- just a list\n", "expected a YAML mapping"),
        ("model: [unclosed\n", "not valid YAML"),
    ],
)
def test_mistakes_are_one_line_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "req.yaml"
    path.write_text(text)
    assert main(["plan", str(path), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}")
    assert expected in err
    assert err.count("\n") == 1


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path / "nope.yaml")]) == 2
    assert "no such plan request file" in capsys.readouterr().err


def test_lengths_may_be_plain_numbers() -> None:
    request = load_request(EXAMPLE)
    data = request.traffic[0].model_dump(by_alias=True)
    data["input_len"] = 512
    from inferplan.plan.request import TrafficClass

    cls = TrafficClass.model_validate(data)
    assert cls.input_len is not None and cls.input_len.mean == 512 and cls.input_len.sigma == 0


def test_duplicate_class_names_are_refused(tmp_path: Path) -> None:
    head, rest = GOOD.split("hardware:")
    one_class = head.split("traffic:\n")[1]
    path = tmp_path / "req.yaml"
    path.write_text(head + one_class + "hardware:" + rest)
    with pytest.raises(InferplanError, match="class names must be distinct"):
        load_request(path)
