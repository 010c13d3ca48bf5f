"""The library entry ``simulate`` and its options: which engines swap."""

from __future__ import annotations

import pytest

from inferplan.cli import main
from inferplan.engine.session import ServingOptions
from inferplan.errors import InferplanError


@pytest.mark.parametrize(
    ("scheduler", "engine"),
    [("continuous", "vllm"), ("continuous", "trtllm"), ("static", "vllm")],
)
def test_swap_only_for_engines_that_swap(scheduler: str, engine: str) -> None:
    """vLLM v1 never swaps (recompute only); TensorRT-LLM and static batching never preempt."""
    with pytest.raises(InferplanError, match="--preemption-mode swap"):
        ServingOptions(scheduler=scheduler, engine=engine, preemption_mode="swap")


def test_vllm_v0_swaps() -> None:
    options = ServingOptions(scheduler="prefill-first", preemption_mode="swap")
    assert options.preemption_mode == "swap"


def test_swap_with_vllm_v1_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "Llama-3.1-8B", "--gpu", "h100", "--num-prompts", "3"]
    code = main([*argv, "--preemption-mode", "swap"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: --preemption-mode swap")
