"""A step's fixed costs under pipeline parallelism: the host's work and the kernel launches.

The step model times a step as ``pp`` passes of one micro-batch through a stage
(``perf/roofline.py`` ``pipeline_factor``), with ``m = min(pp, sequences)`` micro-batches in
flight. The fixed costs follow the same schedule:

- the host schedules, prepares and samples each micro-batch on its own (vLLM v1's batch queue,
  ``vllm/v1/engine/core.py`` ``step_with_batch_queue``: one ``schedule()`` per queued batch;
  TensorRT-LLM's PyTorch executor, ``_executor_loop_pp``: one scheduling pass per micro-batch),
  so a step pays the fixed per-step host work ``step_overhead_s`` ``m`` times; the
  per-sequence work is paid once per sequence, as before;
- each stage launches its layers' kernels for every micro-batch it runs, so the per-layer
  launch floor (``layer_overhead_s``, ``eager_layer_overhead_s``) is part of a stage pass and
  is multiplied by ``pp`` like the operators: ``pp x stage_layers`` launches per step, not one
  stage's.

Without pipeline parallelism (``m = pp = 1``) both readings give the same float.
``PIPELINE_MICROBATCH_COSTS`` off restores the earlier reading (host work and one stage's
launches once per step); measured in docs/validation.md (``comm18``).
"""

from __future__ import annotations

from inferplan.perf.batch import StepBatch
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.overlap import host_s

PIPELINE_MICROBATCH_COSTS = True


def stage_pass_overhead_s(
    eff: Efficiency,
    batch: StepBatch,
    *,
    attention_dp: int,
    stage_layers: int,
    microbatches: int,
    pipeline_factor: float,
    eager: bool,
) -> float:
    """The step's fixed costs per stage pass: the caller multiplies by ``pipeline_factor``."""
    host = host_s(eff, batch, attention_dp)
    launches = eff.layer_overhead_s * stage_layers
    once = host + launches  # summed in this order so that pp = 1 repeats the earlier floats
    if eager:
        once += eff.eager_layer_overhead_s * stage_layers
        launches += eff.eager_layer_overhead_s * stage_layers
    if not PIPELINE_MICROBATCH_COSTS or pipeline_factor == 1:
        return once / pipeline_factor
    host += (microbatches - 1) * eff.step_overhead_s
    return host / pipeline_factor + launches
