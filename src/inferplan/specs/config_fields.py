"""Typed access to a Hugging Face ``config.json``: every field read is checked for its type and
range, and a bad one is one error naming the file and the key.

``config.json`` is free-form JSON, so a field can hold anything: ``"mlp_only_layers": 5`` where a
list belongs, ``"mm_tokens_per_image": "abc"``, ``"num_hidden_layers": 1000000000``. The model
reader (``model.py``) reads fields only through ``ConfigFields``, whose getters name what the
key must hold. Integer fields have an upper bound from ``inferplan.limits`` (layers,
dimensions, positions) far above every released model, so that a typo cannot make the reader
build a billion-layer list.
"""

from __future__ import annotations

from typing import Any

from inferplan.errors import InferplanError
from inferplan.limits import MAX_CONFIG_DIMENSION


class ConfigFields:
    """Typed access to a config dict; every error names the file and the field."""

    def __init__(self, cfg: dict[str, Any], source: str) -> None:
        self.cfg = cfg
        self.source = source

    def _error(self, key: str, expected: str, value: object) -> InferplanError:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return InferplanError(f"{self.source}: field {key!r} must be {expected}, got {shown}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def get_int(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int = 1,
        maximum: int = MAX_CONFIG_DIMENSION,
    ) -> int:
        value = self.cfg.get(key)
        value = default if value is None else value
        if value is None:
            model_type = self.cfg.get("model_type", "unknown")
            raise InferplanError(
                f"{self.source}: missing field {key!r} (needed to read a {model_type!r} model)"
            )
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if not is_int or not minimum <= value <= maximum:
            raise self._error(key, f"an integer from {minimum} to {maximum:,}", value)
        return value

    def opt_int(
        self, key: str, *, minimum: int = 1, maximum: int = MAX_CONFIG_DIMENSION
    ) -> int | None:
        return self.get_int(key, minimum=minimum, maximum=maximum) if self.has(key) else None

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if not isinstance(value, bool):
            raise self._error(key, "true or false", value)
        return value

    def get_str(self, key: str, default: str) -> str:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._error(key, "a string", value)
        return value

    def get_int_list(self, key: str, *, maximum: int = MAX_CONFIG_DIMENSION) -> list[int]:
        """A list of integers in [0, maximum] (absent or null: empty)."""
        value = self.cfg.get(key)
        if value is None:
            return []
        is_valid = isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= maximum for v in value
        )
        if not is_valid:
            raise self._error(key, f"a list of integers from 0 to {maximum:,}", value)
        return list(value)

    def get_str_list(self, key: str) -> list[str] | None:
        """A list of strings, or None when absent or null."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._error(key, "a list of strings", value)
        return list(value)

    def get_dict(self, key: str) -> dict[str, Any] | None:
        """A JSON object, or None when absent or null."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._error(key, "a JSON object", value)
        return value
