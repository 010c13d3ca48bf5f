"""The plan request file: the model, the traffic classes and their SLOs, the hardware candidates
with their prices, the knobs to search, and the API to compare with.

Owns the schema (pydantic, at the I/O edge) and ``load_request``, which turns any mistake into
one line ``FILE:LINE: KEY: what is wrong; what would be valid`` (exit 2). Unknown keys are
refused, so a typo never silently falls back to a default.

Defaults (each one a field the user can set; see ``docs/planning.md``):

- ``kv_cache_dtype: [auto]`` (the model's dtype), ``engines: [vllm]``;
- ``trtllm_runtime: trtllm-serve`` with engine ``trtllm`` (``trtllm-bench``: the offline
  benchmark's costs, ``plan/trtllm_runtime.py``);
- ``parallelism``: TP in {1, 2, 4, 8}, PP in {1, 2}, expert parallelism tried both ways for MoE
  models; TP stays inside one node (``gpus_per_node``, 8, an HGX/DGX board) unless
  ``allow_cross_node_tp`` is set;
- ``max_num_seqs: [64, 128, 256, 512]``, ``max_num_batched_tokens: [2048, 8192]``;
- ``daily_profile``: 24 hourly rate multipliers (default flat 1.0); the fleet is sized for the
  busiest hour times ``headroom`` (default 1.0) and paid for all 24 hours;
- ``max_search_time_s: 300``; ``search`` sizes the short and the fleet simulations.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inferplan.errors import InferplanError
from inferplan.textfile import read_user_text

SPEC_METHODS = ("eagle", "eagle3", "mtp")  # drafters inside the target (perf/speculative.py)
SLO_KEY = re.compile(r"^(ttft|tpot|itl|e2el)_p(\d+(?:\.\d+)?)_(ms|s)$")
DATASETS = ("reasoning", "servegen", "trace")
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Lengths(_Strict):
    """Lognormal token lengths with this (uncapped) mean, log-space sigma and cap."""

    mean: float = Field(ge=1, allow_inf_nan=False)
    sigma: float = Field(default=0.0, ge=0, le=10)
    max: int = Field(default=32768, ge=1)


class Goodput(_Strict):
    """At least ``min_fraction`` of requests within every given limit (vLLM ``--goodput``)."""

    min_fraction: float = Field(gt=0, le=1)
    ttft_ms: Positive | None = None
    tpot_ms: Positive | None = None
    e2el_ms: Positive | None = None


class TrafficClass(_Strict):
    name: str = Field(alias="class", min_length=1)
    request_rate: Positive
    burstiness: Positive = 1.0
    input_len: Lengths | None = None
    output_len: Lengths | None = None
    dataset: str | None = None
    dataset_path: str | None = None
    slo: dict[str, Any]

    @field_validator("input_len", "output_len", mode="before")
    @classmethod
    def _plain_number(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"mean": value, "sigma": 0, "max": max(1, math.ceil(value))}
        return value

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str | None) -> str | None:
        if value is not None and value not in DATASETS:
            raise ValueError(f"unknown dataset {value!r}; valid: {', '.join(DATASETS)}")
        return value

    @field_validator("slo")
    @classmethod
    def _slo_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("give at least one target, e.g. ttft_p99_ms: 2000")
        for key, target in value.items():
            if key == "goodput":
                Goodput.model_validate(target)
            elif not SLO_KEY.match(key):
                raise ValueError(
                    f"unknown target {key!r}; valid: <ttft|tpot|itl|e2el>_p<NN>_<ms|s> "
                    "(e.g. ttft_p99_ms, e2el_p99_s) or goodput"
                )
            elif isinstance(target, bool) or not isinstance(target, int | float) or target <= 0:
                raise ValueError(f"{key}: expected a number > 0, got {target!r}")
        return value


class Hardware(_Strict):
    gpu: str = Field(min_length=1)
    price_per_gpu_hour: Positive
    max_gpus: int = Field(default=64, ge=1)
    gpus_per_node: int = Field(default=8, ge=1)


class Api(_Strict):
    input_per_million_usd: float = Field(ge=0, allow_inf_nan=False)
    output_per_million_usd: float = Field(ge=0, allow_inf_nan=False)


class ParallelismSpace(_Strict):
    tensor_parallel_size: list[Annotated[int, Field(ge=1)]] = [1, 2, 4, 8]
    pipeline_parallel_size: list[Annotated[int, Field(ge=1)]] = [1, 2]
    expert_parallel: list[bool] | None = None  # None: [False, True] for MoE, [False] else
    allow_cross_node_tp: bool = False


class SearchSettings(_Strict):
    seed: int = Field(default=0, ge=0)
    window_s: Positive = 300.0  # seconds of arrivals in a one-replica probe
    fleet_window_s: Positive = 600.0  # seconds of arrivals in the fleet's confirmation
    min_class_requests: int = Field(default=30, ge=5)  # per class, in every simulation
    max_requests: int = Field(default=20000, ge=100)  # per simulation (the window shrinks)
    batch_size: int = Field(default=8, ge=1)  # configurations evaluated between prunings
    early_stop_fraction: float = Field(default=0.34, gt=0, le=1)
    clearly_lost_ratio: float = Field(default=2.0, gt=1)
    pareto_max_cost_ratio: float = Field(default=1.5, ge=1)
    router: str = "round_robin"


class Speculation(_Strict):
    """Speculative decoding on every candidate (vLLM v1; ``engine/speculation.py``): the
    drafter, ``k`` drafts per step, and the acceptance per drafted token or the mean tokens a
    step emits (vLLM's mean acceptance length, bonus token included)."""

    method: str
    num_speculative_tokens: int = Field(ge=1, le=32)
    acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    accept_length: float | None = Field(default=None, ge=1, allow_inf_nan=False)

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        if value not in SPEC_METHODS:
            raise ValueError(
                f"unknown method {value!r}; valid: {', '.join(SPEC_METHODS)} (a separate draft "
                "model: inferplan simulate --speculative-method draft)"
            )
        return value

    @model_validator(mode="after")
    def _one_acceptance(self) -> Speculation:
        if (self.acceptance_rate is None) == (self.accept_length is None):
            raise ValueError("give exactly one of acceptance_rate (0-1) or accept_length")
        length = self.accept_length
        if length is not None and length > self.num_speculative_tokens + 1:
            raise ValueError(
                f"accept_length {length:g} exceeds num_speculative_tokens + 1 = "
                f"{self.num_speculative_tokens + 1}"
            )
        return self


class PlanRequest(_Strict):
    model: str = Field(min_length=1)
    traffic: list[TrafficClass] = Field(min_length=1)
    hardware: list[Hardware] = Field(min_length=1)
    quantization: list[str] = Field(default=["bf16"], min_length=1)
    kv_cache_dtype: list[str] = Field(default=["auto"], min_length=1)
    engines: list[str] = Field(default=["vllm"], min_length=1)
    parallelism: ParallelismSpace = ParallelismSpace()
    max_num_seqs: list[Annotated[int, Field(ge=1)]] = Field(
        default=[64, 128, 256, 512], min_length=1
    )
    max_num_batched_tokens: list[Annotated[int, Field(ge=1)]] = Field(
        default=[2048, 8192], min_length=1
    )
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    daily_profile: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default=[1.0] * 24, min_length=24, max_length=24
    )
    headroom: float = Field(default=1.0, ge=1, le=10)
    max_search_time_s: Positive = 300.0
    api: Api | None = None
    search: SearchSettings = SearchSettings()
    # engine trtllm as trtllm-serve runs it (None: the default) or trtllm-bench
    trtllm_runtime: Literal["trtllm-serve", "trtllm-bench"] | None = None
    speculative: Speculation | None = None  # None: no speculative decoding

    @field_validator("daily_profile")
    @classmethod
    def _some_traffic(cls, value: list[float]) -> list[float]:
        if max(value) <= 0:
            raise ValueError("at least one hour must carry traffic (a multiplier > 0)")
        return value

    @property
    def peak_multiplier(self) -> float:
        return max(self.daily_profile)

    @property
    def memory_fraction(self) -> float | None:
        """``gpu_memory_utilization`` where the request gives it (each engine's memory flag:
        vLLM's utilization, TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``, SGLang's
        ``mem_fraction_static``), else None: each engine's own default."""
        if "gpu_memory_utilization" in self.model_fields_set:
            return self.gpu_memory_utilization
        return None


