"""The plan file: a YAML record of one search (its request and its answer), and the diff of two.

A plan file holds the request as the search read it (every default filled in), the model's
version hash, and the answer (best plan, Pareto fronts, API, hybrid, stress test). It is
re-runnable (``inferplan plan PLAN.yaml`` reads its ``request``) and diffable: keys are written
in a fixed order, so two plans of the same request differ only where the answer does.

``diff_plans`` explains a change for quarterly re-planning: which inputs changed, grouped as
model, traffic (rates, lengths), SLOs, prices, hardware limits, API, search space; and what the
answer did (the best configuration, its GPUs and cost, the verdict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inferplan.errors import InferplanError
from inferplan.plan.request import PlanRequest, parse_request
from inferplan.textfile import read_user_text

PLAN_FORMAT = 1
BEST_KEYS = (
    "gpu",
    "num_gpus",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "quantization",
    "kv_cache_dtype",
    "engine",
    "max_num_seqs",
    "max_num_batched_tokens",
    "cost_per_hour_usd",
    "cost_per_million_output_tokens_usd",
)


def request_data(request: PlanRequest) -> dict[str, Any]:
    # trtllm_runtime only where the request gives it: other plan files stay as they were.
    unset = None if "trtllm_runtime" in request.model_fields_set else {"trtllm_runtime"}
    return request.model_dump(mode="json", by_alias=True, exclude=unset)


def plan_document(request: PlanRequest, output: dict[str, Any]) -> dict[str, Any]:
    return {"inferplan_plan": PLAN_FORMAT, "request": request_data(request), "result": output}


def write_plan(path: Path, document: dict[str, Any]) -> None:
    try:
        path.write_text(yaml.safe_dump(document, sort_keys=False, width=100))
    except OSError as err:
        raise InferplanError(f"--output {path}: cannot write ({err.strerror})") from None


def is_plan_document(data: Any) -> bool:
    return isinstance(data, dict) and "inferplan_plan" in data


def read_plan(path: Path) -> dict[str, Any]:
    text = read_user_text(path, "plan")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise InferplanError(f"{path}: not valid YAML") from None
    if not is_plan_document(data) or not isinstance(data.get("request"), dict):
        raise InferplanError(f"{path}: not a plan file (written by `inferplan plan -o FILE`)")
    if not isinstance(data.get("result"), dict):
        raise InferplanError(f"{path}: result: missing; re-run `inferplan plan {path}`")
    parse_request(data["request"], f"{path}: request")
    return data


_GROUPS = (
    ("model", "new model"),
    ("model_version", "new model config"),
    ("traffic", "new traffic"),
    ("hardware", "new prices or hardware limits"),
    ("api", "new API prices"),
    ("daily_profile", "new daily profile"),
    ("headroom", "new headroom"),
)


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        out = {}
        for i, value in enumerate(data):
            out.update(_leaves(value, f"{prefix}[{i}]"))
        return out
    return {prefix: data}


def _changes(old: Any, new: Any) -> list[dict[str, Any]]:
    a, b = _leaves(old), _leaves(new)
    keys = list(dict.fromkeys([*a, *b]))
    return [{"key": k, "old": a.get(k), "new": b.get(k)} for k in keys if a.get(k) != b.get(k)]


def _why(changes: list[dict[str, Any]]) -> list[str]:
    reasons = []
    heads = [c["key"].split(".")[0].split("[")[0] for c in changes]
    for prefix, reason in _GROUPS:
        if prefix not in heads:
            continue
        traffic = [c["key"] for c in changes if c["key"].startswith("traffic")]
        if prefix == "traffic" and all(".slo." in key for key in traffic):
            reason = "new SLOs"
        reasons.append(reason)
    known = {p for p, _ in _GROUPS}
    if any(head not in known for head in heads):
        reasons.append("new search space or settings")
    return reasons


def diff_plans(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What changed between two plan files, and why (the inputs that changed)."""
    inputs = _changes(old["request"], new["request"])
    if old["result"].get("model_version") != new["result"].get("model_version"):
        inputs.append(
            {
                "key": "model_version",
                "old": old["result"].get("model_version"),
                "new": new["result"].get("model_version"),
            }
        )
    old_best, new_best = old["result"].get("best") or {}, new["result"].get("best") or {}
    best = [
        {"key": k, "old": old_best.get(k), "new": new_best.get(k)}
        for k in BEST_KEYS
        if old_best.get(k) != new_best.get(k)
    ]
    old_cost, new_cost = old_best.get("cost_per_hour_usd"), new_best.get("cost_per_hour_usd")
    change = None
    if old_cost and new_cost:
        change = (new_cost - old_cost) / old_cost
    return {
        "why": _why(inputs) or ["no input changed"],
        "inputs": inputs,
        "best": best,
        "cost_per_hour_usd": {"old": old_cost, "new": new_cost, "relative_change": change},
        "verdict": {"old": old["result"].get("verdict"), "new": new["result"].get("verdict")},
    }
