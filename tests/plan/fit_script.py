"""``scripts/fit_published.py`` loaded as a module, for the tests of its fitting code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fit_published.py"


def fit_published() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fit_published", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_published"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module
