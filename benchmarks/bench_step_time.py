"""How long one step-time evaluation takes: ``step_time`` (any batch) and ``decode_line`` (the
fast simulator's pure-decode stretch), in microseconds per call.

Three deployments cover the model's code paths: Llama-3.1-8B on one H100 (dense GQA),
DeepSeek-R1 on 8 H200 with expert parallelism (MLA, MoE with shared experts, all-to-all) and
gpt-oss-120b on one H100 (sliding windows, mxfp4 experts). Each call cycles through a fixed set of
batch shapes (decode batches of 1-512 sequences at 100-32k tokens of context, plus chunked-prefill
mixes for ``step_time``), so caches see the same steady state a simulation run does. Reported:
the median over repeats of the mean time per call. Target: well under 50 us per call.
``decode_line`` caches a line per batch size with the context range it holds for; the
``decode_line_uncached`` figures time the computation behind a cache miss.

Run alone with ``python -m benchmarks.bench_step_time``.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable, Sequence
from functools import partial

from inferplan.memory.plan import MemoryConfig, plan_memory
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.factory import build_step_model
from inferplan.perf.protocol import StepTimeModel
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism

DEPLOYMENTS: dict[str, tuple[str, str, Parallelism]] = {
    "llama-3.1-8b_h100_tp1": ("Llama-3.1-8B", "h100", Parallelism()),
    "deepseek-r1_h200_tp8_ep": (
        "DeepSeek-R1",
        "h200",
        Parallelism(tp=8, enable_expert_parallel=True),
    ),
    "gpt-oss-120b_h100_tp1": ("gpt-oss-120b", "h100", Parallelism()),
}
DECODE_SHAPES = [(n, c) for n in (1, 7, 32, 128, 512) for c in (100, 1000, 8000, 32000)]
REPEATS = 7
TARGET_S_PER_REPEAT = 0.1


def build(model: str, gpu: str, par: Parallelism) -> StepTimeModel:
    plan = plan_memory(load_model(model), load_gpu(gpu), par, MemoryConfig(max_model_len=32768))
    return build_step_model(plan)


def step_batches() -> list[StepBatch]:
    batches = [StepBatch(num_decode_seqs=n, decode_context_tokens=n * c) for n, c in DECODE_SHAPES]
    for decodes, chunk, cached in ((0, 2048, 0), (31, 1024, 3000), (255, 512, 7000)):
        batches.append(
            StepBatch(
                prefill_tokens=chunk,
                prefill_attention_pairs=chunk_attention_pairs(chunk, cached),
                prefill_context_tokens=cached,
                num_prefill_seqs=1,
                num_decode_seqs=decodes,
                decode_context_tokens=decodes * 1500,
            )
        )
    return batches


def per_call_us(calls: Sequence[Callable[[], object]]) -> float:
    """Median over repeats of the mean microseconds per call, cycling through ``calls``."""

    def run_all() -> None:
        for call in calls:
            call()

    timer = timeit.Timer(run_all)
    loops, elapsed = timer.autorange()  # also warms every cache once
    loops = max(1, int(loops * TARGET_S_PER_REPEAT / max(elapsed, 1e-9)))
    times = timer.repeat(repeat=REPEATS, number=loops)
    return statistics.median(times) / (loops * len(calls)) * 1e6


def measure(model: StepTimeModel) -> tuple[float, float, float]:
    steps = [partial(model.step_time, batch) for batch in step_batches()]
    lines = [partial(model.decode_line, n, n * c) for n, c in DECODE_SHAPES]
    compute_line = getattr(model, "_decode_line", model.decode_line)
    uncached = [partial(compute_line, n, n * c) for n, c in DECODE_SHAPES]
    return per_call_us(steps), per_call_us(lines), per_call_us(uncached)


def main() -> dict[str, float]:
    results: dict[str, float] = {}
    for label, (model, gpu, par) in DEPLOYMENTS.items():
        step_us, line_us, uncached_us = measure(build(model, gpu, par))
        results[f"{label}/step_time_us"] = step_us
        results[f"{label}/decode_line_us"] = line_us
        results[f"{label}/decode_line_uncached_us"] = uncached_us
    return results


if __name__ == "__main__":
    for key, value in main().items():
        print(f"{key:48s} {value:10.2f}")
