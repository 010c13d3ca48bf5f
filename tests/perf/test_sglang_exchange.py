"""SGLang's DP-attention MoE exchange (``perf/moe_comm.py`` ``allgather_bf16``): every rank's
BF16 hidden states gathered before the MoE layer quantises them, the output reduce-scattered
(``plan/published_runs.py`` ``run_exchange``)."""

from __future__ import annotations

import pytest

from inferplan.perf.moe_comm import moe_exchange_s
from inferplan.specs.dtypes import WEIGHT_FORMATS
from inferplan.specs.parallel import Parallelism

from .perf_helpers import toy_gpu, unit_efficiency

GPU = toy_gpu(scale_up_bytes_s=1e11, scale_up_domain_size=8)


def test_sglangs_gather_carries_bf16_whatever_the_experts_format() -> None:
    """1,000 tokens x 4,096 values over 4 DP-attention ranks with FP8 experts: SGLang gathers
    the 2-byte hidden states (3/4 of 8.192 MB in) and reduce-scatters the 2-byte output (3/4
    out), where TensorRT-LLM gathers the 1-byte quantised activations."""
    eff = unit_efficiency()
    dep4 = Parallelism(tp=1, dp=4, enable_expert_parallel=True)
    values = 1000 * 4096
    fp8 = WEIGHT_FORMATS["fp8"]
    sglang = moe_exchange_s("allgather_bf16", values, 0.5, dep4, fp8, GPU, eff)
    assert sglang == pytest.approx(2 * 0.75 * values * 2.0 / 1e11)
    trtllm = moe_exchange_s("allgather", values, 0.5, dep4, fp8, GPU, eff)
    assert trtllm == pytest.approx(0.75 * values * 3.0 / 1e11)
    bf16 = WEIGHT_FORMATS["bf16"]
    assert moe_exchange_s("allgather_bf16", values, 0.5, dep4, bf16, GPU, eff) == sglang
    tp4 = Parallelism(tp=4, enable_expert_parallel=True)  # no attention DP: the all-to-all path
    alltoall = moe_exchange_s("alltoall", values, 0.5, tp4, fp8, GPU, eff)
    assert moe_exchange_s("allgather_bf16", values, 0.5, tp4, fp8, GPU, eff) == alltoall
