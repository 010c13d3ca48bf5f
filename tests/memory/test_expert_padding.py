"""vLLM's MXFP4 experts before Blackwell: stored padded to the Marlin MoE kernel's tiles."""

import json

import pytest

from cli_run import run
from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.memory.weights import ffn_rank_bytes, padded_expert_params
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup
from inferplan.specs.catalog import load_model
from inferplan.specs.engines import MARLIN_MOE_PADDING, vllm_expert_padding
from inferplan.specs.hardware import GIB, load_gpu
from inferplan.specs.parallel import Parallelism

MXFP4 = 0.5 + 1 / 32  # e2m1 plus one e8m0 scale per 32 values


@pytest.mark.parametrize(
    ("model", "gpu", "quantization", "expected"),
    [
        ("gpt-oss-120b", "h100", None, (256, 128)),
        ("gpt-oss-20b", "a100", None, (256, 128)),
        ("gpt-oss-120b", "b200", None, None),  # FP4 tensor cores: no Marlin
        ("gpt-oss-120b", "mi300x", None, None),
        ("Llama-3.1-8B", "h100", None, None),
        ("gpt-oss-120b", "h100", "fp8", None),  # experts not MXFP4
    ],
)
def test_which_runs_pad(
    model: str, gpu: str, quantization: str | None, expected: tuple[int, int] | None
) -> None:
    assert vllm_expert_padding(load_model(model), load_gpu(gpu), quantization) == expected


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_padded_expert_by_hand(tp: int) -> None:
    """gpt-oss: 2880 x 2880 experts; hidden to a multiple of 256, per-rank intermediate of 128."""
    ffn = load_model("gpt-oss-120b").layers[0].ffn
    inner = -(-2880 // tp)
    padded = -(-inner // 128) * 128
    assert padded_expert_params(ffn, 2880, tp, MARLIN_MOE_PADDING) == 3 * 3072 * padded
    assert padded_expert_params(ffn, 2880, tp, None) == 3 * 2880 * inner


def test_padding_grows_only_the_routed_experts() -> None:
    spec = load_model("gpt-oss-120b")
    ffn, par = spec.layers[0].ffn, Parallelism()
    plan = plan_memory(spec, load_gpu("h100"), par, MemoryConfig())
    fmt = plan.weight_formats
    plain = ffn_rank_bytes(ffn, spec.hidden_size, par, fmt)
    padded = ffn_rank_bytes(ffn, spec.hidden_size, par, fmt, MARLIN_MOE_PADDING)
    extra = ffn.num_experts * 3 * (3072 * 2944 - 2880 * 2880) * MXFP4
    assert padded - plain == pytest.approx(extra)


def test_gpt_oss_120b_on_one_h100_loads_as_vllm_logs_it() -> None:
    """vLLM (Marlin) logs "Model loading took 65.9651 GiB" for gpt-oss-120b on one H100
    (vllm-project/vllm#23278); the checkpoint itself is 60.8 GiB."""
    plain = plan_memory(load_model("gpt-oss-120b"), load_gpu("h100"), Parallelism(), MemoryConfig())
    padded = plan_memory(
        load_model("gpt-oss-120b"),
        load_gpu("h100"),
        Parallelism(),
        MemoryConfig(expert_padding=MARLIN_MOE_PADDING),
    )
    assert plain.stages[0].weights.total_bytes / GIB == pytest.approx(60.8, abs=0.1)
    assert padded.stages[0].weights.total_bytes / GIB == pytest.approx(65.97, rel=0.005)
    # The KV pool loses what the weights gained.
    lost = plain.stages[0].kv_bytes - padded.stages[0].kv_bytes
    gained = padded.stages[0].weights.total_bytes - plain.stages[0].weights.total_bytes
    assert lost == pytest.approx(gained)


def test_memory_command_pads_for_vllm_only(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--model", "gpt-oss-120b", "--gpu", "h100", "--max-model-len", "32768"]
    weights = {}
    for engine in ("vllm", "sglang"):
        code, out, _ = run(capsys, *argv, "--engine", engine, "--json")
        assert code == 0
        weights[engine] = json.loads(out)["weights_bytes_per_device"]
    assert weights["vllm"] / GIB == pytest.approx(65.97, rel=0.005)
    assert weights["sglang"] / GIB == pytest.approx(60.8, abs=0.1)


def test_validate_pads_the_vllm_gpt_oss_rows_only() -> None:
    pads = {}
    for row in bundled_published():
        if row.case_id.startswith("gpustack") and "gpt-oss" in row.model:
            pads[(row.engine, row.gpu)] = memory_plan(run_setup(row)).config.expert_padding
    assert pads[("vllm", "h100_sxm_80gb")] == MARLIN_MOE_PADDING
    assert pads[("vllm", "a100_sxm_80gb")] == MARLIN_MOE_PADDING
    assert all(pad is None for (engine, _), pad in pads.items() if engine != "vllm")
