"""Every flag checked at the edge, before any work: ranges, cross-flag rules, engine rules, paths.

Owns the one validation layer between the user and the library (``docs/errors.md``):

- ``Bound``: a number's range with the name of its limit (``inferplan.limits``); ``bounded``
  makes a click parameter type of it, so a flag out of range fails while the command line is
  parsed, naming the flag. A plan file's reader can call ``Bound.check`` for the same rule.
- List flags (``--batch-sizes``, ``--metric-percentiles``, ``--goodput``) parsed and checked
  in full, so a bad percentile fails before the simulation, not after it.
- Engine rules: what the emulated engine itself refuses (vLLM's block sizes, a context above the
  model's, fewer batched tokens than sequences) is refused here with the engine's reason, and
  what it only warns about is a ``warning:`` line on stderr.
- Output paths (``-o``) checked for writability before a long fit or profile.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from inferplan.errors import InferplanError
from inferplan.limits import (
    MAX_DEVICES,
    MAX_LIST_VALUES,
    MAX_SIMULATED_REPLICAS,
    MAX_SLO_MS,
    MAX_TOKENS,
)
from inferplan.metrics.latency import SLO_METRICS
from inferplan.specs.model import ModelSpec
from inferplan.textfile import path_is_dir

# vLLM 0.11 ``vllm/config/cache.py``: ``BlockSize = Literal[1, 8, 16, 32, 64, 128]``.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Bound:
    """``low <= value <= high`` (``low_open``/``high_open``: strict); ``limit`` names the bound
    that is not physical but a sanity limit (an ``inferplan.limits`` constant)."""

    low: float
    high: float
    is_int: bool = True
    low_open: bool = False
    high_open: bool = False
    limit: str = ""

    def describe(self) -> str:
        low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        kind = "an integer" if self.is_int else "a number"
        limit = f" ({self.limit})" if self.limit else ""
        if math.isinf(self.high):
            return f"{kind} {low}, or inf{limit}"
        shown = f"{int(self.high):,}" if self.is_int else f"{self.high:g}"
        high = f"< {shown}" if self.high_open else f"<= {shown}"
        return f"{kind} {low} and {high}{limit}"

    def check(self, label: str, value: float) -> float:
        """``value`` if in range, else an ``InferplanError`` starting ``label:``."""
        above_low = value > self.low if self.low_open else value >= self.low
        below_high = value < self.high if self.high_open else value <= self.high
        if not (above_low and below_high):  # NaN fails both
            raise InferplanError(f"{label}: {value!r} is out of range; expected {self.describe()}")
        return value


class _BoundedType(click.ParamType):
    def __init__(self, bound: Bound) -> None:
        self.bound = bound
        self.name = "integer" if bound.is_int else "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number: float = value
        else:
            text = str(value).strip()
            try:
                number = int(text) if self.bound.is_int else float(text)
            except ValueError:
                kind = "integer" if self.bound.is_int else "number"
                self.fail(f"{value!r} is not a valid {kind}.", param, ctx)
        above_low = number > self.bound.low if self.bound.low_open else number >= self.bound.low
        below_high = number < self.bound.high if self.bound.high_open else number <= self.bound.high
        if not (above_low and below_high):
            self.fail(f"{value!r} is out of range; expected {self.bound.describe()}", param, ctx)
        return number


class _OrAutoType(click.ParamType):
    """``auto`` (None: the command decides) or a value of another parameter type."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        self.name = f"auto|{inner.name}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
            return None
        try:
            return self.inner.convert(value, param, ctx)
        except click.BadParameter as error:
            self.fail(f"{error.message} (or auto)", param, ctx)


def or_auto(inner: click.ParamType) -> click.ParamType:
    """A click parameter type for ``auto`` (given as None) or a value of ``inner``."""
    return _OrAutoType(inner)


def bounded(
    low: float,
    high: float,
    *,
    is_int: bool = True,
    low_open: bool = False,
    high_open: bool = False,
    limit: str = "",
) -> click.ParamType:
    """A click parameter type for a number in a ``Bound``."""
    return _BoundedType(Bound(low, high, is_int, low_open, high_open, limit))


def _split(flag: str, text: str) -> list[str]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    if len(items) > MAX_LIST_VALUES:
        raise InferplanError(
            f"{flag}: {len(items)} values; at most {MAX_LIST_VALUES} (MAX_LIST_VALUES)"
        )
    return items


POSITIVE_INT = Bound(1, MAX_TOKENS, limit="MAX_TOKENS")


def int_list(flag: str, text: str, bound: Bound = POSITIVE_INT) -> list[int]:
    """Comma-separated integers, each in ``bound``; at least one."""
    try:
        values = [int(v) for v in _split(flag, text)]
    except ValueError:
        raise InferplanError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values:
        raise InferplanError(f"{flag}: expected at least one integer, got {text!r}")
    for value in values:
        bound.check(flag, value)
    return values


def percentile_list(flag: str, text: str) -> list[float]:
    """Comma-separated percentiles in [0, 100] (vLLM's ``--metric-percentiles``)."""
    try:
        values = [float(v) for v in _split(flag, text)]
    except ValueError:
        raise InferplanError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    for value in values:
        Bound(0, 100, is_int=False).check(flag, value)
    return values


