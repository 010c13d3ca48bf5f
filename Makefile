# Everything a fresh machine with Python >= 3.11, git and make needs.
# uv is bootstrapped into .tools/ when it is not on PATH; the environment comes from uv.lock.
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
RUN := $(UV) run --frozen

.PHONY: setup demo test lint typecheck unit bench clean

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet "uv>=0.5,<1"

setup: $(UV)
	$(UV) sync --frozen --quiet

demo: setup
	$(RUN) python -m inferplan.demo

lint: setup
	$(RUN) ruff check src tests benchmarks scripts
	$(RUN) ruff format --check src tests benchmarks scripts

typecheck: setup
	$(RUN) mypy

unit: setup
	$(RUN) pytest

test: lint typecheck unit

bench: setup
	$(RUN) python -m benchmarks.run_all

clean:
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache
