"""Fuzzing every command's flags and the files they read, against the error contract.

The contract (``docs/errors.md``): exit 0 (completed), 1 (does not fit) or 2 (bad input); never a
traceback, never an internal error; a failure is exactly one ``error:`` line (``warning:`` lines
may come before it) that names a flag given or a file given; every run ends within a time limit.

Inputs: hypothesis draws, for ``memory``, ``roofline``, ``simulate``, ``calibrate``, ``validate``
and ``profile``, a mix of valid values and extreme ones (0, negatives, NaN, inf, 1e-320, 2**63-1,
a 5,000-digit integer, text, empty) for each flag, and files (``config.json``, GPU YAML,
``--calibration`` YAML, ``--operator-table`` CSV, CSV and JSONL traces, benchmark results as
JSON and CSV) made from a valid file by one mutation: a UTF-8 byte-order mark, bytes that are not
UTF-8, UTF-16, a truncation, an empty file, a folder in its place, deep nesting, a duplicated
line, a number replaced by an extreme one or a value of the wrong type.

Commands run in-process through click's ``CliRunner`` isolation and ``inferplan.cli.main``.
Profiles (``INFERPLAN_FUZZ_PROFILE``): ``ci`` (default; derandomized, a few dozen examples per
command, well under a minute) and ``long`` (``make fuzz``: random, thousands of examples).

Ranges: finite request rates are drawn log-uniformly from 1e-9 to 1e6 req/s, and at the
edge bound itself (``--num-prompts / --request-rate`` equal to ``limits.MAX_SPAN_S``, ten years, and
just either side of it), so some synthetic runs spread a few requests over months and some are
refused at the edge. Trace arrivals are shifted by an offset from ``EPOCH_OFFSETS``: 0,
Unix-epoch seconds (1.7e9) and milliseconds (1.7e12), and huge values (1e15, where the rows
keep their spacing; 1e17 and 1e300, where they round onto a few instants); the number mutation
also puts one row at 1e300 or 1.7e9 (a span beyond ten years: refused). Every such run must end
within the time limit (issue 9, items 1 and 2: a far arrival once looped forever, and a
tolerance in absolute seconds broke epoch-time traces).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from inferplan.cli import main
from inferplan.limits import MAX_SPAN_S
from time_limit import time_limit

PROFILE = os.environ.get("INFERPLAN_FUZZ_PROFILE", "ci")
_LONG = PROFILE == "long"


def fuzz_settings(ci_examples: int) -> settings:
    return settings(
        max_examples=ci_examples * 50 if _LONG else ci_examples,
        derandomize=not _LONG,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # CI reports the failing draw as found (its argv is in the message); shrinking a
        # command line that reads files can take minutes.
        phases=tuple(Phase) if _LONG else (Phase.explicit, Phase.reuse, Phase.generate),
    )


RUN_LIMIT_S = 60  # one command; the slowest valid draw takes about a second

# ---- running one command and checking the contract -------------------------------------------


def invoke(argv: list[str]) -> tuple[int, str, str]:
    runner = CliRunner()
    with runner.isolation() as (out, err, _), time_limit(RUN_LIMIT_S):
        code = main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
    return code, out.getvalue().decode(), err.getvalue().decode()


def _named(line: str, argv: list[str]) -> bool:
    """The error names something the user gave: a flag, or a path (or a file inside it)."""
    for arg in argv:
        if arg.startswith("-") and len(arg) > 1 and arg.split("=")[0] in line:
            return True
        is_path_named = f"{arg}:" in line or f"{arg}/" in line
        if arg.strip() and (is_path_named or (os.sep in arg and Path(arg).name in line)):
            return True
    return "Missing option" in line or "No such option" in line or "Missing argument" in line


def check_contract(argv: list[str]) -> int:
    code, _, err = invoke(argv)
    shown = " ".join(argv)[:600]
    assert code in (0, 1, 2), f"exit {code}: {shown}\n{err}"
    assert "Traceback" not in err and "internal error" not in err, f"{shown}\n{err}"
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    others = [line for line in lines if not line.startswith(("error: ", "warning: "))]
    assert not others, f"{shown}\nstray stderr lines: {others}"
    if code == 0:
        assert not errors, f"{shown}\n{err}"
    else:
        assert len(errors) == 1 and lines[-1] == errors[0], f"{shown}\n{err}"
        if code == 2:
            assert _named(errors[0], argv), f"{shown}\nnames no flag or file: {errors[0]}"
    return code


# ---- values --------------------------------------------------------------------------------

HUGE_INT = "1" + "0" * 5000
BAD_INTS = ["0", "-1", "1e12", "1000000000000", str(2**63 - 1), HUGE_INT, "2.5", "abc", "", "nan"]
BAD_FLOATS = ["nan", "inf", "-inf", "1e-320", "5e-324", "1e308", "-1", "0", "abc", ""]


def rates(num_requests_text: str) -> st.SearchStrategy[str]:
    """Request rates: log-uniform over 1e-9..1e6 req/s, the edge bound for the drawn
    ``--num-prompts`` (its arrivals span exactly MAX_SPAN_S) and a hair either side, and inf."""
    is_count = num_requests_text.isdigit() and len(num_requests_text) < 9
    edge = (int(num_requests_text) if is_count else 40) / MAX_SPAN_S
    return st.one_of(
        st.floats(-9, 6).map(lambda exponent: repr(10**exponent)),
        st.sampled_from([edge, edge * (1 - 1e-9), edge * (1 + 1e-9)]).map(repr),
        st.just("inf"),
    )


class Value:
    """A flag's valid values and its extreme ones. In a clean draw every value is valid (to
    reach the simulation); otherwise three in four are (one bad flag per command line, often)."""

    def __init__(self, valid: st.SearchStrategy[str], bad: list[str]) -> None:
        self.valid = valid
        self.any = st.one_of(valid, valid, valid, st.sampled_from(bad))

    def pick(self, clean: bool) -> st.SearchStrategy[str]:
        return self.valid if clean else self.any


def mostly(valid: st.SearchStrategy[str], bad: list[str]) -> Value:
    return Value(valid, bad)


def ints(low: int, high: int) -> Value:
    return mostly(st.integers(low, high).map(str), BAD_INTS)


def floats(low: float, high: float) -> Value:
    return mostly(st.floats(low, high).map(repr), BAD_FLOATS)


def choice(*values: str) -> st.SearchStrategy[str]:
    return st.sampled_from(values)


def options(*valid: str, bad: tuple[str, ...] = ()) -> Value:
    """Named choices: ``valid`` ones and ``bad`` ones (refused by the command)."""
    return Value(st.sampled_from(valid), list(bad) or list(valid))


# ---- files: a valid one, then one mutation --------------------------------------------------

TINY_CONFIG = (
    '{"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4,\n'
    ' "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 1024,\n'
    ' "vocab_size": 32000, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}\n'
)
GPU_YAML = (
    "name: lab-gpu\narchitecture: hopper\nmemory:\n  capacity_gb: 80\n  bandwidth_tbps: 3.35\n"
    "compute_dense_tflops:\n  bf16: 989\n  fp8: 1979\nscale_up:\n  unidir_gbps: 450\n"
    "  domain_size: 8\n"
)
CALIBRATION_YAML = (
    "efficiency:\n  gemm_compute: 0.7\n  gemm_half_tokens: 64\n  memory_bandwidth: 0.8\n"
    "  attention_compute: 0.5\n  attention_memory: 0.7\n  collective_bandwidth: 0.7\n"
    "  collective_latency_s: 1.0e-05\n  step_overhead_s: 0.002\n  per_seq_overhead_s: 1.0e-05\n"
    "  eager_layer_overhead_s: 5.0e-05\n  elementwise_passes: 6\n"
)
OPERATOR_CSV = (
    "# inferplan profile\noperator,num_tokens,context_tokens,time_s\nmlp,1,0,1e-5\n"
    "mlp,256,0,8e-5\nattn_decode,1,1024,2e-6\nattn_decode,64,1024,3e-5\n"
)
# Where a trace's clock starts: 0, Unix-epoch seconds and milliseconds, huge (rows keep their
# spacing at 1e15; at 1e17 and 1e300 they round onto a few instants).
EPOCH_OFFSETS = [0.0, 1.7e9, 1.7e12, 1e15, 1e17, 1e300]


def _time(offset: float, time: float) -> str:
    value = offset + time
    if value.is_integer() and value < 1e16:
        return str(int(value))
    return repr(value).replace("e+", "e")  # 1e300: one number for the mutations


def trace_csv(offset_s: float) -> str:
    rows = [(0, 100, 20), (0.5, 2000, 64), (3.25, 512, 8), (9, 64, 128)]
    lines = [f"{_time(offset_s, t)},{i},{o}\n" for t, i, o in rows]
    return "arrival_s,input_tokens,output_tokens\n" + "".join(lines)


def trace_jsonl(offset_ms: float) -> str:
    rows = [(0, 600, 20, [1, 2]), (1500, 1100, 9, [1, 2, 3]), (7000, 40, 50, [7])]
    return "".join(
        f'{{"timestamp": {_time(offset_ms, t)}, "input_length": {i}, "output_length": {o}, '
        f'"hash_ids": {h}}}\n'
        for t, i, o, h in rows
    )


RESULT_JSON = (
    '{"completed": 12, "total_input_tokens": 6144, "total_output_tokens": 384,\n'
    ' "request_rate": 8.0, "burstiness": 1.0, "max_concurrency": null,\n'
    ' "output_throughput": 900.0, "mean_ttft_ms": 40.0, "mean_tpot_ms": 9.0}\n'
)
RESULT_CSV = (
    "request_rate,input_len,output_len,num_prompts,max_concurrency,mean_tpot_ms\n"
    "4,512,32,12,,9.5\ninf,256,16,10,4,8.0\n"
)
BASES = {
    "config.json": TINY_CONFIG,
    "gpu.yaml": GPU_YAML,
    "calibration.yaml": CALIBRATION_YAML,
    "table.csv": OPERATOR_CSV,
    "trace.csv": trace_csv(0.0),
    "trace.jsonl": trace_jsonl(0.0),
    "result.json": RESULT_JSON,
    "result.csv": RESULT_CSV,
}
EXTREME_NUMBERS = [
    "0",
    "-1",
    "1e400",
    "inf",
    ".inf",
    "NaN",
    "Infinity",
    HUGE_INT,
    "2.5",
    str(2**63 - 1),
    "1e-320",
    "-0",
    "1e9",
    "1e300",  # a trace row at 1e300 s: a span beyond MAX_SPAN_S
    "1.7e9",  # Unix-epoch seconds
    "1e-300",  # a result file's request_rate
]
WRONG_TYPES = ['"abc"', "[1, 2]", "null", "true", "{}", '""']
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])")


def _replace_number(text: str, index: int, new: str) -> str:
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return text
    match = matches[index % len(matches)]
    return text[: match.start()] + new + text[match.end() :]


MUTATIONS: dict[str, Callable[[str, int, str], bytes | None]] = {
    "valid": lambda text, i, new: text.encode(),
    "bom": lambda text, i, new: b"\xef\xbb\xbf" + text.encode(),
    "not_utf8": lambda text, i, new: text.encode()[: i % len(text)] + b"\xff\xfe" + text.encode(),
    "utf16": lambda text, i, new: text.encode("utf-16"),
    "truncated": lambda text, i, new: text.encode()[: i % len(text)],
    "empty": lambda text, i, new: b"",
    "folder": lambda text, i, new: None,
    "deep": lambda text, i, new: ("[" * 5000 + "]" * 5000).encode(),
    "duplicate_line": lambda text, i, new: "".join(
        line + (line if n == i % len(text.splitlines()) else "")
        for n, line in enumerate(text.splitlines(keepends=True))
    ).encode(),
    "number": lambda text, i, new: _replace_number(text, i, new).encode(),
}
_counter = itertools.count()
ODD_PATHS = ["", " ", "a" * 5000, "x\0y", "/", "~", "a\nb", "ü.json", "-", "nope.yaml"]


@st.composite
def user_file(draw: st.DrawFn, folder: Path, kind: str, clean: bool = False) -> str:
    """A path to a file of ``kind`` (a key of BASES), valid or mutated once."""
    mutation = "valid" if clean else draw(st.sampled_from([*MUTATIONS, "number", "number"]))
    index = draw(st.integers(0, 10_000))
    new = draw(st.sampled_from(EXTREME_NUMBERS + WRONG_TYPES))
    base = BASES[kind]
    if kind in ("trace.csv", "trace.jsonl"):
        offset = draw(st.sampled_from(EPOCH_OFFSETS))
        base = trace_csv(offset) if kind == "trace.csv" else trace_jsonl(offset)
    content = MUTATIONS[mutation](base, index, new)
    path = folder / f"{next(_counter)}-{kind}"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The files' folder, also the working directory (a relative -o writes there)."""
    path = tmp_path_factory.mktemp("fuzz")
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(previous)


