"""The closed-form prediction of ``trtllm-bench``'s offline fixed-length runs (moved from
``published_runs.py``, whose docstring describes it): ``B`` sequence slots kept full, each
request a prefill step plus ``OSL - 1`` decode steps, from the step-time model."""

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


def _decode_batch(rows: int, context: int) -> StepBatch:
    return StepBatch(num_decode_seqs=rows, decode_context_tokens=rows * context)


def schedule(
    batch: int, per_step: int, osl: int, requests: int
) -> dict[str, tuple[int, float, float]]:
    """The run's steps in four classes, each ``(steps, prompts, decode rows)`` per step (means):
    ``ramp``, the prefill steps that first fill the slots; ``refill``, the prefill steps that
    admit a queued request into the slots a finished group left; ``full``, the decode steps with
    every slot decoding; ``drain``, the decode steps after the last refill, as slots empty.

    ``k = min(per_step, batch)`` prompts enter a step (``max_num_tokens // ISL``) and a request
    holds its slot for ``osl`` steps (its prefill step, then ``osl - 1`` decodes), so at most
    ``k * osl`` slots are ever busy: ``B = min(batch, k * osl)`` of them in ``G = ceil(B / k)``
    groups, a group's slots refilled ``osl`` steps after it entered. With ``requests = W B + r``:
    ``G`` ramp steps, ``ceil((requests - B) / k)`` refill steps, ``W (osl - G)`` full steps, and
    a drain of ``G - 1`` steps (``r = 0``) or ``osl - 1`` (the last refill's requests decode
    alone). Every request decodes ``osl - 1`` times, the decodes of the prefill steps among them:
    the rows of all classes sum to ``requests * (osl - 1)``."""
    k = min(per_step, batch)
    slots = min(batch, k * osl)
    groups = math.ceil(slots / k)
    waves, rest = divmod(requests, slots)
    refills = math.ceil((requests - slots) / k)
    ramp = (groups, slots / groups, k * (groups - 1) / 2)
    refill = (refills, (requests - slots) / max(refills, 1), float(slots - k))
    full = (waves * max(osl - groups, 0), 0.0, float(slots))
    drain_steps = osl - 1 if rest else groups - 1
    placed = sum(n * rows for n, _, rows in (ramp, refill, full))
    left = max(requests * (osl - 1) - placed, 0.0)
    drain = (drain_steps, 0.0, left / drain_steps if drain_steps > 0 else 0.0)
    return {"ramp": ramp, "refill": refill, "full": full, "drain": drain}


def steady_state_throughput(
    plan: MemoryPlan, step: StepTimeModel, isl: int, osl: int, num_requests: int
) -> tuple[float, float] | None:
    """(output tok/s, request/s) of an offline fixed-length run, or None if nothing fits.

    ``B`` requests run at once; as each finishes, a queued one takes its slot at the next step
    (in-flight batching): ``schedule`` counts the steps. Step times are affine in the decode rows
    and contexts they carry, so each class of steps is timed at its mean. A prefill step's
    decodes attend to ``ISL + 1`` tokens in the steps that fill the slots, the others to the
    mean context ``ISL + OSL / 2``.

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
    steps = schedule(batch, per_step, osl, num_requests)
    mean = isl + osl // 2
    total_s = 0.0
    for name, (count, prompts, rows) in steps.items():
        if count <= 0:
            continue
        # The decodes of the steps that fill the slots have just begun: ISL + 1 tokens each.
        context = isl + 1 if name == "ramp" else mean
        if prompts > 0:
            batch_of = _prefill_batch(round(prompts), isl, round(rows), context)
        else:
            batch_of = _decode_batch(max(1, round(rows)), context)  # a step decodes one at least
        total_s += count * step.step_time(batch_of).total_s
    return num_requests * osl / total_s, num_requests / total_s