def goodput_slo(pairs: tuple[str, ...]) -> dict[str, float] | None:
    """``--goodput ttft:500 --goodput tpot:50`` -> ``{"ttft": 500.0, "tpot": 50.0}``; each metric
    one of vLLM's, once, with a finite number of ms."""
    if not pairs:
        return None
    out: dict[str, float] = {}
    bound = Bound(0, MAX_SLO_MS, is_int=False, limit="MAX_SLO_MS")
    for pair in pairs:
        key, sep, value = pair.partition(":")
        key = key.strip()
        if not sep:
            raise InferplanError(f"--goodput: expected metric:ms (e.g. ttft:500), got {pair!r}")
        if key not in SLO_METRICS:
            raise InferplanError(
                f"--goodput: unknown metric {key!r} in {pair!r}; valid: {', '.join(SLO_METRICS)}"
            )
        if key in out:
            raise InferplanError(f"--goodput: {key} is given twice")
        try:
            number = float(value)
        except ValueError:
            raise InferplanError(f"--goodput: {pair!r}: {value!r} is not a number of ms") from None
        out[key] = bound.check(f"--goodput {key}", number)
    return out


def check_name(flag: str, value: str | None) -> None:
    """A name or path flag, when given, is one non-empty line."""
    if value is not None and (not value.strip() or "\n" in value or "\0" in value):
        raise InferplanError(f"{flag}: expected a non-empty, one-line name or path, got {value!r}")


def check_output_path(flag: str, path: str) -> Path:
    """An output file that can be written, checked before any work (a fit, a profile)."""
    check_name(flag, path)
    target = Path(path)
    parent = target.parent
    if path_is_dir(target):
        raise InferplanError(f"{flag}: {path} is a folder; give a file name")
    if not path_is_dir(parent):
        raise InferplanError(f"{flag}: folder {parent} does not exist")
    try:
        writable = os.access(target, os.W_OK) if target.exists() else os.access(parent, os.W_OK)
    except (OSError, ValueError):
        writable = False
    if not writable:
        raise InferplanError(f"{flag}: cannot write {path} (no permission, or not a valid path)")
    return target


def check_devices(tp: int, pp: int, dp: int) -> None:
    """The deployment's devices, tp x pp x dp, at most MAX_DEVICES."""
    if tp * pp * dp > MAX_DEVICES:
        raise InferplanError(
            f"-tp {tp} x -pp {pp} x -dp {dp} = {tp * pp * dp:,} devices; at most "
            f"{MAX_DEVICES:,} (MAX_DEVICES)"
        )


def check_replicas(num_replicas: int) -> None:
    """simulate steps every replica: at most MAX_SIMULATED_REPLICAS of them."""
    if num_replicas > MAX_SIMULATED_REPLICAS:
        raise InferplanError(
            f"--data-parallel-size: {num_replicas:,} replicas; simulate steps at most "
            f"{MAX_SIMULATED_REPLICAS:,} (MAX_SIMULATED_REPLICAS); simulate one replica's share "
            "of the traffic instead"
        )


def check_prefill_first_budget(scheduler: str, budget_tokens: int, max_model_len: int) -> None:
    """vLLM V0 without chunked prefill refuses a token budget below max_model_len (a prompt must
    fit one step); ``--scheduler prefill-first`` emulates it, so the same rule holds."""
    if scheduler == "prefill-first" and budget_tokens < max_model_len:
        raise InferplanError(
            f"--scheduler prefill-first: --max-num-batched-tokens {budget_tokens} is below "
            f"--max-model-len {max_model_len} (given or defaults); vLLM V0 without chunked "
            "prefill refuses it: raise --max-num-batched-tokens or lower --max-model-len"
        )


def warn(message: str) -> None:
    """A ``warning:`` line on stderr, where the emulated engine would only warn."""
    sys.stderr.write(f"warning: {message}\n")


def check_engine_rules(
    spec: ModelSpec,
    engine: str,
    *,
    max_model_len: int | None,
    block_size: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> None:
    """What the emulated engine refuses at start-up, refused with its reason (user values only;
    the engines' own defaults always pass)."""
    if engine == "vllm" and block_size is not None and block_size not in VLLM_BLOCK_SIZES:
        valid = ", ".join(map(str, VLLM_BLOCK_SIZES))
        raise InferplanError(f"--block-size {block_size}: vLLM accepts {valid}")
    model_len = spec.max_position_embeddings
    if max_model_len is not None and max_model_len > model_len:
        reason = (
            f"--max-model-len {max_model_len} is above the {model_len} positions of {spec.name} "
            "(max_position_embeddings)"
        )
        if engine == "trtllm":
            warn(f"{reason}; TensorRT-LLM accepts it, the model was not trained that long")
        else:
            raise InferplanError(
                f"{reason}; {engine} refuses it (vLLM: VLLM_ALLOW_LONG_MAX_MODEL_LEN, SGLang: "
                "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN override it)"
            )
    if engine == "vllm" and max_num_batched_tokens < max_num_seqs:
        raise InferplanError(
            f"--max-num-seqs {max_num_seqs} is above --max-num-batched-tokens "
            f"{max_num_batched_tokens}; vLLM requires max_num_batched_tokens >= max_num_seqs"
        )
