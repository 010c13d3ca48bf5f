"""Compile the simulator's hot modules with mypyc, in place (``make compile``; optional).

The pure-Python modules stay the reference: ``inferplan/native.py`` loads a compiled module
only while its source is byte for byte the one it was compiled from (a manifest of SHA-256
sums written here, ``src/inferplan/_native.json``) and ``INFERPLAN_PURE`` is unset; any
mismatch runs every module pure. Artefacts (git-ignored): one extension per module beside its
``.py``, the shared library ``src/inferplan_native__mypyc*.so`` and the manifest; C sources
and objects under ``build/mypyc``. ``--clean`` removes them. docs/simulator.md says what and why.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))  # ``--clean`` runs under any Python, without the environment
os.environ["INFERPLAN_PURE"] = "1"  # no stale-build warning from importing ``inferplan``

from inferplan.native import MODULES, module_name  # noqa: E402

BUILD = ROOT / "build" / "mypyc"
GROUP = "inferplan_native"
MANIFEST = SRC / "inferplan" / "_native.json"


def source_sha256(rel: str) -> str:
    return hashlib.sha256((SRC / "inferplan" / rel).read_bytes()).hexdigest()


def clean(keep_log: bool = False) -> None:
    """Remove every compiled artefact (the pure modules are left as they are)."""
    for so in (SRC / "inferplan").rglob("*.so"):  # the package has no other extensions
        so.unlink()
    for so in SRC.glob(f"{GROUP}__mypyc.*.so"):
        so.unlink()
    MANIFEST.unlink(missing_ok=True)
    for path in BUILD.glob("*"):
        if path.is_dir():
            shutil.rmtree(path)
        elif not keep_log or path.name != "build.log":
            path.unlink()


def build(opt_level: str) -> None:
    """Compile ``MODULES`` in one mypyc group and write the manifest last (a build that fails
    leaves no manifest, so nothing compiled is loaded)."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    clean(keep_log=True)  # ``--if-possible`` writes the log
    sums = {module_name(rel): source_sha256(rel) for rel in MODULES}
    os.chdir(ROOT)  # mypy reads pyproject.toml's [tool.mypy] from here
    paths = [f"src/inferplan/{rel}" for rel in MODULES]
    extensions = mypycify(paths, opt_level=opt_level, group_name=GROUP, target_dir=str(BUILD / "c"))
    dist = Distribution({"ext_modules": extensions, "package_dir": {"": "src"}})
    dist.script_name = "compile_native"
    dist.script_args = ["build_ext", "--inplace", "--build-temp", str(BUILD / "obj")]
    dist.parse_command_line()
    dist.run_commands()
    changed = [name for name, digest in sums.items() if digest != source_sha256_of(name)]
    if changed:  # edited while compiling: the extensions would not match what is on disk
        raise SystemExit(f"error: edited during the build: {', '.join(changed)}; run it again")
    manifest = {"python": sys.implementation.cache_tag, "modules": sums}
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def source_sha256_of(name: str) -> str:
    return source_sha256(name.removeprefix("inferplan.").replace(".", "/") + ".py")


def missing_tools() -> str | None:
    """What the build lacks on this machine (a C compiler, Python's headers, mypyc), or None."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if os.environ.get("CC"):
        compiler = os.environ["CC"].split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h)"
    try:
        import mypyc.build  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError as exc:
        return f"no {exc.name}"
    return None


def if_possible(opt_level: str) -> None:
    """``make setup``'s build: skipped without the tools, its output in a log, a failure one
    line (the pure modules run)."""
    missing = missing_tools()
    if missing is not None:
        print(f"note: {missing}: the simulator runs pure Python (make compile to build it)")
        return
    BUILD.mkdir(parents=True, exist_ok=True)
    log = BUILD / "build.log"
    command = [sys.executable, __file__, "--opt-level", opt_level]
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        clean(keep_log=True)
        print(f"note: the mypyc build failed ({log}); the simulator runs pure Python")
        return
    print(log.read_text().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled artefacts")
    parser.add_argument(
        "--if-possible", action="store_true", help="make setup's build: never fails"
    )
    parser.add_argument("--opt-level", default="3", help="the C compiler's -O level (0-3)")
    args = parser.parse_args()
    if args.clean:
        clean()
        return
    if args.if_possible:
        if_possible(args.opt_level)
        return
    missing = missing_tools()
    if missing is not None:
        raise SystemExit(f"error: {missing}")
    start = time.perf_counter()
    build(args.opt_level)
    sizes = sum(p.stat().st_size for p in SRC.rglob("*.so"))
    print(
        f"compiled {len(MODULES)} modules with mypyc in {time.perf_counter() - start:.0f} s "
        f"({sizes / 2**20:.1f} MiB of extensions)"
    )


if __name__ == "__main__":
    main()
