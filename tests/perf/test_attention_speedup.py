"""A part's ``attention_prefill_speedup`` (Blackwell Ultra's doubled softmax exponentials)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.memory.plan import weight_formats_for
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.roofline import RooflineModel
from inferplan.specs.dtypes import KV_FORMATS
from inferplan.specs.hardware import load_gpu
from inferplan.specs.model import parse_config
from inferplan.specs.parallel import Parallelism
from perf.perf_helpers import toy_gpu, unit_efficiency

TOY = {  # two Llama layers: 4 query heads and 2 KV heads of 16
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
PEAK = 1e13


def _prefill_attention_s(speedup: float) -> float:
    spec = parse_config(dict(TOY), name="toy", source="toy.json")
    gpu = replace(toy_gpu(bf16_flops=PEAK), attention_prefill_speedup=speedup)
    model = RooflineModel(
        spec,
        gpu,
        Parallelism(),
        weight_formats_for(spec, None),
        KV_FORMATS["bf16"],
        unit_efficiency(attention_compute=0.5),
    )
    chunk = 2048
    batch = StepBatch(
        prefill_tokens=chunk,
        prefill_attention_pairs=chunk_attention_pairs(chunk, 0),
        num_prefill_seqs=1,
    )
    return model.step_time(batch).by_operator_s["attn_prefill"]


def test_prefill_attention_runs_at_the_speedup_over_the_family_rate() -> None:
    """2 layers x 4 FLOPs x 4 heads x 16 dims per causal pair, 2048 * 2049 / 2 pairs, at
    0.5 of the 1e13 peak, then 1.35x faster: compute-bound (the reads are ~1 MB)."""
    flops = 2 * 4 * 4 * 16 * (2048 * 2049 / 2)
    assert _prefill_attention_s(1.0) == pytest.approx(flops / (0.5 * PEAK))
    assert _prefill_attention_s(1.35) == pytest.approx(flops / (0.5 * PEAK * 1.35))


def test_only_blackwell_ultra_parts_carry_a_speedup() -> None:
    assert load_gpu("b300_hgx").attention_prefill_speedup == 1.35
    assert load_gpu("gb300_per_gpu").attention_prefill_speedup == 1.35
    for name in ("b200", "gb200", "h200", "rtx_pro_6000_server"):
        assert load_gpu(name).attention_prefill_speedup == 1.0
