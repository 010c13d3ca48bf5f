"""ServeGen length distributions: pooling a ServeGen folder, the bundled DeepSeek-R1 pool, sampling.

Owns the reader of a ServeGen data folder (alibaba/ServeGen, arXiv 2505.09999; the layout of its
``data/<category>/<model>/`` folders), the pooling rule, the compact JSON file it is bundled as,
and ``sample_servegen``.

A ServeGen folder is not a per-request trace. For each client ``i`` it holds
``chunk-<i>-trace.csv`` (no header; one row per 600-s window: window start s, mean rate req/s,
inter-arrival CV, distribution family, two parameters) and ``chunk-<i>-dataset.json`` (keys are
window starts in s, 6 hours apart; each holds ``input_tokens``, ``output_tokens`` and, for
reasoning models, ``reason_ratio`` pmfs, stored as strings of Python dicts ``{value: prob}``).

Pooling (the rule behind the published pooled statistics): each client's pmfs for a
dataset window are weighted by the client's expected requests in that window, the sum of
rate x 600 s over its 10-minute rows from that window's start to the next, then all are summed.

Assumption: ServeGen publishes the input and output marginals only, not their joint law, so
``sample_servegen`` draws a request's input and output lengths independently.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from inferplan.errors import InferplanError
from inferplan.limits import MAX_TOKENS
from inferplan.textfile import parse_json, path_is_dir, read_user_text
from inferplan.workload.fields import shown_text
from inferplan.workload.pmf import Pmf, compact_token_pmf, make_pmf
from inferplan.workload.request import FloatArray, IntArray
from inferplan.workload.synthetic import Seed, make_rng

SERVEGEN_ROW_S = 600.0  # each chunk-<i>-trace.csv row covers 10 minutes
BUNDLED_SERVEGEN = Path(__file__).parent / "data" / "servegen_deepseek_r1_pooled.json"
_FIELDS = ("input_tokens", "output_tokens", "reason_ratio")
_TRACE_NAME = re.compile(r"chunk-(\d+)-trace\.csv")


@dataclass(frozen=True)
class ServegenDistribution:
    """Pooled length pmfs of one ServeGen folder (``reason_ratio`` only for reasoning data)."""

    input_tokens: Pmf
    output_tokens: Pmf
    reason_ratio: Pmf | None
    num_clients: int
    expected_requests: float  # requests the folder's rate rows add up to
    source: str


def build_servegen_distribution(folder: str | Path) -> ServegenDistribution:
    """Pool every client's window pmfs in a ServeGen folder, weighted by expected requests."""
    folder = Path(folder)
    parts: dict[str, tuple[list[FloatArray], list[FloatArray]]] = {f: ([], []) for f in _FIELDS}
    total_requests = 0.0
    clients = _client_files(folder)
    for trace_path, dataset_path in clients:
        starts_s, rates_req_s = _read_rate_rows(trace_path)
        text = read_user_text(dataset_path, "ServeGen")
        windows = _parse_json(dataset_path, text)
        for key, weight in _window_weights(dataset_path, text, windows, starts_s, rates_req_s):
            total_requests += weight
            for name, (values, probabilities) in _window_pmfs(dataset_path, text, windows, key):
                parts[name][0].append(values)
                parts[name][1].append(probabilities * weight)
    if total_requests <= 0 or not parts["input_tokens"][0] or not parts["output_tokens"][0]:
        raise InferplanError(f"{folder}: no client has traffic with length data; nothing to pool")
    pooled = {
        name: make_pmf(np.concatenate(values), np.concatenate(weights))
        for name, (values, weights) in parts.items()
        if values
    }
    return ServegenDistribution(
        input_tokens=pooled["input_tokens"],
        output_tokens=pooled["output_tokens"],
        reason_ratio=pooled.get("reason_ratio"),
        num_clients=len(clients),
        expected_requests=total_requests,
        source=str(folder),
    )


def _client_files(folder: Path) -> list[tuple[Path, Path]]:
    if not path_is_dir(folder):
        raise InferplanError(f"{folder}: not a folder; a ServeGen folder holds chunk-<i>-* files")
    ids = sorted(
        int(match.group(1))
        for path in folder.iterdir()
        if (match := _TRACE_NAME.fullmatch(path.name)) is not None
    )
    if not ids:
        raise InferplanError(
            f"{folder}: no chunk-<i>-trace.csv files; a ServeGen folder holds "
            "chunk-<i>-trace.csv and chunk-<i>-dataset.json pairs"
        )
    pairs = [(folder / f"chunk-{i}-trace.csv", folder / f"chunk-{i}-dataset.json") for i in ids]
    for trace_path, dataset_path in pairs:
        if not dataset_path.is_file():
            raise InferplanError(f"{dataset_path}: missing; {trace_path.name} needs its pair")
    return pairs


