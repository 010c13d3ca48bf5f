"""The small real traces shipped inside the package, and how a name resolves to one.

Owns the list of bundled trace files in ``data/``: the first rows of public traces, unchanged
(``data/README.md`` gives each one's source, commit, license and required citation). The package
reads only these copies at run time, never the reference data they were copied from.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from inferplan.errors import InferplanError
from inferplan.textfile import path_exists

DATA_DIR = Path(__file__).parent / "data"

# Bundled name -> file in data/.
_BUNDLED_FILES: dict[str, str] = {
    "azure_llm_2023_conv": "azure_llm_2023_conv.csv",
    "mooncake_fast25_conversation": "mooncake_fast25_conversation.jsonl",
    "vidur_splitwise_conv": "vidur_splitwise_conv.csv",
    "vidur_arxiv_summarization": "vidur_arxiv_summarization.csv",
}
BUNDLED_TRACES: tuple[str, ...] = tuple(_BUNDLED_FILES)


def bundled_trace(name: str) -> Path:
    """The path of a bundled trace, by name (with or without its file extension)."""
    stem = name.strip()
    for key, file_name in _BUNDLED_FILES.items():
        if stem in (key, file_name):
            return DATA_DIR / file_name
    raise InferplanError(f"no bundled trace {name!r}{_hint(stem)}")


def resolve_trace_path(path_or_name: str | Path) -> Path:
    """An existing file as is, else the bundled trace of that name."""
    path = Path(path_or_name)
    if path_exists(path):
        return path
    stem = str(path_or_name).strip()
    if stem in _BUNDLED_FILES or stem in _BUNDLED_FILES.values():
        return bundled_trace(stem)
    raise InferplanError(f"{path}: no such trace file, nor a bundled trace{_hint(stem)}")


def _hint(stem: str) -> str:
    close = difflib.get_close_matches(stem, BUNDLED_TRACES, n=1)
    suggestion = f" (did you mean {close[0]}?)" if close else ""
    return f"{suggestion}; bundled: {', '.join(BUNDLED_TRACES)}"
