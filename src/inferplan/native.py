"""Whether the simulator runs its mypyc-compiled modules or the pure-Python ones.

``make compile`` (``scripts/compile_native.py``) compiles the engine's hot modules in place:
an extension beside each ``.py``, which Python's import system would prefer to the source even
after the source is edited. So the extensions load only while the manifest it writes
(``_native.json``: each compiled module's source SHA-256 and the interpreter's tag) matches the
sources on disk, all of them, and ``INFERPLAN_PURE`` is unset (or ``0``); otherwise a finder
first on ``sys.meta_path`` loads every ``inferplan`` module from its ``.py`` (all or none: compiled
modules call each other's classes directly, so a mix would hold two versions of a class), with
a one-line warning on stderr when the reason is a stale build. Without a manifest (never
compiled, no C compiler, a build under way or failed) the same finder runs, so no extension
ever loads. The pure modules are the reference: compiled and pure runs print the same bytes
(``tests/test_native.py``).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MANIFEST = Path(__file__).with_name("_native.json")
PURE_ENV = "INFERPLAN_PURE"

# The engine's event loop, replica, schedulers, stretches and the block pools and prefix caches
# it steps, and the step-time cache and metrics it calls per step; with every subclass of a class
# compiled here (an interpreted class cannot inherit from a compiled one). The classes that
# ``engine/apart.py``'s workers pickle back (``StepTrace``, the prefix caches, ``AdvanceLog``)
# define ``__reduce__``: a native instance unpickles only through its constructor. Pure:
# ``engine/running.py`` (it writes its columns through ``__setattr__`` and ``__dict__``) and
# ``engine/chainblocks.py`` (``TailBlocks.from_offsets``' ``cls.__new__(cls)`` stops mypyc).
MODULES = (
    "engine/admission.py",
    "engine/aging.py",
    "engine/chain.py",
    "engine/chainlinks.py",
    "engine/chunk_run.py",
    "engine/chunk_step.py",
    "engine/implicit.py",
    "engine/implicit_step.py",
    "engine/loop_order.py",
    "engine/offload.py",
    "engine/own_admission.py",
    "engine/ownchain.py",
    "engine/ownsteps.py",
    "engine/ownstretch.py",
    "engine/plain_admission.py",
    "engine/policies.py",
    "engine/preempt_step.py",
    "engine/prefill_first.py",
    "engine/prefix_admission.py",
    "engine/replica.py",
    "engine/reserving.py",
    "engine/routed_arrivals.py",
    "engine/schedulers.py",
    "engine/sglang.py",
    "engine/sglang_ranks.py",
    "engine/simulator.py",
    "engine/specstretch.py",
    "engine/speculation.py",
    "engine/stepshape.py",
    "engine/stream_intake.py",
    "engine/stretch.py",
    "engine/thrash.py",
    "engine/thrashrun.py",
    "engine/waiting_pass.py",
    "memory/blockpool.py",
    "memory/ownblocks.py",
    "memory/prefixcache.py",
    "memory/radixcache.py",
    "metrics/histogram.py",
    "metrics/itl_log.py",
    "metrics/steptrace.py",
    "metrics/trace_log.py",
    "perf/bounded_cache.py",
    "perf/oneoff.py",
    "perf/oneoff_tokens.py",
    "perf/step_seconds.py",
    "cluster/classpool_sim.py",
    "cluster/disagg.py",
)


# What ``install`` decided: "compiled", "pure" (INFERPLAN_PURE, or a stale build: a warning
# said so) or "absent" (never compiled, or a build that did not finish: no manifest).
mode = "absent"


def module_name(rel: str) -> str:
    """``engine/replica.py`` -> ``inferplan.engine.replica``."""
    return "inferplan." + rel.removesuffix(".py").replace("/", ".")


def source_path(package_dir: Path, name: str) -> Path:
    return package_dir.joinpath(*name.split(".")[1:]).with_suffix(".py")


def stale_modules(manifest: object, package_dir: Path) -> list[str]:
    """The compiled modules whose source differs from the one compiled (all of them when the
    manifest was written by another interpreter or for another list of modules)."""
    names = sorted(module_name(rel) for rel in MODULES)
    if not isinstance(manifest, dict) or manifest.get("python") != sys.implementation.cache_tag:
        return names
    modules = manifest.get("modules")
    if not isinstance(modules, dict) or sorted(modules) != names:
        return names
    stale = []
    for name in names:
        path = source_path(package_dir, name)
        if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != modules[name]:
            stale.append(name)
    return stale


class _PureFinder:
    """Finds every ``inferplan`` module's ``.py`` before the default finder finds an extension
    beside it (packages are left to the default finder)."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not name.startswith("inferplan."):
            return None
        source = source_path(self.package_dir, name)
        return importlib.util.spec_from_file_location(name, source) if source.is_file() else None


def install(package_dir: Path = MANIFEST.parent) -> str:
    """Decide once per process, before any compiled module is imported (``inferplan/__init__``):
    the extensions load only with a manifest that matches every source and without
    ``INFERPLAN_PURE``; otherwise the ``.py`` files load, whatever extensions lie beside them."""
    global mode
    manifest_path = package_dir / MANIFEST.name
    pure = os.environ.get(PURE_ENV, "0") not in ("", "0")
    if not manifest_path.exists():
        mode = "absent"
    elif pure:
        mode = "pure"
    else:
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            manifest = None
        stale = stale_modules(manifest, package_dir)
        if stale:
            more = f" and {len(stale) - 2} more" if len(stale) > 2 else ""
            print(
                f"inferplan: compiled modules out of date ({', '.join(stale[:2])}{more}); "
                "running pure Python (`make compile` rebuilds them)",
                file=sys.stderr,
            )
        mode = "pure" if stale else "compiled"
    if mode != "compiled":
        sys.meta_path.insert(0, _PureFinder(package_dir))
    return mode