def _read_rate_rows(path: Path) -> tuple[FloatArray, FloatArray]:
    """(window start s, mean rate req/s) per row of a headerless ``chunk-<i>-trace.csv``."""
    starts_s: list[float] = []
    rates_req_s: list[float] = []
    reader = csv.reader(read_user_text(path, "ServeGen").splitlines())
    for row in reader:
        if not row or not "".join(row).strip():
            continue
        line = reader.line_num
        try:
            start_s, rate = float(row[0]), float(row[1])
        except (ValueError, IndexError):
            raise InferplanError(
                f"{path}:{line}: expected window start s, rate req/s, ...; "
                f"got {shown_text(','.join(row), 60)}"
            ) from None
        if not (math.isfinite(start_s) and math.isfinite(rate) and rate >= 0):
            raise InferplanError(f"{path}:{line}: rate must be a finite number >= 0, not {rate}")
        starts_s.append(start_s)
        rates_req_s.append(rate)
    return np.asarray(starts_s), np.asarray(rates_req_s)


def _parse_json(path: Path, text: str) -> dict[str, object]:
    windows = parse_json(text, str(path))
    if not isinstance(windows, dict) or not windows:
        raise InferplanError(f"{path}:1: expected an object keyed by window start (s)")
    return windows


def _line_of(text: str, needle: str, start: int = 0) -> tuple[int, int]:
    """(1-based line, offset) of the first ``needle`` at or after ``start``; line 1 if absent."""
    offset = text.find(needle, start)
    return (text.count("\n", 0, offset) + 1, offset) if offset >= 0 else (1, start)


def _window_weights(
    path: Path, text: str, windows: dict[str, object], starts_s: FloatArray, rates: FloatArray
) -> list[tuple[str, float]]:
    """(window key, expected requests) for each dataset window with traffic."""
    keyed: list[tuple[float, str]] = []
    for key in windows:
        try:
            keyed.append((float(key), key))
        except ValueError:
            line, _ = _line_of(text, json.dumps(key))
            raise InferplanError(f"{path}:{line}: key {key!r} is not a window start in s") from None
    keyed.sort()
    window_starts_s = np.asarray([start for start, _ in keyed])
    index = np.searchsorted(window_starts_s, starts_s, side="right") - 1
    requests = rates * SERVEGEN_ROW_S
    weights = np.bincount(index[index >= 0], weights=requests[index >= 0], minlength=len(keyed))
    return [(key, float(w)) for (_, key), w in zip(keyed, weights, strict=True) if w > 0]


def _window_pmfs(
    path: Path, text: str, windows: dict[str, object], key: str
) -> list[tuple[str, tuple[FloatArray, FloatArray]]]:
    """The window's non-empty pmfs as (field, (values, normalised probabilities))."""
    key_line, key_offset = _line_of(text, json.dumps(key))
    window = windows[key]
    if not isinstance(window, dict):
        raise InferplanError(f"{path}:{key_line}: window {key!r} is not an object")
    pmfs = []
    for name in _FIELDS:
        if name not in window:
            if name == "reason_ratio":
                continue
            raise InferplanError(f"{path}:{key_line}: window {key!r} has no {name!r}")
        line, _ = _line_of(text, json.dumps(name), key_offset)
        where = f"{path}:{line}: window {key!r} {name}"
        pair = _parse_pmf_text(window[name], where)
        if pair is not None and name != "reason_ratio":
            _check_token_values(pair[0], where)
        if pair is not None:
            pmfs.append((name, pair))
    return pmfs


def _parse_pmf_text(raw: object, where: str) -> tuple[FloatArray, FloatArray] | None:
    """A ``"{value: probability, ...}"`` string as arrays; ``None`` for an empty pmf."""
    try:
        table = ast.literal_eval(raw) if isinstance(raw, str) else raw
        if not isinstance(table, dict):
            raise TypeError
        values = np.fromiter(table.keys(), dtype=np.float64, count=len(table))
        probabilities = np.fromiter(table.values(), dtype=np.float64, count=len(table))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise InferplanError(f"{where}: not a {{value: probability}} table") from None
    if not len(table):
        return None
    is_valid = np.all(np.isfinite(values)) and np.all(np.isfinite(probabilities))
    if not is_valid or np.any(probabilities < 0) or probabilities.sum() <= 0:
        raise InferplanError(f"{where}: probabilities must be finite, >= 0 and not all 0")
    return values, probabilities / probabilities.sum()


