"""``trtllm-bench`` sizes the engine from the checkpoint's stored safetensors elements
(``plan/trtllm_bench.py`` ``bench_param_count``): NVFP4 packs two values per element."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.plan import trtllm_bench
from inferplan.plan.published import bundled_published
from inferplan.plan.trtllm_bench import bench_param_count, trtllm_bench_limits


def test_nvfp4_linear_weights_count_half_a_value_plus_a_scale_per_sixteen() -> None:
    # Llama-3.1-70B: 70.55 B values, of which the two 1.05 B vocabulary tables stay BF16 and
    # 68.45 B are linear weights: 2.10 B + 68.45 B x (1/2 + 1/16) = 40.61 B stored elements.
    assert abs(bench_param_count("Llama-3.1-70B", "nvfp4") - 40.606e9) < 0.01e9
    # FP8 and BF16 checkpoints store one element per value.
    assert bench_param_count("Llama-3.1-70B", "fp8") == 70_553_706_496
    assert bench_param_count("Llama-3.1-70B", "bf16") == 70_553_706_496


def test_the_packed_count_raises_the_batch_heuristic_of_an_nvfp4_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = next(
        r
        for r in bundled_published()
        if r.case_id == "trt10-l70-b200-tp1-fp4" and (r.input_len, r.output_len) == (128, 128)
    )
    model = "meta-llama/Llama-3.1-70B"  # the bundled config of Llama-3.3-70B
    monkeypatch.setattr(trtllm_bench, "PACKED_PARAM_COUNT", True)
    packed = trtllm_bench_limits(row, model, 1.0, 0.95)
    monkeypatch.setattr(trtllm_bench, "PACKED_PARAM_COUNT", False)
    counted = trtllm_bench_limits(row, model, 1.0, 0.95)
    # One B200 (about 179 GiB), FP8 KV of 160 KiB a token, 256 tokens a request, 0.95: a
    # packed 18.9 GiB engine leaves room for 3,892 requests (rounded up to 4,096; tokens 2x),
    # the 32.9 GiB of 70.6 B values at 0.5 bytes for 3,553 (3,584).
    assert packed == (4096, 8192)
    assert counted == (3584, 7168)
    fp8 = replace(row, weights_dtype="fp8")
    assert trtllm_bench_limits(fp8, model, 1.0, 0.95)[0] < counted[0]
