"""Host-side costs of each serving engine, per step: what the GPU roofline does not see.

A served step costs the GPU's time plus the engine's host work that the GPU waits for:
scheduling, input preparation, sampling and per-request output processing. How much of it the
GPU waits for is a property of the engine and its release, not of the GPU family:

- **vLLM v1 (0.10, 0.11)** runs schedule -> execute -> update synchronously by default
  (``--async-scheduling`` is off in 0.11.0 and 0.13.0; ``vllm/v1/engine/core.py`` ``step``), so
  its per-step and per-request host work adds to every step (``notes/engines.md`` sec. 1.6, 4).
- **SGLang (0.5)** overlaps the next batch's scheduling with the current one by default
  (``disable_overlap_schedule=False``); what remains is per-request work it cannot hide.
- **TensorRT-LLM** is fitted on its throughput rows by ``scripts/fit_published.py``
  (``plan/data/published_cpu_costs.yaml``); this file does not override it.

The constants (``data/engine_overheads.yaml``: ``step_overhead_s``, ``per_seq_overhead_s``,
``layer_overhead_s``, the fields of ``perf/efficiency.py`` they replace) are fitted by
``scripts/fit_engine_overheads.py`` (or, jointly with the front end and kernel factors,
``scripts/fit_frontend.py``) to the published latency rows of that engine, with
cross-validation grouped by configuration, inside the bounds given there: for vLLM v1 what it
is measured to spend on the host (what ``--async-scheduling`` saves, 3 ms per step and 20 us
per sequence; ``docs/validation.md`` "Latency rows"). The roofline adds
them to the step's GPU time (``RooflineModel._overhead``), less what an overlap hides
(``Efficiency.host_overlap``, ``perf/overlap.py``): SGLang's overlap scheduler and vLLM's
``--async-scheduling`` set it (``plan/served.py``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from inferplan.errors import InferplanError
from inferplan.perf.efficiency import Efficiency

OVERHEAD_FIELDS = ("step_overhead_s", "per_seq_overhead_s", "layer_overhead_s")


def overhead_class(engine: str, version: str = "") -> str | None:
    """The host-cost class of an engine release (``vllm``/``sglang`` as ``--engine`` and the
    published table spell them), or None where this file has none (TensorRT-LLM)."""
    if engine == "vllm":
        return "vllm-v1" if not version.startswith(("0.5", "0.6", "vllm-ascend")) else None
    if engine == "sglang":
        return "sglang"
    return None


def parse_overheads(data: object, source: str) -> dict[str, dict[str, float]]:
    """``{class: {field: seconds}}``; a bad file is one error naming the key."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InferplanError(f"{source}: expected a mapping of engine classes")
    out: dict[str, dict[str, float]] = {}
    for name, costs in data.items():
        if not isinstance(costs, dict) or not set(costs) <= set(OVERHEAD_FIELDS):
            raise InferplanError(
                f"{source}: {name}: keys must be among {', '.join(OVERHEAD_FIELDS)}"
            )
        values = {k: float(v) for k, v in costs.items()}
        if any(not 0.0 <= v <= 1.0 for v in values.values()):
            raise InferplanError(f"{source}: {name}: seconds must lie in [0, 1]")
        out[str(name)] = values
    return out


@cache
def bundled_overheads() -> dict[str, dict[str, float]]:
    text = resources.files("inferplan.perf").joinpath("data/engine_overheads.yaml").read_text()
    return parse_overheads(yaml.safe_load(text), "engine_overheads.yaml")


def with_engine_overheads(eff: Efficiency, engine: str, version: str = "") -> Efficiency:
    """``eff`` with the engine release's fitted host costs, where they exist."""
    name = overhead_class(engine, version)
    costs = bundled_overheads().get(name, {}) if name else {}
    return replace(eff, **costs) if costs else eff
