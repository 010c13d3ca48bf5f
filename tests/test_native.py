"""The optional mypyc build (``inferplan/native.py``, ``scripts/compile_native.py``): the pure
switch, the stale-build fallback, and compiled == pure, byte for byte, where a build is loaded."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inferplan import native
from inferplan.engine.loop_order import AdvanceLog
from inferplan.memory.ownblocks import OwnBlocks
from inferplan.memory.prefixcache import PrefixCache
from inferplan.memory.radixcache import RadixCache
from inferplan.metrics.trace_log import StepTraceLog

PACKAGE = Path(native.__file__).parent
NAMES = sorted(native.module_name(rel) for rel in native.MODULES)

# One process runs these with the CLI and prints each JSON: vLLM v1 (own blocks), SGLang,
# TensorRT-LLM, exact mode, DP with a router, and a small pool that preempts.
_BASE = "simulate --model Llama-3.1-8B --gpu h200 --num-prompts 150 --request-rate 20 --json"
SCENARIOS = (
    _BASE,
    f"{_BASE} --engine sglang",
    f"{_BASE} --engine trtllm",
    f"{_BASE} --exact",
    f"{_BASE} -dp 2 --router least_outstanding",
    "simulate --model Llama-3.1-8B --gpu h100 --dataset-name reasoning --num-prompts 60 "
    "--request-rate 2 --max-model-len 40000 --gpu-memory-utilization 0.4 --json",
    f"{_BASE} -dp 2 --sim-workers 2",  # replicas apart: the workers pickle their runs back
)
_RUN_SCENARIOS = """
import contextlib, io, json, sys
from inferplan import native
from inferplan.cli import main
outputs = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args.split())
    outputs.append([code, out.getvalue()])
print(json.dumps({"mode": native.mode, "outputs": outputs}))
"""


def _in_subprocess(code: str, *args: str, pure: bool) -> str:
    env = {**os.environ, native.PURE_ENV: "1" if pure else "0"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def _manifest_of_sources() -> dict[str, object]:
    sums = {}
    for name in NAMES:
        source = native.source_path(PACKAGE, name)
        sums[name] = hashlib.sha256(source.read_bytes()).hexdigest()
    return {"python": sys.implementation.cache_tag, "modules": sums}


def test_pure_switch_loads_every_module_from_source() -> None:
    """INFERPLAN_PURE=1 loads the ``.py`` of every module the build compiles, whether or not
    extensions lie beside them."""
    code = (
        "import importlib, json; from inferplan import native; "
        "print(json.dumps([native.mode] + [importlib.import_module(n).__file__ for n in "
        f"{NAMES!r}]))"
    )
    mode, *files = json.loads(_in_subprocess(code, pure=True))
    assert mode in ("pure", "absent")
    assert files == [str(native.source_path(PACKAGE, name)) for name in NAMES]
    if native.mode == "compiled":  # and without the switch, the extensions
        mode, *files = json.loads(_in_subprocess(code, pure=False))
        assert mode == "compiled"
        assert all(f.endswith(".so") for f in files), files


def test_a_stale_source_runs_every_module_pure() -> None:
    """A module whose source differs from the one compiled, a manifest for another interpreter
    or another list of modules: the build is stale (all modules load from source)."""
    manifest = _manifest_of_sources()
    assert native.stale_modules(manifest, PACKAGE) == []
    modules = dict(manifest["modules"])  # type: ignore[call-overload]
    modules["inferplan.engine.replica"] = "0" * 64
    assert native.stale_modules({**manifest, "modules": modules}, PACKAGE) == [
        "inferplan.engine.replica"
    ]
    assert native.stale_modules({**manifest, "python": "cpython-0"}, PACKAGE) == NAMES
    del modules["inferplan.engine.replica"]
    assert native.stale_modules({**manifest, "modules": modules}, PACKAGE) == NAMES
    assert native.stale_modules(None, PACKAGE) == NAMES


def test_the_finder_returns_the_source() -> None:
    finder = native._PureFinder(PACKAGE)
    spec = finder.find_spec("inferplan.engine.replica")
    assert spec is not None and spec.origin == str(PACKAGE / "engine" / "replica.py")
    assert finder.find_spec("inferplan.engine") is None  # a package: the default finder's
    assert finder.find_spec("numpy") is None


@pytest.mark.skipif(native.mode != "compiled", reason="no compiled build loaded")
def test_compiled_prints_the_same_bytes_as_pure() -> None:
    """The reference is pure Python: each scenario's JSON, compiled and pure, byte for byte."""
    args = json.dumps(SCENARIOS)
    compiled = json.loads(_in_subprocess(_RUN_SCENARIOS, args, pure=False))
    pure = json.loads(_in_subprocess(_RUN_SCENARIOS, args, pure=True))
    assert (compiled["mode"], pure["mode"]) == ("compiled", "pure")
    assert [code for code, _ in pure["outputs"]] == [0] * len(SCENARIOS)
    for scenario, got, want in zip(SCENARIOS, compiled["outputs"], pure["outputs"], strict=True):
        assert got == want, scenario


def test_what_the_workers_send_back_unpickles_with_its_state() -> None:
    """``engine/apart.py``'s workers pickle their KV trace, prefix cache and advance log back;
    compiled, those are native instances, which unpickle only through ``__reduce__``."""
    trace = StepTraceLog(100, max_points=2)
    for i in range(9):
        trace.record(float(i), 7 * i % 11)
    trace.settle()  # as a worker does before it returns
    own = OwnBlocks(np.array([3, 2]), 2)
    own.register(0, 3)
    own.release(0)
    shared = PrefixCache(((1, 2, 3), (1, 2, 4)), 1)
    radix = RadixCache(((1, 2, 3), (1, 2, 4)), 1)
    shared.acquire(0, 0)
    shared.register(0, 3)
    shared.release(0)
    radix.acquire(0, 0)
    radix.insert(0, 3)
    radix.release(0)
    for original in (trace, own, shared, radix):
        back = pickle.loads(pickle.dumps(original))
        assert type(back) is type(original)
        assert back.__getstate__() == original.__getstate__()
    assert pickle.loads(pickle.dumps(trace)).summary() == trace.summary()
    assert pickle.loads(pickle.dumps(own)).lookup(0, 5) == (3, 0)
    assert pickle.loads(pickle.dumps(radix)).lookup(1, 3) == radix.lookup(1, 3) == (2, 0)
    log = AdvanceLog([0.0, 1.5], [1.0, 2.0], [True, False], [1, 2])
    back = pickle.loads(pickle.dumps(log))
    for name in ("start_s", "end_s", "has_work", "num_routed"):
        assert np.array_equal(getattr(back, name), getattr(log, name)), name
