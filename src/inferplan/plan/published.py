"""Published measurements in one long table (``data/published.csv``): reading and grouping.

One CSV row is one published number (``data/published.md`` defines the columns). Rows that share
a configuration and a workload point form one *run*: a single prediction serves every metric of
it. Rows of one ``case_id`` form one *configuration*, the unit of cross-validation. A row the
simulator cannot reproduce (a GPU or a model that is not bundled, speculative decoding, an
unknown precision) becomes a ``Skipped`` with the reason, never silently dropped.

A user's own file in the same schema works the same way: ``inferplan validate --data FILE.csv``.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from inferplan.errors import InferplanError
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.textfile import read_user_text

REQUIRED_COLUMNS = (
    "case_id",
    "engine",
    "model",
    "gpu",
    "num_gpus",
    "tp",
    "weights_dtype",
    "scenario",
    "dataset",
    "input_len",
    "output_len",
    "metric",
    "value",
    "unit",
    "per",
)
OPTIONAL_COLUMNS = (
    "source",
    "engine_version",
    "pp",
    "ep",
    "attention_dp",
    "kv_cache_dtype",
    "input_len_mean",
    "output_len_mean",
    "num_requests",
    "request_rate",
    "max_concurrency",
    "ignore_eos",
    "settings",
    "note",
)
THROUGHPUT_METRICS = ("output_throughput", "total_token_throughput", "request_throughput")
LATENCY_METRICS = tuple(
    f"{m}_{s}" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "p99")
)
UNITS = {**{m: ("tok/s",) for m in THROUGHPUT_METRICS[:2]}, "request_throughput": ("req/s",)}
UNITS.update({m: ("ms",) for m in LATENCY_METRICS})
SCENARIOS = ("offline", "poisson", "concurrency")
WEIGHT_DTYPES = {"bf16": None, "fp16": "fp16", "fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}
ENGINES = {"tensorrt-llm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
# Accelerators the published table names but the catalog leaves out, and why (issue 11).
_UNCATALOGUED_GPUS = {
    "ascend_910b": (
        "GPU ascend_910b (Huawei Ascend 910B) is not in the catalog: no vendor datasheet with "
        "its HBM bandwidth and dense peaks per dtype was found, and its engine (vLLM-Ascend on "
        "CANN) has neither an emulation nor an efficiency family here"
    ),
}
# Published runs whose numbers are not of the stated configuration, by (case_id, dataset).
_COPIED = (
    "GPUStack's glm-4.5-air/h100.md 'Other Benchmark Cases' block repeats a100.md's numbers digit "
    "for digit and contradicts the page's own conclusion table (vLLM, 32K input: 6,435.97 total "
    "tok/s in the block, 20,732.85 in the table): not an H100 measurement"
)
_SUSPECT_RUNS = {
    ("gpustack-glm-4.5-air-h100-vllm-524a6f", "random"): _COPIED,
    ("gpustack-glm-4.5-air-h100-sglang-3473b2", "random"): _COPIED,
}
# Checkpoint name suffixes that keep the architecture (instruct tunes, refreshes, re-quantized).
_MODEL_SUFFIXES = ("-Instruct-2507-FP8", "-Instruct-2507", "-Instruct", "-FP8", "-0528")


@dataclass(frozen=True)
class PublishedRow:
    """One published number, with the columns the prediction needs."""

    line: int
    case_id: str
    engine: str
    engine_version: str
    model: str
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    ep: int | None
    attention_dp: bool
    weights_dtype: str
    kv_cache_dtype: str
    scenario: str
    dataset: str
    input_len: int | None  # requested lengths; empty for ShareGPT and unpublished ones
    output_len: int | None
    input_len_mean: float | None
    output_len_mean: float | None
    num_requests: int | None
    request_rate: float
    max_concurrency: int | None
    settings: dict[str, str]
    metric: str
    value: float
    per: str

    @property
    def family(self) -> str:
        return "throughput" if self.metric in THROUGHPUT_METRICS else "latency"

    @property
    def run_key(self) -> tuple[object, ...]:
        """Rows with the same key are one simulated run."""
        return (
            self.case_id,
            self.scenario,
            self.dataset,
            self.input_len,
            self.output_len,
            self.input_len_mean,
            self.output_len_mean,
            self.num_requests,
            self.request_rate,
            self.max_concurrency,
        )


@dataclass(frozen=True)
class Skipped:
    row: PublishedRow
    reason: str


class _Cells:
    """Typed cell access; every error names the file, the line and the column."""

    def __init__(self, cells: dict[str, str], where: str) -> None:
        self.cells = {k.strip().lower(): (v or "").strip() for k, v in cells.items() if k}
        self.where = where

    def text(self, column: str) -> str:
        return self.cells.get(column, "")

    def number(self, column: str, *, required: bool = False, integer: bool = False) -> float | None:
        raw = self.text(column)
        if not raw:
            if required:
                raise InferplanError(f"{self.where}: column {column!r}: empty, needs a number")
            return None
        if raw.lower() == "inf" and column == "request_rate":
            return math.inf
        try:
            value = float(raw)
        except ValueError:
            raise InferplanError(
                f"{self.where}: column {column!r}: {raw!r} is not a number"
            ) from None
        if not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
            kind = "a whole number >= 1" if integer else "a finite number > 0"
            raise InferplanError(f"{self.where}: column {column!r}: {raw!r}; valid: {kind}")
        return value

    def whole(self, column: str, default: int | None = None) -> int | None:
        value = self.number(column, integer=True)
        return default if value is None else int(value)


def _settings(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(";"):
        key, _, value = part.partition("=")
        if key.strip():
            out[key.strip()] = value.strip()
    return out


def _parse_row(cells: _Cells, line: int) -> PublishedRow:
    metric = cells.text("metric")
    if metric not in UNITS:
        valid = ", ".join(UNITS)
        raise InferplanError(f"{cells.where}: column 'metric': {metric!r}; valid: {valid}")
    unit = cells.text("unit")
    if unit not in UNITS[metric]:
        raise InferplanError(
            f"{cells.where}: column 'unit': {unit!r} for {metric}; valid: {UNITS[metric][0]}"
        )
    per = cells.text("per")
    if per not in ("system", "gpu"):
        raise InferplanError(f"{cells.where}: column 'per': {per!r}; valid: system, gpu")
    return PublishedRow(
        line=line,
        case_id=cells.text("case_id") or f"line-{line}",
        engine=cells.text("engine"),
        engine_version=cells.text("engine_version"),
        model=cells.text("model"),
        gpu=cells.text("gpu"),
        num_gpus=int(cells.number("num_gpus", required=True, integer=True) or 1),
        tp=int(cells.number("tp", required=True, integer=True) or 1),
        pp=cells.whole("pp", 1) or 1,
        ep=cells.whole("ep"),
        attention_dp=cells.text("attention_dp").lower() == "true",
        weights_dtype=cells.text("weights_dtype"),
        kv_cache_dtype=cells.text("kv_cache_dtype"),
        scenario=cells.text("scenario"),
        dataset=cells.text("dataset"),
        input_len=cells.whole("input_len"),
        output_len=cells.whole("output_len"),
        input_len_mean=cells.number("input_len_mean"),
        output_len_mean=cells.number("output_len_mean"),
        num_requests=cells.whole("num_requests"),
        request_rate=cells.number("request_rate") or math.inf,
        max_concurrency=cells.whole("max_concurrency"),
        settings=_settings(cells.text("settings")),
        metric=metric,
        value=float(cells.number("value", required=True) or 0.0),
        per=per,
    )


def parse_published(text: str, source: str) -> list[PublishedRow]:
    """Every row of a published-measurements table; bad input is one error naming the line."""
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in reader.fieldnames or []]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InferplanError(f"{source}:1: missing column(s) {', '.join(missing)}")
    unknown = [c for c in header if c and c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        valid = ", ".join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
        raise InferplanError(f"{source}:1: unknown column(s) {', '.join(unknown)}; valid: {valid}")
    rows = []
    for cells in reader:
        line = reader.line_num
        if not any((v or "").strip() for v in cells.values() if isinstance(v, str)):
            continue
        rows.append(_parse_row(_Cells(cells, f"{source}:{line}"), line))
    if not rows:
        raise InferplanError(f"{source}: no measurement rows")
    return rows


@cache
def bundled_published() -> tuple[PublishedRow, ...]:
    text = resources.files("inferplan.plan").joinpath("data/published.csv").read_text()
    return tuple(parse_published(text, "published.csv"))


def read_published(path: str | None) -> list[PublishedRow]:
    """The bundled table (``path`` None) or a user's file in the same schema."""
    if path is None:
        return list(bundled_published())
    return parse_published(read_user_text(Path(path), "--data"), path)