# ---- argv per command ------------------------------------------------------------------------

MODELS = ["Llama-3.1-8B", "Qwen3-30B-A3B", "gpt-oss-20b", "Mistral-7B-v0.1", "DeepSeek-V3"]
GPUS = ["h100", "h200", "a100", "l40s", "mi300x", "b200"]
DEPLOYMENT_FLAGS: dict[str, Value] = {
    "-tp": ints(1, 8),
    "-pp": ints(1, 4),
    "-dp": ints(1, 4),
    "--quantization": options("fp8", "int4", "bf16", "nvfp4", bad=("q3", "")),
    "--kv-cache-dtype": options("auto", "fp8", "int8", "fp16", bad=("x", "")),
    "--max-model-len": ints(256, 200_000),
    "--gpu-memory-utilization": floats(0.3, 1.0),
    "--max-num-batched-tokens": ints(256, 16_384),
    "--max-num-seqs": ints(1, 2048),
    "--block-size": mostly(choice("1", "8", "16", "32", "64", "128"), [*BAD_INTS, "7", "100"]),
    "--engine": options("vllm", "vllm", "sglang", "trtllm", bad=("tgi",)),
}


@st.composite
def flags(draw: st.DrawFn, table: dict[str, Value], clean: bool) -> list[str]:
    chosen = draw(st.lists(st.sampled_from(sorted(table)), unique=True, max_size=4))
    argv: list[str] = []
    for flag in chosen:
        argv += [flag, draw(table[flag].pick(clean))]
    return argv


