"""``--expert-routing``: the routing distribution from a flag value or a measured histogram file.

Values: ``uniform``, ``zipf:S`` (Zipf exponent ``S`` in expert-id order), or a path to a CSV
of measured expert loads, one row per expert (what TensorRT-LLM's expert statistics, SGLang's
``expert_distribution`` recorder or vLLM's EPLB load window count):

```
# optional comment lines
expert,load[,class]
0,1532
1,87
...
```

``load`` is any non-negative count (tokens routed to the expert over some window). Rows with a
``class`` hold that traffic class's histogram (domain-skewed traffic: a code workload heats other
experts than a chat one); a simulation mixes the classes it replays by their share of the
workload's tokens (``mix_classes``), and a class the file lacks uses the file's total. Experts
left out have load 0. One histogram stands for every MoE layer (TensorRT-LLM's measurements show
the imbalance differs per layer; a per-layer file is not read yet).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferplan.errors import InferplanError
from inferplan.perf.moe import Routing
from inferplan.textfile import read_user_text

FLAG = "--expert-routing"
ALL_CLASSES = ""


@dataclass(frozen=True)
class ExpertHistogram:
    """Measured loads per traffic class (``ALL_CLASSES``: every row, summed)."""

    path: str
    loads_by_class: dict[str, tuple[float, ...]]

    def mixed(self, token_shares: dict[str, float] | None) -> tuple[float, ...]:
        """Per-expert probabilities mixed by class token share (None: the file's total)."""
        if not token_shares:
            return _normalised(self.loads_by_class[ALL_CLASSES])
        total = np.zeros(len(self.loads_by_class[ALL_CLASSES]))
        for name, share in token_shares.items():
            loads = self.loads_by_class.get(name, self.loads_by_class[ALL_CLASSES])
            total += share * np.asarray(_normalised(loads))
        return tuple(float(v) for v in total)


def _normalised(loads: tuple[float, ...]) -> tuple[float, ...]:
    arr = np.asarray(loads, dtype=np.float64)
    return tuple(float(v) for v in arr / arr.sum())


def read_histogram(path: Path) -> ExpertHistogram:
    """Parse an expert-load CSV; every problem is one line naming the file and line."""
    text = read_user_text(path, "expert-load")
    rows = [(i + 1, line) for i, line in enumerate(text.splitlines())]
    rows = [(n, line) for n, line in rows if line.strip() and not line.lstrip().startswith("#")]
    if not rows:
        raise InferplanError(f"{path}: empty; expected a header expert,load[,class] and rows")
    header_line, header = rows[0]
    columns = [c.strip().lower() for c in next(csv.reader([header]))]
    if (
        "expert" not in columns
        or "load" not in columns
        or set(columns) - {"expert", "load", "class"}
    ):
        raise InferplanError(
            f"{path}:{header_line}: header must name expert and load (and optionally class), "
            f"got {header.strip()!r}"
        )
    by_class: dict[str, dict[int, float]] = {}
    for number, line in rows[1:]:
        cells = [c.strip() for c in next(csv.reader([line]))]
        if len(cells) != len(columns):
            raise InferplanError(
                f"{path}:{number}: {len(cells)} cells, the header has {len(columns)}"
            )
        row = dict(zip(columns, cells, strict=True))
        try:
            expert, load = int(row["expert"]), float(row["load"])
        except ValueError:
            raise InferplanError(
                f"{path}:{number}: expert must be an integer and load a number, "
                f"got {line.strip()!r}"
            ) from None
        if expert < 0 or not load >= 0 or load == float("inf"):
            raise InferplanError(f"{path}:{number}: expert must be >= 0 and load finite >= 0")
        for name in {ALL_CLASSES, row.get("class", ALL_CLASSES)}:
            loads = by_class.setdefault(name, {})
            loads[expert] = loads.get(expert, 0.0) + load
    if ALL_CLASSES not in by_class or sum(by_class[ALL_CLASSES].values()) <= 0:
        raise InferplanError(f"{path}: no positive load in any row")
    size = max(by_class[ALL_CLASSES]) + 1
    dense = {
        name: tuple(loads.get(e, 0.0) for e in range(size)) for name, loads in by_class.items()
    }
    for name, values in dense.items():
        if sum(values) <= 0:
            raise InferplanError(f"{path}: class {name!r} has no positive load")
    return ExpertHistogram(str(path), dense)


def parse_routing(
    value: str | None,
    *,
    moe_skew: float | None,
    placement: str,
    num_experts: int | None,
    token_shares: dict[str, float] | None = None,
) -> Routing:
    """The ``Routing`` for ``--expert-routing`` (or the ``--moe-skew`` shorthand)."""
    if value is not None and moe_skew:
        raise InferplanError(f"--moe-skew: give either it or {FLAG}, not both")
    if value is None or value.strip().lower() == "uniform":
        return Routing(moe_skew or 0.0, placement=placement)
    text = value.strip()
    if text.lower().startswith("zipf:"):
        try:
            exponent = float(text[5:])
        except ValueError:
            raise InferplanError(
                f"{FLAG}: expected zipf:S with a number S, got {value!r}"
            ) from None
        return Routing(exponent, placement=placement, source=FLAG)
    histogram = read_histogram(Path(text))
    loads = list(histogram.mixed(token_shares))
    if num_experts is not None:
        if len(loads) > num_experts:
            raise InferplanError(
                f"{text}: names expert {len(loads) - 1}, but the model has {num_experts} routed "
                f"experts (0..{num_experts - 1})"
            )
        loads += [0.0] * (num_experts - len(loads))
    return Routing(expert_loads=tuple(loads), placement=placement, source=text)


def class_token_shares(
    class_names: tuple[str, ...], class_ids: np.ndarray, tokens: np.ndarray
) -> dict[str, float]:
    """Each class's share of a workload's tokens (prompt + output)."""
    totals = np.bincount(class_ids, weights=tokens, minlength=len(class_names))
    whole = float(totals.sum())
    if whole <= 0:
        return {}
    return {name: float(totals[i] / whole) for i, name in enumerate(class_names) if totals[i] > 0}
