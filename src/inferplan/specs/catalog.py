"""Bundled model configs and how ``--model`` resolves to one.

``--model`` takes a Hugging Face id (``meta-llama/Llama-3.1-70B``), its short form
(``Llama-3.1-70B``, case-insensitive) or a path to a ``config.json``. The bundled configs are the
upstream files, byte for byte; ``data/PROVENANCE.md`` says where each came from.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path

from inferplan.errors import InferplanError
from inferplan.specs.model import ModelSpec, parse_config
from inferplan.textfile import path_exists, path_is_dir, read_user_json

# Short name (the bundled file's stem) -> Hugging Face organisation.
BUNDLED_MODELS: dict[str, str] = {
    "DeepSeek-R1": "deepseek-ai",
    "DeepSeek-V3": "deepseek-ai",
    "DeepSeek-V3.2": "deepseek-ai",
    "GLM-4.5-Air": "zai-org",
    "GLM-4.6": "zai-org",
    "Kimi-K2-Instruct": "moonshotai",
    "Llama-2-7b-hf": "meta-llama",
    "Llama-2-70b-hf": "meta-llama",
    "Llama-3.1-8B": "meta-llama",
    "Llama-3.1-70B": "meta-llama",
    "Llama-3.1-405B": "meta-llama",
    "Mistral-7B-v0.1": "mistralai",
    "Mistral-7B-v0.3": "mistralai",
    "Mixtral-8x7B-v0.1": "mistralai",
    "Mixtral-8x22B-v0.1": "mistralai",
    "Llama-4-Scout-17B-16E-Instruct": "meta-llama",
    "Llama-4-Maverick-17B-128E-Instruct": "meta-llama",
    "Qwen3-14B": "Qwen",
    "Qwen3-VL-30B-A3B": "Qwen",
    "Qwen3-8B": "Qwen",
    "Qwen3-32B": "Qwen",
    "Qwen3-30B-A3B": "Qwen",
    "Qwen3-235B-A22B": "Qwen",
    "Qwen3-Next-80B-A3B-Thinking": "Qwen",
    "gemma-3-27b-it": "google",
    "gpt-oss-20b": "openai",
    "gpt-oss-120b": "openai",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "nvidia",
}

# Other published names of the same architectures (Meta renamed the 3.1 repos; Llama-3 and
# Llama-3.3 share the 3.1 shapes).
_ALIASES: dict[str, str] = {
    "meta-llama-3.1-8b": "Llama-3.1-8B",
    "meta-llama-3.1-70b": "Llama-3.1-70B",
    "meta-llama-3.1-405b": "Llama-3.1-405B",
    "llama-3.1-8b-instruct": "Llama-3.1-8B",
    "llama-3.1-70b-instruct": "Llama-3.1-70B",
    "meta-llama-3-8b": "Llama-3.1-8B",
    "meta-llama-3-70b": "Llama-3.1-70B",
    "llama-3.3-70b": "Llama-3.1-70B",
    "llama-3.3-70b-instruct": "Llama-3.1-70B",
    "nvidia-nemotron-3-nano-30b-a3b-fp8": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    # zai-org's FP8 checkpoints share the BF16 architecture (pass --quantization fp8).
    "glm-4.5-air-fp8": "GLM-4.5-Air",
    "glm-4.6-fp8": "GLM-4.6",
}


def hf_id(short: str) -> str:
    return f"{BUNDLED_MODELS[short]}/{short}"


def _bundled_lookup() -> dict[str, str]:
    table = {short.lower(): short for short in BUNDLED_MODELS}
    table.update({hf_id(short).lower(): short for short in BUNDLED_MODELS})
    table.update(_ALIASES)
    return table


def resolve_model_name(name: str) -> str | None:
    """The bundled short name for ``name`` (id, short form or alias), or None."""
    key = name.strip().lower()
    table = _bundled_lookup()
    if key in table:
        return table[key]
    tail = key.rsplit("/", 1)[-1]
    return table.get(tail)


@cache
def _bundled_config(short: str) -> dict[str, object]:
    text = resources.files("inferplan.specs").joinpath(f"data/models/{short}.json").read_text()
    data: dict[str, object] = json.loads(text)
    return data


@cache
def _bundled_spec(short: str) -> ModelSpec:
    """A bundled model's parsed spec, once per process (a frozen spec, shared)."""
    return parse_config(dict(_bundled_config(short)), name=hf_id(short), source=f"{short}.json")


def load_model(name: str) -> ModelSpec:
    """A ModelSpec from a bundled name or a ``config.json`` path."""
    if not name.strip() or "\0" in name:
        raise InferplanError(
            f"--model: {name!r} is not a model name or path (`inferplan models` lists them)"
        )
    short = None if path_exists(Path(name)) else resolve_model_name(name)
    if short is not None:
        return _bundled_spec(short)
    path = Path(name)
    if path_is_dir(path):
        path = path / "config.json"
    if path.suffix == ".json" or path_exists(path):
        return _load_config_file(path)
    close = difflib.get_close_matches(name.lower(), list(_bundled_lookup()), n=3, cutoff=0.5)
    names = dict.fromkeys(_bundled_lookup()[c] for c in close)
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    raise InferplanError(
        f"--model: {name!r} is neither a bundled model nor a config.json path{hint} "
        "(`inferplan models` lists the bundled ones)"
    )


def _load_config_file(path: Path) -> ModelSpec:
    cfg = read_user_json(path, "model config", expected="a Hugging Face config.json")
    return parse_config(cfg, name=str(path), source=str(path))