@st.composite
def deployment(draw: st.DrawFn, folder: Path, clean: bool) -> list[str]:
    odd = st.sampled_from(["Llama-3.1-8B"] if clean else ODD_PATHS)
    model = draw(st.one_of(st.sampled_from(MODELS), user_file(folder, "config.json", clean), odd))
    gpu = draw(st.one_of(st.sampled_from(GPUS), user_file(folder, "gpu.yaml", clean)))
    argv = ["--model", model, "--gpu", gpu, *draw(flags(DEPLOYMENT_FLAGS, clean))]
    if draw(st.integers(0, 3)) == 0:
        argv.append("--enable-expert-parallel")
    if draw(st.integers(0, 5)) == 0:
        argv += ["--calibration", draw(user_file(folder, "calibration.yaml", clean))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--operator-table", draw(user_file(folder, "table.csv", clean))]
    if draw(st.booleans()):
        argv.append("--json")
    return argv


ROOFLINE_FLAGS = {
    "--batch-sizes": mostly(choice("1,8,64", "1", "256,512"), ["0", "-1,2", "", "a,b", HUGE_INT]),
    "--input-len": mostly(choice("128,1024", "4096"), ["0", "1e9", "1,,2", "x", "2**63"]),
    "--context-len": mostly(choice("1024", "512,8192"), ["-5", "", HUGE_INT]),
    "--moe-skew": floats(0, 5),
}


@st.composite
def workload_flags(draw: st.DrawFn, folder: Path, clean: bool) -> list[str]:
    names = options("random", "random", "reasoning", "servegen", "trace", bad=("sharegpt",))
    name = draw(names.pick(clean))
    num_prompts = draw(ints(1, 40).pick(clean))
    argv = ["--dataset-name", name, "--num-prompts", num_prompts]
    if name == "trace":
        bundled = options("azure_llm_2023_conv", "vidur_splitwise_conv", bad=tuple(ODD_PATHS))
        path = draw(
            st.one_of(
                user_file(folder, "trace.csv", clean),
                user_file(folder, "trace.jsonl", clean),
                bundled.pick(clean),
            )
        )
        argv += ["--dataset-path", path]
    if name == "trace":  # the trace gives the lengths
        rate = mostly(rates(num_prompts), ["0", "nan", "1e-320"])
        table: dict[str, Value] = {"--request-rate": rate}
        return argv + draw(flags(table, clean))
    table = {
        "--random-input-len": ints(1, 4096),
        "--random-output-len": ints(1, 256),
        "--random-range-ratio": floats(0, 0.99),
        "--request-rate": mostly(rates(num_prompts), [*BAD_FLOATS, "1e-100", "1e-9"]),
        "--burstiness": mostly(choice("0.01", "0.5", "1", "4", "inf"), BAD_FLOATS),
        "--seed": ints(0, 2**32),
    }
    return argv + draw(flags(table, clean))


SIMULATE_FLAGS = {
    "--scheduler": options("continuous", "static", "prefill-first", bad=("bogus",)),
    "--num-scheduler-steps": ints(1, 10),
    "--preemption-mode": options("recompute", "swap", bad=("drop",)),
    "--scheduling-policy": options("fcfs", "priority", "spf", bad=("x",)),
    "--max-concurrency": ints(1, 64),
    "--router": options("round_robin", "least_outstanding", bad=("x",)),
    "--metric-percentiles": mostly(choice("99", "50,90,99", "99.9", ""), ["150", "-1", "nan", "a"]),
    "--moe-skew": floats(0, 5),
    # Admission control (cli_admission.py): knobs without their policy must fail cleanly too.
    "--admission": options("reserve-none", "reserve-max", "quantile", "token-budget", bad=("x",)),
    "--admission-quantile": floats(0.01, 0.99),
    "--admission-headroom": floats(0, 0.5),
    "--on-exhaustion": options("queue", "reject", "truncate", "preempt", bad=("x",)),
    "--length-predictor": options("oracle", "class", "noisy", bad=("x",)),
    "--predictor-sigma": floats(0, 3),
    "--spf-aging-s": floats(0.001, 1e4),
}
GOODPUT = mostly(
    st.tuples(choice("ttft", "tpot", "e2el"), st.floats(0, 1e5)).map(lambda p: f"{p[0]}:{p[1]!r}"),
    ["foo:5", "ttft", "ttft:inf", "ttft:nan", "tpot:-1", ":", "e2el:1e400", "ttft:abc"],
)


@fuzz_settings(40)
@given(data=st.data(), clean=st.booleans())
def test_memory_keeps_the_contract(folder: Path, data: st.DataObject, clean: bool) -> None:
    check_contract(["memory", *data.draw(deployment(folder, clean))])


@fuzz_settings(30)
@given(data=st.data(), clean=st.booleans())
def test_roofline_keeps_the_contract(folder: Path, data: st.DataObject, clean: bool) -> None:
    argv = ["roofline", *data.draw(deployment(folder, clean))]
    argv += data.draw(flags(ROOFLINE_FLAGS, clean))
    if data.draw(st.booleans()):
        argv.append("--no-cuda-graphs")
    check_contract(argv)


@fuzz_settings(40)
@given(data=st.data(), clean=st.booleans())
def test_simulate_keeps_the_contract(folder: Path, data: st.DataObject, clean: bool) -> None:
    argv = ["simulate", *data.draw(deployment(folder, clean))]
    argv += data.draw(workload_flags(folder, clean))
    argv += data.draw(flags(SIMULATE_FLAGS, clean))
    for _ in range(data.draw(st.integers(0, 2))):
        argv += ["--goodput", data.draw(GOODPUT.pick(clean))]
    if "random" in argv and data.draw(st.integers(0, 3)) == 0:
        argv.append("--exact")  # exact stepping only on short random outputs (<= 256 tokens)
    check_contract(argv)


@fuzz_settings(12)
@given(data=st.data(), clean=st.booleans())
def test_calibrate_keeps_the_contract(folder: Path, data: st.DataObject, clean: bool) -> None:
    kind = data.draw(choice("result.json", "result.csv"))
    count = data.draw(st.integers(1, 2))
    results = [data.draw(user_file(folder, kind, clean)) for _ in range(count)]
    output = data.draw(
        Value(
            st.just(str(folder / f"{next(_counter)}-fitted.yaml")),
            [str(folder), str(folder / "absent" / "x.yaml"), "", " ", "a" * 5000, "x\0y"],
        ).pick(clean)
    )
    model = data.draw(choice("Llama-3.1-8B", "Qwen3-8B"))
    argv = ["calibrate", "--model", model, "--gpu", "h100", *results, "-o", output]
    table = {"-tp": ints(1, 2), "-pp": ints(1, 2), "--block-size": ints(8, 32)}
    argv += data.draw(flags(table, clean))
    if data.draw(st.booleans()):
        argv.append("--json")
    check_contract(argv)


@fuzz_settings(10)
@given(case=st.text(max_size=30))
def test_validate_refuses_unknown_cases(case: str) -> None:
    # Only unknown names: a real case simulates thousands of requests (not cheap).
    if case in {"trtllm-h100-llama70b", "mlperf-llama2-70b-server-h200"}:
        return
    assert check_contract(["validate", "--case", case, "--json"]) == 2


@fuzz_settings(10)
@given(data=st.data())
def test_profile_flags_are_checked_before_profiling(folder: Path, data: st.DataObject) -> None:
    # One bad flag in every draw, so that nothing is profiled (with or without PyTorch).
    bad = data.draw(
        choice("gpu-name-empty", "gpu-name-newline", "output-folder", "output-missing", "table")
    )
    name = {"gpu-name-empty": " ", "gpu-name-newline": "a\nb"}.get(bad, "lab-h100")
    output = {"output-folder": str(folder), "output-missing": str(folder / "no" / "p.csv")}.get(
        bad, str(folder / "p.csv")
    )
    argv = ["profile", "--model", "Llama-3.1-8B", "--gpu", "h100", "--gpu-name", name, "-o", output]
    if bad == "table":
        argv += ["--operator-table", data.draw(user_file(folder, "table.csv"))]
    argv += data.draw(flags({"-tp": ints(1, 2), "--max-model-len": ints(256, 4096)}, True))
    assert check_contract([*argv, "--tiny"]) == 2
