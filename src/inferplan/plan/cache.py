"""An embedded SQLite cache of evaluations, so an interrupted or repeated search resumes.

The key is a SHA-256 of everything an evaluation depends on: the replica configuration, the
traffic (classes, rates, lengths, SLOs, the load scale), the search's simulation settings, the
model (its parsed spec, i.e. its config.json), the GPU's figures and efficiency constants, and
inferplan itself: its version and a hash of its code and constants files (every ``.py`` and
``.yaml`` of the package), so a refit or a changed mechanism never answers from evaluations
made before it. Prices, the API and the daily profile's shape (beyond its peak) are not in
it: changing them re-prices cached evaluations without simulating again. Writes happen in the
main process only, one transaction per evaluation, so a killed search loses at most the
evaluations in flight.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from functools import cache
from pathlib import Path
from typing import Any

from inferplan import __version__
from inferplan.errors import InferplanError
from inferplan.perf.efficiency import efficiency_for
from inferplan.plan.capacity import SearchContext
from inferplan.plan.space import ReplicaConfig
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu


@cache
def code_version() -> str:
    """A short hash of the package's code and constants (every ``.py`` and ``.yaml`` file under
    it, by relative path and content): what predicts an evaluation besides its inputs."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@cache
def model_version(name: str) -> str:
    """A short hash of the parsed model spec: a changed config.json changes it."""
    return hashlib.sha256(repr(load_model(name)).encode()).hexdigest()[:16]


@cache
def _gpu_version(name: str) -> str:
    gpu = load_gpu(name)
    return hashlib.sha256(repr((gpu, efficiency_for(gpu))).encode()).hexdigest()[:16]


def context_fingerprint(ctx: SearchContext) -> str:
    req = ctx.request
    settings = req.search.model_dump(exclude={"batch_size", "pareto_max_cost_ratio"})
    data = {
        "inferplan": __version__,
        "code": code_version(),
        "model": req.model,
        "model_version": model_version(req.model),
        "traffic": [c.model_dump(mode="json", by_alias=True) for c in req.traffic],
        "load_scale": ctx.load_scale,
        "max_model_len": ctx.max_model_len,
        "gpu_memory_utilization": req.memory_fraction,
        "search": settings,
    }
    if "trtllm" in req.engines:  # its runtime's costs (other requests keep their keys)
        data["trtllm_runtime"] = req.trtllm_runtime or "trtllm-serve"
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def evaluation_key(fingerprint: str, cfg: ReplicaConfig, task: str) -> str:
    data = {
        "context": fingerprint,
        "config": cfg.to_dict(),
        "gpu": _gpu_version(cfg.gpu),
        "task": task,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class EvaluationCache:
    """``get``/``put`` of JSON evaluations by key; ``path`` None keeps nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self.num_hits = 0

    def __enter__(self) -> EvaluationCache:
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path)
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS evaluations (key TEXT PRIMARY KEY, value TEXT)"
                )
            except (sqlite3.Error, OSError) as err:
                raise InferplanError(f"--cache {self.path}: cannot open ({err})") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def get(self, key: str) -> dict[str, Any] | None:
        if self._db is None:
            return None
        row = self._db.execute("SELECT value FROM evaluations WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        self.num_hits += 1
        value: dict[str, Any] = json.loads(row[0])
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        if self._db is None:
            return
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO evaluations (key, value) VALUES (?, ?)",
                (key, json.dumps(value)),  # key order kept: output is byte-identical
            )
