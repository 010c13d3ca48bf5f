"""Per-engine host costs (``perf/engine_overheads.py``): which release gets which class, the
bundled file's shape, bad files, and that they reach a row's constants only for that engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.errors import InferplanError
from inferplan.perf.efficiency import bundled_efficiency
from inferplan.perf.engine_overheads import (
    OVERHEAD_FIELDS,
    bundled_overheads,
    overhead_class,
    parse_overheads,
    with_engine_overheads,
)


def test_engine_classes() -> None:
    assert overhead_class("vllm", "0.11.0") == "vllm-v1"
    assert overhead_class("vllm", "0.10.2") == "vllm-v1"
    assert overhead_class("vllm", "0.6.0") is None  # V0: plan/data/engine_cpu_costs.yaml
    assert overhead_class("vllm", "vllm-ascend v0.9.1") is None
    assert overhead_class("sglang", "0.5.4.post2") == "sglang"
    assert overhead_class("tensorrt-llm", "1.0.0") is None  # fit_published.py's costs


def test_bundled_file_is_within_its_bounds() -> None:
    for costs in bundled_overheads().values():
        assert set(costs) <= set(OVERHEAD_FIELDS)
        assert all(0.0 <= v <= 5e-3 for v in costs.values())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "expected a mapping"),
        ({"vllm-v1": {"gemm_compute": 0.5}}, "keys must be among"),
        ({"vllm-v1": {"step_overhead_s": -1.0}}, r"seconds must lie in \[0, 1\]"),
        ({"vllm-v1": "fast"}, "keys must be among"),
    ],
)
def test_bad_files_are_one_error_naming_the_key(data: object, message: str) -> None:
    with pytest.raises(InferplanError, match=message):
        parse_overheads(data, "engine_overheads.yaml")


def test_only_the_named_engine_gets_its_costs() -> None:
    family = bundled_efficiency("hopper")
    assert with_engine_overheads(family, "tensorrt-llm", "1.0.0") is family
    costs = bundled_overheads().get("vllm-v1", {})
    assert with_engine_overheads(family, "vllm", "0.11.0") == replace(family, **costs)