def _check_token_values(values: FloatArray, where: str) -> None:
    """Token counts of a pmf lie in [1, MAX_TOKENS]; a 0 or negative length is refused, not
    clamped to 1 (it would hide a broken file)."""
    bad = values[(values < 1) | (values > MAX_TOKENS)]
    if len(bad):
        raise InferplanError(
            f"{where}: length {bad[0]:g} tokens; lengths must lie in [1, {MAX_TOKENS:,}]"
        )


def compact_distribution(distribution: ServegenDistribution) -> ServegenDistribution:
    """The same distribution with its token pmfs compacted (``pmf.compact_token_pmf``)."""
    return ServegenDistribution(
        input_tokens=compact_token_pmf(distribution.input_tokens),
        output_tokens=compact_token_pmf(distribution.output_tokens),
        reason_ratio=distribution.reason_ratio,
        num_clients=distribution.num_clients,
        expected_requests=distribution.expected_requests,
        source=distribution.source,
    )


def write_servegen_json(distribution: ServegenDistribution, path: str | Path) -> None:
    """Write the distribution as JSON, one top-level key per line (the bundled file's format)."""
    document: dict[str, object] = {
        "source": distribution.source,
        "num_clients": distribution.num_clients,
        "expected_requests": round(distribution.expected_requests, 3),
    }
    for name in _FIELDS:
        pmf = getattr(distribution, name)
        if pmf is not None:
            values = [int(v) if name != "reason_ratio" else float(v) for v in pmf.values]
            probabilities = [float(f"{p:.6g}") for p in pmf.probabilities]
            document[name] = {"values": values, "probabilities": probabilities}
    lines = [
        f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in document.items()
    ]
    Path(path).write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


def read_servegen_json(path: str | Path) -> ServegenDistribution:
    """Read a file written by ``write_servegen_json``."""
    path = Path(path)
    text = read_user_text(path, "ServeGen")
    document = _parse_json(path, text)
    pmfs: dict[str, Pmf] = {}
    for name in _FIELDS:
        line, _ = _line_of(text, json.dumps(name))
        entry = document.get(name)
        if entry is None and name == "reason_ratio":
            continue
        if not isinstance(entry, dict) or not {"values", "probabilities"} <= entry.keys():
            raise InferplanError(f"{path}:{line}: {name!r} needs 'values' and 'probabilities'")
        try:
            pmfs[name] = make_pmf(np.asarray(entry["values"]), np.asarray(entry["probabilities"]))
        except (InferplanError, ValueError, TypeError) as err:
            raise InferplanError(f"{path}:{line}: {name}: {err}") from None
        if name != "reason_ratio":
            _check_token_values(pmfs[name].values, f"{path}:{line}: {name}")
    source, num_clients = document.get("source"), document.get("num_clients")
    expected = document.get("expected_requests")
    return ServegenDistribution(
        input_tokens=pmfs["input_tokens"],
        output_tokens=pmfs["output_tokens"],
        reason_ratio=pmfs.get("reason_ratio"),
        num_clients=num_clients if isinstance(num_clients, int) else 0,
        expected_requests=float(expected) if isinstance(expected, int | float) else 0.0,
        source=str(source) if source is not None else str(path),
    )


def load_servegen(path: str | Path) -> ServegenDistribution:
    """A ServeGen folder (pooled here) or a JSON file written by ``write_servegen_json``."""
    path = Path(path)
    return build_servegen_distribution(path) if path_is_dir(path) else read_servegen_json(path)


@cache
def bundled_servegen() -> ServegenDistribution:
    """The bundled, compacted pool of ServeGen's DeepSeek-R1 reasoning data (73 clients, 24 h)."""
    return read_servegen_json(BUNDLED_SERVEGEN)


def sample_servegen(
    num_requests: int, rng: Seed, distribution: ServegenDistribution | None = None
) -> tuple[IntArray, IntArray]:
    """(input_tokens, output_tokens), drawn independently (see module doc), inputs first."""
    pool = distribution if distribution is not None else bundled_servegen()
    generator = make_rng(rng)
    input_tokens = pool.input_tokens.sample(num_requests, generator)
    output_tokens = pool.output_tokens.sample(num_requests, generator)
    return (
        np.maximum(np.rint(input_tokens), 1).astype(np.int64),
        np.maximum(np.rint(output_tokens), 1).astype(np.int64),
    )
