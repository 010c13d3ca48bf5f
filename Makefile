# Everything a fresh machine with Python >= 3.11, git and make needs.
# uv is bootstrapped into .tools/ when it is not on PATH; the environment comes from uv.lock.
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
RUN := $(UV) run --frozen
# The profiler's PyTorch (CPU build), installed by `make torch-cpu` outside the lock.
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_WHEELS ?=

.PHONY: setup venv compile pure torch-cpu demo test lint typecheck unit ray-test fuzz bench clean

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet "uv>=0.5,<1"

# --inexact: keep what the lock does not list (torch from `make torch-cpu`); the locked
# packages are still installed at their locked versions.
venv: $(UV)
	$(UV) sync --frozen --inexact --quiet

# The environment; with NATIVE=1, then the mypyc build of the simulator's hot modules where a C
# compiler is found (off by default: 1.25x-1.6x less CPU for a build of about 150 s CPU, and
# `make test` and CI stay pure and quick; docs/simulator.md, "Compiling the engine with mypyc").
# The build is optional: without a compiler, or when it fails, one line says so and everything
# runs pure Python, the reference.
# Compiled modules load only while they match their sources (src/inferplan/native.py);
# INFERPLAN_PURE=1 runs pure Python anyway.
NATIVE ?= 0
NATIVE_SOURCES := src/inferplan/native.py scripts/compile_native.py uv.lock \
	$(addprefix src/inferplan/,$(shell sed -n 's/^    "\([a-z_/]*\.py\)",$$/\1/p' src/inferplan/native.py))

setup: venv
ifneq ($(NATIVE),0)
setup: build/mypyc/attempted
endif

# One attempt per change of the sources: a failed build is not retried by every `make test`.
build/mypyc/attempted: $(NATIVE_SOURCES) | venv
	$(RUN) --group compile --quiet python scripts/compile_native.py --if-possible
	@touch $@

# The same build, its output shown and its failure an error.
compile: venv
	$(RUN) --group compile --quiet python scripts/compile_native.py
	@touch build/mypyc/attempted

# Remove the compiled modules: pure Python until the next `make compile` (or NATIVE=1 setup).
pure:
	$(PYTHON) scripts/compile_native.py --clean

# CPU PyTorch into .venv so that the profiler's tests run (they are skipped without it). With
# TORCH_WHEELS=DIR the torch wheel comes from DIR, no download (its small pure-Python
# dependencies still come from the package index or uv's cache); otherwise from PyTorch's CPU
# index. Never through the lock: PyPI's torch is the multi-GB CUDA build.
torch-cpu: setup
ifneq ($(TORCH_WHEELS),)
	$(UV) pip install --quiet --python .venv/bin/python --find-links $(TORCH_WHEELS) \
		"torch==$(TORCH_VERSION)+cpu"
else
	$(UV) pip install --quiet --python .venv/bin/python --index-url $(TORCH_CPU_INDEX) \
		"torch==$(TORCH_VERSION)"
endif

demo: venv
	$(RUN) python -m inferplan.demo

lint: venv
	$(RUN) ruff check src tests benchmarks scripts
	$(RUN) ruff format --check src tests benchmarks scripts

typecheck: venv
	$(RUN) mypy

# One pytest worker per core (pytest-xdist); worksteal: the long fast == exact harnesses do not
# leave one worker running alone at the end.
# Where the engine runs compiled, the tests that patch its internals (skipped there) run again
# pure (tests/native_mode.py).
unit: setup
	$(RUN) pytest -n auto --dist worksteal
	@if $(RUN) python -c "from inferplan import native; raise SystemExit(native.mode != 'compiled')"; \
	then echo "the pure_only tests, pure:"; INFERPLAN_PURE=1 $(RUN) pytest -n auto --dist worksteal -m pure_only; fi

test: lint typecheck unit

# The planner's Ray executor (an optional extra) on a local Ray instance the test starts. With
# the venv's pytest, not `uv run`: under uv, Ray would start its workers through uv
# (tests/plan/test_plan_ray.py says why).
ray-test: setup
	$(UV) sync --frozen --inexact --extra ray --quiet
	timeout 600 .venv/bin/pytest tests/plan/test_plan_ray.py

# The fuzz suite's long profile: random draws, 50x the examples `make test` runs (minutes).
fuzz: setup
	INFERPLAN_FUZZ_PROFILE=long $(RUN) pytest tests/test_fuzz_cli.py -p no:cacheprovider

bench: setup
	$(RUN) python -m benchmarks.run_all

clean:
	$(PYTHON) scripts/compile_native.py --clean
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache build
