"""``simulate``'s deployment flags as the CLI's defaults give them, for tests that build a step
model the way ``simulate`` and ``plan`` do (``cli_flags.DeploymentFlags``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from inferplan.cli_flags import DeploymentFlags

_DEFAULTS = DeploymentFlags(
    model="Qwen3-30B-A3B",
    gpu="h100",
    tp=1,
    pp=1,
    dp=1,
    enable_expert_parallel=False,
    quantization=None,
    kv_cache_dtype="auto",
    max_model_len=4096,
    gpu_memory_utilization=0.9,
    max_num_batched_tokens=None,
    max_num_seqs=None,
    block_size=None,
    engine="vllm",
    calibration=None,
    operator_table=None,
    gpus_per_node=None,
    allow_cross_node_tp=False,
    expert_routing=None,
    expert_placement="linear",
    num_redundant_experts=0,
)


def deployment_flags(**changes: Any) -> DeploymentFlags:
    """Qwen3-30B-A3B on one H100 with vLLM and the CLI's defaults, ``changes`` applied."""
    return replace(_DEFAULTS, **changes)