def parse_request(data: Any, source: str, text: str = "") -> PlanRequest:
    """Validate a parsed YAML document; errors name ``source``, the line and the key."""
    if not isinstance(data, dict):
        raise InferplanError(f"{source}: expected a YAML mapping with model, traffic, hardware")
    try:
        request = PlanRequest.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = tuple(first["loc"])
        key = _key_text(loc)
        line = _line_of(text, loc)
        where = f"{source}:{line}" if line else source
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InferplanError(f"{where}: {key}: {message}") from None
    _check_classes(request, source)
    if request.trtllm_runtime is not None and "trtllm" not in request.engines:
        line = _line_of(text, ("trtllm_runtime",))
        where = f"{source}:{line}" if line else source
        raise InferplanError(
            f"{where}: trtllm_runtime: applies to engine trtllm only (engines: "
            f"{', '.join(request.engines)})"
        )
    if request.speculative is not None and set(request.engines) != {"vllm"}:
        raise InferplanError(
            f"{source}: speculative: emulated for vLLM v1 only; set engines: [vllm]"
        )
    return request


def _check_classes(request: PlanRequest, source: str) -> None:
    names = [c.name for c in request.traffic]
    if len(set(names)) != len(names):
        raise InferplanError(f"{source}: traffic: class names must be distinct, got {names}")
    for i, cls in enumerate(request.traffic):
        key = f"{source}: traffic[{i}]"
        has_lengths = cls.input_len is not None or cls.output_len is not None
        if cls.dataset is None and (cls.input_len is None or cls.output_len is None):
            raise InferplanError(
                f"{key}: give input_len and output_len ({{mean, sigma, max}}) or a dataset "
                f"({', '.join(DATASETS)})"
            )
        if cls.dataset is not None and has_lengths:
            raise InferplanError(f"{key}: give a dataset or input_len/output_len, not both")
        if (cls.dataset == "trace") != (cls.dataset_path is not None):
            raise InferplanError(f"{key}: dataset_path goes with dataset: trace (and only there)")


