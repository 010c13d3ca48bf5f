"""``simulate``'s admission flags (``cli_admission.py``): bad combinations are one ``error:``
line naming the flag (exit 2); the JSON gains ``admission`` only when asked for."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from cli_run import assert_one_line_error, run
from inferplan.cli_admission import AdmissionFlags
from inferplan.engine.admission import POLICIES
from inferplan.errors import InferplanError
from inferplan.workload.predict import PREDICTORS

SIM = [
    *("simulate", "--model", "Llama-3.1-8B", "--gpu", "h200"),
    *("--dataset-name", "reasoning", "--num-prompts", "30"),
]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--admission-quantile", "0.5"], "--admission-quantile"),
        (["--admission", "reserve-max", "--admission-quantile", "0.5"], "--admission-quantile"),
        (["--admission", "quantile", "--admission-quantile", "1.5"], "--admission-quantile"),
        (["--admission", "quantile", "--admission-headroom", "1"], "--admission-headroom"),
        (
            ["--admission", "quantile", "--admission-token-budget", "100"],
            "--admission-token-budget",
        ),
        (["--admission", "quantile", "--admission-max-tokens", "100"], "--admission-max-tokens"),
        (["--on-exhaustion", "reject"], "--on-exhaustion"),
        (["--admission", "sometimes"], "--admission"),
        (["--admission", "quantile", "--on-exhaustion", "pray"], "--on-exhaustion"),
        (["--admission", "quantile", "--predictor-sigma", "0.3"], "--predictor-sigma"),
        (
            ["--admission", "quantile", "--length-predictor", "class", "--predictor-bias", "2"],
            "--predictor-bias",
        ),
        (
            ["--admission", "quantile", "--length-predictor", "noisy", "--predictor-bias", "0"],
            "--predictor-bias",
        ),
        (["--length-predictor", "noisy"], "--length-predictor"),
        (["--spf-aging-s", "5"], "--spf-aging-s"),
        (["--scheduling-policy", "spf", "--spf-aging-s", "0"], "--spf-aging-s"),
        (["--admission", "quantile", "--engine", "trtllm"], "--admission"),
        (["--admission", "quantile", "--scheduler", "static"], "--admission"),
        (["--admission", "quantile", "--disaggregate"], "--admission"),
    ],
)
def test_bad_admission_flags_are_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    code, out, err = run(capsys, *SIM, *flags)
    assert code == 2
    assert named in assert_one_line_error(err)
    assert out == ""


def test_admission_section_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *SIM, "--request-rate", "2", "--json")
    assert code == 0
    assert "admission" not in json.loads(out)
    code, out, _ = run(
        capsys,
        *SIM,
        "--request-rate",
        "2",
        "--json",
        "--admission",
        "quantile",
        "--length-predictor",
        "noisy",
        "--on-exhaustion",
        "truncate",
    )
    assert code == 0
    summary = json.loads(out)
    adm = summary["admission"]
    assert (adm["policy"], adm["quantile"], adm["headroom"]) == ("quantile", 0.9, 0.1)
    assert adm["predictor"]["name"] == "noisy" and adm["predictor"]["sigma"] == 0.5
    buckets = adm["by_bucket"]
    assert list(buckets) == list(summary["output_buckets"])
    assert sum(b["num_requests"] for b in buckets.values()) == 30
    done = sum(b["completed"] + b["truncated"] for b in buckets.values())
    assert done == summary["completed"]
    assert adm["truncated"]["total"] == sum(b["truncated"] for b in buckets.values())


def test_console_shows_an_admission_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *SIM, "--request-rate", "2", "--admission", "reserve-max")
    assert code == 0
    assert "admission: reserve-max" in out
    code, out, _ = run(capsys, *SIM, "--request-rate", "2")
    assert "admission" not in out


def test_long_outputs_coincide_preempt_on_demand_not_with_class_quantile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The burst in small (a ~5 GiB KV pool): six long outputs arriving together make
    on-demand admission preempt; a class-quantile reservation with headroom never does."""
    small = [
        *("simulate", "--model", "Llama-3.1-8B", "--gpu", "h200"),
        *("--gpu-memory-utilization", "0.16", "--max-model-len", "33000"),
        *("--dataset-name", "reasoning-burst", "--num-prompts", "60", "--request-rate", "0.5"),
        "--json",
    ]
    _, out, _ = run(capsys, *small)
    on_demand = json.loads(out)
    _, out, _ = run(capsys, *small, "--admission", "quantile", "--length-predictor", "class")
    quantile = json.loads(out)
    assert on_demand["num_preemptions"] > 0 and on_demand["completed"] == 60
    assert quantile["num_preemptions"] == 0 and quantile["completed"] == 60
    assert quantile["admission"]["headroom_peak_blocks"] > 0  # the tail drew on the headroom
    assert quantile["p99_tpot_ms"] < on_demand["p99_tpot_ms"]


# Which values of --admission / --length-predictor read each knob (the flags' help), written out
# here apart from cli_admission's table, so that a slip in the table fails (review20).
_READ_BY = {
    "admission_quantile": ("admission", {"quantile", "token-budget"}),
    "admission_headroom": ("admission", set(POLICIES)),
    "admission_token_budget": ("admission", {"token-budget"}),
    "admission_max_tokens": ("admission", {"reserve-max"}),
    "on_exhaustion": ("admission", set(POLICIES)),
    "predictor_sigma": ("length_predictor", {"noisy"}),
    "predictor_bias": ("length_predictor", {"noisy"}),
}


@pytest.mark.parametrize("knob", sorted(_READ_BY))
def test_each_knob_is_accepted_exactly_with_the_values_that_read_it(knob: str) -> None:
    reader, readers = _READ_BY[knob]
    values = POLICIES if reader == "admission" else tuple(PREDICTORS)
    for value in (None, *values):
        given = dict.fromkeys(f.name for f in fields(AdmissionFlags)) | {knob: 1, reader: value}
        flags = AdmissionFlags(**given)
        if value in readers:
            flags.check()
        else:
            with pytest.raises(InferplanError, match=f"^--{knob.replace('_', '-')}: applies"):
                flags.check()
