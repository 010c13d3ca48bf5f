"""``pure_only``: a test that patches an engine module's functions or classes, which compiled
modules (``inferplan/native.py``) call directly. Skipped where the engine runs compiled;
``make unit`` then runs them pure (``INFERPLAN_PURE=1 pytest -m pure_only``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from inferplan import native

F = TypeVar("F", bound=Callable[..., object])


def pure_only(test: F) -> F:
    skip = pytest.mark.skipif(
        native.mode == "compiled", reason="patches engine internals: run with INFERPLAN_PURE=1"
    )
    marked: F = pytest.mark.pure_only(skip(test))
    return marked


def attributes(obj: object) -> dict[str, object]:
    """``vars(obj)``, also of a compiled (mypyc) instance, which has no ``__dict__``: its
    ``__getstate__``, which mypyc gives every native class (pure, ``object.__getstate__``)."""
    state = obj.__getstate__()
    assert isinstance(state, dict), type(obj)
    return state