def load_request(path: Path) -> PlanRequest:
    """Read and validate a plan request file (YAML)."""
    text = read_user_text(path, "plan request")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InferplanError(f"{path}{line}: not valid YAML") from None
    request = parse_request(data, str(path), text)
    return _resolve_paths(request, path.parent)


def _resolve_paths(request: PlanRequest, folder: Path) -> PlanRequest:
    """Trace paths relative to the request file's folder (bundled names stay as they are)."""
    classes = []
    for cls in request.traffic:
        if cls.dataset_path is not None and (folder / cls.dataset_path).exists():
            cls = cls.model_copy(update={"dataset_path": str(folder / cls.dataset_path)})
        classes.append(cls)
    return request.model_copy(update={"traffic": classes})


def _key_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest node of ``loc`` that the YAML text has."""
    try:
        node: Any = yaml.compose(text) if text else None
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == part]
            if not match:
                break
            line, node = match[0][0].start_mark.line + 1, match[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def check_names(request: PlanRequest, source: str, text: str = "") -> None:
    """Model, GPUs, formats and engines must be ones inferplan knows (each error names its key)."""
    from inferplan.specs.catalog import load_model
    from inferplan.specs.dtypes import kv_format, weight_format
    from inferplan.specs.hardware import load_gpu

    checks: list[tuple[tuple[Any, ...], Any]] = [(("model",), lambda: load_model(request.model))]
    for i, hw in enumerate(request.hardware):
        checks.append((("hardware", i, "gpu"), lambda hw=hw: load_gpu(hw.gpu)))
    for i, name in enumerate(request.quantization):
        checks.append((("quantization", i), lambda name=name: weight_format(name)))
    for i, name in enumerate(request.kv_cache_dtype):
        checks.append(
            (("kv_cache_dtype", i), lambda name=name: kv_format(name, model_dtype="bf16"))
        )
    for i, name in enumerate(request.engines):
        checks.append((("engines", i), lambda name=name: _check_engine(name)))
    checks.append((("search", "router"), lambda: _check_router(request.search.router)))
    for loc, check in checks:
        try:
            check()
        except InferplanError as err:
            line = _line_of(text, loc)
            where = f"{source}:{line}" if line else source
            message = re.sub(r"^--[\w-]+: ", "", str(err))
            raise InferplanError(f"{where}: {_key_text(loc)}: {message}") from None


def _check_engine(name: str) -> None:
    from inferplan.engine.session import ENGINE_SCHEDULERS

    if name not in ENGINE_SCHEDULERS:
        raise InferplanError(
            f"engine {name!r}: its scheduler is not simulated yet; valid: "
            f"{', '.join(ENGINE_SCHEDULERS)}"
        )


def _check_router(name: str) -> None:
    from inferplan.engine.policies import ROUTERS

    if name not in ROUTERS:
        raise InferplanError(f"unknown router {name!r}; valid: {', '.join(ROUTERS)}")
