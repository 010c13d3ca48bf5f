"""The planner sizes each engine's KV pool with that engine's own memory rule and prints the
value it used in the engine's own launch flag."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.plan.bounds import build_plan, memory_fraction
from inferplan.plan.launch import launch_command
from inferplan.plan.request import parse_request
from inferplan.plan.space import ReplicaConfig
from inferplan.specs.catalog import load_model
from inferplan.specs.engines import engine_defaults, sglang_mem_fraction_static
from inferplan.specs.hardware import load_gpu

MODEL = "Llama-3.1-8B"


def _cfg(engine: str) -> ReplicaConfig:
    return ReplicaConfig(0, "h100", 1, 1, False, "bf16", "auto", engine, 256, 8192, 8, 8)


def _direct(engine: str) -> MemoryConfig:
    gpu = load_gpu("h100")
    d = engine_defaults(engine, gpu)
    return MemoryConfig(
        quantization="bf16", kv_cache_dtype="auto", max_model_len=8192,
        gpu_memory_utilization=d.gpu_memory_utilization, max_num_batched_tokens=8192,
        max_num_seqs=256, block_size=d.block_size,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "rule"),
    [
        ("trtllm", {"kv_cache_free_gpu_mem_fraction": 0.9}),
        ("sglang", {"mem_fraction_static": sglang_mem_fraction_static(load_gpu("h100"), 1)}),
        ("vllm", {}),
    ],
)
def test_default_rule_is_the_engines(engine: str, rule: dict[str, float]) -> None:
    cfg = _cfg(engine)
    plan = build_plan(MODEL, cfg, 8192, None)
    spec, gpu = load_model(MODEL), load_gpu("h100")
    memory = _direct(engine)
    if "kv_cache_free_gpu_mem_fraction" in rule:
        memory = replace(
            memory, kv_cache_free_gpu_mem_fraction=rule["kv_cache_free_gpu_mem_fraction"]
        )
    if "mem_fraction_static" in rule:
        memory = replace(memory, mem_fraction_static=rule["mem_fraction_static"])
    want = plan_memory(spec, gpu, cfg.parallelism, memory)
    assert plan.num_blocks == want.num_blocks


def test_engines_differ_and_the_given_fraction_applies() -> None:
    tokens = {
        e: build_plan(MODEL, _cfg(e), 8192, None).kv_capacity_tokens
        for e in ("vllm", "trtllm", "sglang")
    }
    assert len(set(tokens.values())) == 3  # three rules, three pools
    for engine in ("vllm", "trtllm", "sglang"):
        low = build_plan(MODEL, _cfg(engine), 8192, 0.6).kv_capacity_tokens
        assert low < build_plan(MODEL, _cfg(engine), 8192, 0.8).kv_capacity_tokens


def test_launch_commands_carry_the_fraction_used() -> None:
    sgl = launch_command("meta-llama/Llama-3.1-8B-Instruct", _cfg("sglang"), 8192, None)
    assert sgl.startswith("python -m sglang.launch_server --model-path meta-llama/")
    assert f"--mem-fraction-static {sglang_mem_fraction_static(load_gpu('h100'), 1)}" in sgl
    assert "--max-running-requests 256 --chunked-prefill-size 8192 --context-length 8192" in sgl
    trt = launch_command("m", _cfg("trtllm"), 8192, 0.75)
    assert "--kv_cache_free_gpu_memory_fraction 0.75" in trt
    assert "--gpu-memory-utilization 0.9" in launch_command("m", _cfg("vllm"), 8192, None)


def test_request_fraction_only_when_given() -> None:
    base = {
        "model": MODEL,
        "traffic": [
            {"class": "r", "request_rate": 1.0, "dataset": "reasoning", "slo": {"e2el_p99_s": 900}}
        ],
        "hardware": [{"gpu": "h100", "price_per_gpu_hour": 2.5}],
    }
    unset = parse_request(base, "r.yaml")
    given = parse_request({**base, "gpu_memory_utilization": 0.9}, "r.yaml")
    assert unset.memory_fraction is None
    assert given.memory_fraction == 0.9
    assert memory_fraction(_cfg("sglang"), unset.memory_fraction) < 0.9
    assert memory_fraction(_cfg("sglang"), given.memory_fraction) == 0.9
