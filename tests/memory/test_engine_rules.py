"""Each engine's own KV-pool rule (memory/plan.py), by hand from the engines' sources
(shared/notes/engines.md 2 and 3): TensorRT-LLM takes a fraction of the memory free after
weights and warm-up; SGLang gives weights + KV a static fraction of the memory at start."""

import pytest

from inferplan.cli import main
from inferplan.cli_flags import build_memory_plan
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig, MemoryPlan
from inferplan.specs.engines import sglang_mem_fraction_static
from inferplan.specs.hardware import GIB, load_gpu


def _plan(
    engine: str,
    kv_cache_free_gpu_mem_fraction: float | None = None,
    mem_fraction_static: float | None = None,
) -> MemoryPlan:
    return build_memory_plan(
        "Llama-3.1-8B", "h100", 1, 1, False, None, "auto", 8192, 0.9, None, None, None, engine,
        kv_cache_free_gpu_mem_fraction=kv_cache_free_gpu_mem_fraction,
        mem_fraction_static=mem_fraction_static,
    )  # fmt: skip


def test_trtllm_kv_is_a_fraction_of_what_is_free_after_weights() -> None:
    plan = _plan("trtllm", kv_cache_free_gpu_mem_fraction=0.8)
    stage = plan.worst_stage
    free = load_gpu("h100").memory_bytes - stage.weights.total_bytes
    free -= stage.activation_bytes + stage.reserve_bytes
    assert stage.kv_bytes == pytest.approx(0.8 * free, rel=1e-12)
    assert plan.config.block_size == 32
    default = _plan("trtllm").worst_stage.kv_bytes
    assert default == pytest.approx(0.9 * free, rel=1e-12)  # TensorRT-LLM's default 0.9


def test_sglang_static_fraction_holds_weights_and_kv() -> None:
    plan = _plan("sglang", mem_fraction_static=0.8)
    stage = plan.worst_stage
    total = load_gpu("h100").memory_bytes
    assert stage.kv_bytes == pytest.approx(0.8 * total - stage.weights.total_bytes - 0.5 * GIB)
    assert plan.budget_bytes == pytest.approx(0.8 * total)


def test_sglang_default_fraction_matches_its_published_values() -> None:
    """0.835 on an H100 at TP1, 0.907 on an H200, 0.818 on an H100 at TP8."""
    assert sglang_mem_fraction_static(load_gpu("h100"), 1) == 0.835
    assert sglang_mem_fraction_static(load_gpu("h200"), 1) == 0.907
    assert sglang_mem_fraction_static(load_gpu("h100"), 8) == 0.818
    assert _plan("sglang").config.mem_fraction_static == 0.835


def test_sglang_dp_attention_fraction_by_hand() -> None:
    """8 H200 (143,771 MiB each as nvidia-smi reports them) with ``--tp 8``: R = 512 +
    1.5 x 8192 + 2 x 512 + 1024 = 14,848 MiB; with ``--dp-size 8 --enable-dp-attention``
    (inferplan's attention TP1 x DP8) SGLang's tp_size is still 8 and R grows by
    512 x 8 x (3 + 1.5) = 18,432 MiB of DP padding (``cuda_graph_max_bs`` 512 > 300)."""
    h200 = load_gpu("h200")
    assert sglang_mem_fraction_static(h200, 8) == round((143_771 - 14_848) / 143_771, 3) == 0.897
    dp8 = round((143_771 - 14_848 - 18_432) / 143_771, 3)
    assert sglang_mem_fraction_static(h200, 1, 1, 8) == dp8 == 0.769
    dp4 = round((143_771 - 14_848 - 512 * 4 * 4.5) / 143_771, 3)  # tp_size 8, dp_size 4
    assert sglang_mem_fraction_static(h200, 2, 1, 4) == dp4 == 0.833
    # ``--tp 8 --enable-dp-attention`` without ``--dp-size``: TP8, padded as for dp_size 1.
    flag_only = round((143_771 - 14_848 - 512 * 1 * 4.5) / 143_771, 3)
    assert sglang_mem_fraction_static(h200, 8, dp_flag=True) == flag_only == 0.881


def test_each_rule_gives_a_different_pool_and_vllm_is_unchanged() -> None:
    vllm = _plan("vllm").worst_stage
    total = load_gpu("h100").memory_bytes
    used = vllm.weights.total_bytes + vllm.activation_bytes + vllm.reserve_bytes
    assert vllm.kv_bytes == pytest.approx(0.9 * total - used)
    assert _plan("trtllm").worst_stage.kv_bytes > vllm.kv_bytes  # 0.9 of free > 0.9 of total


def test_fraction_flags_belong_to_their_engine() -> None:
    with pytest.raises(InferplanError, match="--mem-fraction-static: applies to --engine sglang"):
        _plan("vllm", mem_fraction_static=0.8)
    with pytest.raises(InferplanError, match="--kv-cache-free-gpu-mem-fraction: applies to"):
        _plan("sglang", kv_cache_free_gpu_mem_fraction=0.8)
    with pytest.raises(InferplanError, match=r"must be in \(0, 1\]"):
        MemoryConfig(mem_fraction_static=1.5)
    with pytest.raises(InferplanError, match="two engines' rules"):
        MemoryConfig(kv_cache_free_gpu_mem_fraction=0.9, mem_fraction_static=0.8)


def test_cli_reaches_each_rule(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["memory", "--model", "Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "8192"]
    assert main([*base, "--engine", "trtllm", "--kv-cache-free-gpu-mem-fraction", "0.5"]) == 0
    assert main([*base, "--engine", "sglang", "--mem-fraction-static", "0.7"]) == 0
    capsys.readouterr()
    assert main([*base, "--mem-fraction-static", "0.7"]) == 2
    assert capsys.readouterr().err.startswith("error: --mem-fraction-static: applies to")


def test_does_not_fit_names_the_engines_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B BF16 on two A100s: SGLang's static fraction (0.834 of 79.5 GiB = 66.3 GiB)
    cannot hold 65.7 GiB of weights and 1 GiB of runtime; the message says which rule."""
    base = ["memory", "--model", "Llama-3.1-70B", "--gpu", "a100", "-tp", "2"]
    assert main([*base, "--max-model-len", "8192", "--engine", "sglang"]) == 1
    err = capsys.readouterr().err
    assert "weights and runtime need 66.7 GiB per device" in err
    assert "(mem_fraction_static 0.834)" in err
