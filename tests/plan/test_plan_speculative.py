"""Speculative decoding in the planner: the request file's ``speculative`` section reaches the
simulations, loosens the bounds it would break, and bad values are one-line errors."""

from __future__ import annotations

from typing import Any

import pytest

from inferplan.errors import InferplanError
from inferplan.perf.speculative import expected_tokens_per_step
from inferplan.plan.capacity import _Runner, build_context, prepare, speculation
from inferplan.plan.space import ReplicaConfig

from .planner_helpers import tiny_request

EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


def _cfg() -> ReplicaConfig:
    return ReplicaConfig(
        hardware_index=0, gpu="h100", tp=1, pp=1, ep=False, quantization="bf16",
        kv_cache_dtype="auto", engine="vllm", max_num_seqs=64, max_num_batched_tokens=2048,
        max_gpus=8, gpus_per_node=8,
    )  # fmt: skip


@pytest.mark.parametrize(
    "spec,message",
    [
        ({**EAGLE3, "method": "medusa"}, "unknown method"),
        ({**EAGLE3, "accept_length": 2.0}, "exactly one"),
        ({"method": "mtp", "num_speculative_tokens": 2, "accept_length": 3.5}, "exceeds"),
        ({**EAGLE3, "num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({**EAGLE3, "acceptance_rate": 1.2}, "acceptance_rate"),
    ],
)
def test_bad_speculative_sections_are_one_line_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InferplanError, match=message) as err:
        tiny_request(speculative=spec)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("tiny.yaml")


def test_speculation_is_vllm_only() -> None:
    with pytest.raises(InferplanError, match="engines: \\[vllm\\]"):
        tiny_request(speculative=EAGLE3, engines=["vllm", "sglang"])


def test_the_accept_length_is_turned_into_the_acceptance() -> None:
    assert speculation(tiny_request()) is None
    spec = speculation(tiny_request(speculative={**EAGLE3, "acceptance_rate": None,
                                                 "accept_length": 2.5}))  # fmt: skip
    assert spec is not None
    assert expected_tokens_per_step(spec.config.acceptance_rate, 3) == pytest.approx(2.5)
    assert spec.seed == tiny_request().search.seed


def test_the_tpot_floor_is_divided_by_the_tokens_a_step_can_emit() -> None:
    """Unloaded, a plain step per token is the TPOT floor; with k = 3 a step may emit 4 tokens,
    so a TPOT limit of 0.6 plain steps is reachable and must not be pruned."""
    plain = prepare(build_context(tiny_request()), _cfg())
    floor_ms = plain.bound["min_decode_step_ms"]
    traffic = [
        dict(
            tiny_request().traffic[0].model_dump(by_alias=True), slo={"tpot_p99_ms": 0.6 * floor_ms}
        )
    ]
    assert prepare(build_context(tiny_request(traffic=traffic)), _cfg()).pruned == "latency_bound"
    spec = tiny_request(traffic=traffic, speculative=EAGLE3)
    assert prepare(build_context(spec), _cfg()).pruned is None


def test_the_planners_simulations_speculate() -> None:
    ctx = build_context(tiny_request(speculative=EAGLE3))
    _, result = _Runner(ctx, _cfg()).run(1.0, 1, fleet=False)
    assert result.speculative is not None
    assert result.speculative["num_drafts"] > 0
    _, plain = _Runner(build_context(tiny_request()), _cfg()).run(1.0, 1, fleet=False)
    assert plain.speculative is None
    assert result.num_steps < plain.num_steps
