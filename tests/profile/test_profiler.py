"""The profiler on the CPU (tiny shapes): the CSV it writes loads as an operator table, has
every operator the model runs with positive finite times, and drives the table step-time model.
Skipped where PyTorch is not installed (``make torch-cpu``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from inferplan.cli_flags import build_memory_plan
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.factory import build_step_model
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.table import LAYER_OPERATORS, TableModel, load_operator_table
from inferplan.profile import profile_to_csv

pytest.importorskip("torch")

# Dense GQA; MoE; MoE with sliding windows and mxfp4 experts; MLA with shared experts and
# dense-first layers; hybrid linear attention.
MODELS = (
    "Llama-3.1-8B",
    "Qwen3-30B-A3B",
    "gpt-oss-20b",
    "DeepSeek-V3",
    "Qwen3-Next-80B-A3B-Thinking",
)


def plan_of(model: str) -> MemoryPlan:
    return build_memory_plan(model, "h100", 1, 1, False, None, "auto", None, 0.9, None, None, None)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("profiles")
    out = {}
    for model in MODELS:
        out[model] = folder / f"{model}.csv"
        profile_to_csv(plan_of(model), out[model], gpu_name="ci-cpu", device="cpu", tiny=False)
    return out


@pytest.mark.parametrize("model", MODELS)
def test_the_profile_has_every_operator_the_model_runs(
    profiles: dict[str, Path], model: str
) -> None:
    table = load_operator_table(profiles[model])
    roofline = build_step_model(plan_of(model))
    assert isinstance(roofline, RooflineModel)
    probe = TableModel(roofline, table)
    expected = {op for op in LAYER_OPERATORS if probe._layers_running(op)} | {"lm_head"}
    assert set(table.grid) == expected
    for by_tokens in table.grid.values():
        for _, times in by_tokens.values():
            assert all(math.isfinite(t) and t > 0 for t in times)


@pytest.mark.parametrize("model", ["Llama-3.1-8B", "Qwen3-30B-A3B"])
def test_decode_attention_grows_with_context(profiles: dict[str, Path], model: str) -> None:
    decode = load_operator_table(profiles[model]).grid["attn_decode"]
    for contexts, times in decode.values():
        # 64 to 4096 tokens per sequence: 64x the KV read, far beyond timing noise
        assert contexts[0] < contexts[-1] and times[-1] > times[0]


@pytest.mark.parametrize("model", MODELS)
def test_the_table_model_gives_finite_step_times(profiles: dict[str, Path], model: str) -> None:
    step_model = build_step_model(plan_of(model), table_path=profiles[model])
    batches = [
        StepBatch(num_decode_seqs=4, decode_context_tokens=4 * 700),
        StepBatch(
            prefill_tokens=48,
            prefill_attention_pairs=chunk_attention_pairs(48, 100),
            prefill_context_tokens=100,
            num_prefill_seqs=1,
        ),
    ]
    for batch in batches:
        step = step_model.step_time(batch)
        assert math.isfinite(step.total_s) and step.total_s > 0
    a, b, _ = step_model.decode_line(4, 2800)
    assert math.isfinite(a) and math.isfinite(b)


def test_the_csv_records_its_provenance_and_warns(profiles: dict[str, Path]) -> None:
    lines = profiles["Llama-3.1-8B"].read_text().splitlines()
    comments = [line for line in lines if line.startswith("#")]
    assert lines[: len(comments)] == comments  # comments first, then the header and rows
    assert lines[len(comments)] == "operator,num_tokens,context_tokens,time_s"
    text = "\n".join(comments)
    assert "gpu-name: ci-cpu" in text and "device: cpu" in text
    assert "NOT FOR PLANNING" in text and "all-reduce not measured (tp is 1)" in text


def test_allreduce_over_two_cpu_ranks() -> None:
    """The all-reduce worker, on gloo: the CLI only runs it over CUDA devices."""
    from inferplan.profile.allreduce import measure_allreduce

    times = measure_allreduce(64, [1, 256], world=2, backend="gloo", warmup=1, repeats=3)
    assert sorted(times) == [1, 256]
    assert all(math.isfinite(t) and t > 0 for t in times.values())
