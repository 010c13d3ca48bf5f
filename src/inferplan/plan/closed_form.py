"""The closed-form prediction of ``trtllm-bench``'s offline fixed-length runs (moved from
``published_runs.py``, whose docstring describes it): waves of ``B`` requests, each its
prefill steps plus ``OSL - 1`` decode steps at the mean context, from the step-time model."""

from __future__ import annotations

import math

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.protocol import StepTimeModel


def _prefill_batch(num: int, tokens: int, decodes: int, context: int) -> StepBatch:
    return StepBatch(
        prefill_tokens=num * tokens,
        prefill_attention_pairs=num * chunk_attention_pairs(tokens, 0),
        num_prefill_seqs=num,
        num_decode_seqs=decodes,
        decode_context_tokens=decodes * context,
    )


def _wave_s(step: StepTimeModel, batch: int, per_step: int, isl: int, osl: int) -> float:
    """One wave of ``batch`` requests: its prefill steps, then ``osl - 1`` decode steps."""
    # Full prefill steps carry 0, k, 2k, ... decodes: their times are close to affine in that
    # count, so the midpoint step times their number (exact for an affine step time).
    per_step = min(per_step, batch)
    full, rest = divmod(batch, per_step)
    wave_s = 0.0
    if full:
        middle = per_step * (full - 1) // 2
        wave_s += full * step.step_time(_prefill_batch(per_step, isl, middle, isl + 1)).total_s
    if rest:
        wave_s += step.step_time(_prefill_batch(rest, isl, full * per_step, isl + 1)).total_s
    if osl > 1:
        decode = StepBatch(num_decode_seqs=batch, decode_context_tokens=batch * (isl + osl // 2))
        wave_s += (osl - 1) * step.step_time(decode).total_s
    return wave_s


def steady_state_throughput(
    plan: MemoryPlan, step: StepTimeModel, isl: int, osl: int, num_requests: int
) -> tuple[float, float] | None:
    """(output tok/s, request/s) of an offline fixed-length run, or None if nothing fits.

    ``num_requests`` run in waves of ``B`` (every slot serves its requests one after another);
    the last ``num_requests mod B`` make a smaller wave of their own, which still pays every
    step's fixed costs (weights read, host overheads) for ``osl`` steps.

    Under pipeline parallelism ``max_batch_size`` and ``max_num_tokens`` bound one micro-batch:
    ``trtllm-bench`` divides the KV-cache's request count by ``pp`` to get ``max_batch_size``
    (``bench/build/tuning.py``), and the PyTorch executor keeps ``pp`` micro-batches in flight,
    sizing its sequence slots and capacity scheduler at ``max_batch_size * pp_size``
    (``_torch/pyexecutor/py_executor_creator.py``, ``_util.py``). So ``B`` and the prompts
    admitted per step (one micro-batch per stage) are ``pp`` times the per-micro-batch limits."""
    cfg = plan.config
    pp = plan.parallelism.pp
    blocks_per_request = math.ceil((isl + osl) / cfg.block_size)
    batch = min(cfg.max_num_seqs * pp, num_requests, plan.num_blocks // blocks_per_request)
    if batch < 1:
        return None
    per_step = max(1, min(batch, pp * (cfg.max_num_batched_tokens // max(isl, 1))))
    waves, last = divmod(num_requests, batch)
    total_s = waves * _wave_s(step, batch, per_step, isl, osl)
    if last:
        total_s += _wave_s(step, last, per_step, isl, osl)
    return num_requests * osl / total_s, num_requests / total_s