@cache
def bundled_model_name(hf_id: str) -> str | None:
    """The bundled config for a published checkpoint name, or None (a pure function of the
    name: cached, since every row of a run asks)."""
    name = hf_id.split("/")[-1]
    candidates = [name] + [name[: -len(s)] for s in _MODEL_SUFFIXES if name.endswith(s)]
    for candidate in candidates:
        try:
            return load_model(candidate).name
        except InferplanError:
            continue
    return None


def skip_reason(row: PublishedRow) -> str | None:
    """Why ``row`` cannot be simulated as published, or None."""
    if (row.case_id, row.dataset) in _SUSPECT_RUNS:
        return _SUSPECT_RUNS[(row.case_id, row.dataset)]
    if row.engine not in ENGINES:
        return f"engine {row.engine!r} is not emulated (valid: {', '.join(ENGINES)})"
    if row.scenario not in SCENARIOS:
        return f"scenario {row.scenario!r} is not simulated (valid: {', '.join(SCENARIOS)})"
    if bundled_model_name(row.model) is None:
        return f"model {row.model} has no bundled config"
    if row.gpu in _UNCATALOGUED_GPUS:
        return _UNCATALOGUED_GPUS[row.gpu]
    try:
        load_gpu(row.gpu)
    except InferplanError:
        return f"GPU {row.gpu} is not in the catalog"
    if row.weights_dtype not in WEIGHT_DTYPES:
        return f"weights {row.weights_dtype!r} not modelled"
    if any(k.startswith("speculative") for k in row.settings):
        return (
            "speculative decoding is not simulated by validate: simulate emulates vLLM v1's "
            "chain drafting, these rows draft trees (topk > 1) and do not state the acceptance "
            "(accept length), none is published for their draft model and dataset, and it is "
            "never fitted to them (docs/modeling.md section 15)"
        )
    if row.scenario == "concurrency" and row.max_concurrency is None:
        return "concurrency scenario without max_concurrency"
    if (row.input_len_mean is None and row.input_len is None) or (
        row.output_len_mean is None and row.output_len is None
    ):
        return "request lengths not published"
    return None
