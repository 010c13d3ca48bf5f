"""``trtllm-bench``'s offline run under attention DP, rank by rank, as TensorRT-LLM's PyTorch
executor runs it (``plan/closed_form.py`` calls it when ``ATTENTION_DP_RANK_LIMITS`` is on;
built, cross-validated and left off: docs/validation.md, ``adp19``).

What the source says (``tensorrt_llm/_torch/pyexecutor``, the releases of the table):

- Each attention-DP rank runs its own executor: its own scheduler with ``max_batch_size``
  slots and a ``max_num_tokens`` budget, and its own KV pool (``trtp93``); ``trtllm-bench``
  sizes both limits for the whole group and passes them unchanged.
- Rank 0 takes new requests off the shared queue, up to ``tp_size x max_num_active_requests``
  active in all, and deals them to the ranks: round robin in the older executors
  (``_fetch_adp_new_requests``), to the ranks with the fewest active requests and tokens in
  the later ones (``executor_request_queue.py`` ``_balance_requests_across_ranks``). A
  fixed-length run gives each rank ``ceil(N / r)`` requests at most; the busiest ends the run.
- The ranks step in lockstep: every MoE layer all-gathers every rank's tokens, so a step lasts
  as long as the slowest rank's attention and dense layers, and the fused MoE runs the gathered
  rows, padded to the largest rank's count where the model pads (``use_dp_padding``; ``moe18``).
- A fixed-length run dealt evenly keeps the ranks' prompts in the same steps: each rank fills
  and refills its slots on the same schedule, so the ranks prefill together (the imbalance of
  TensorRT-LLM's ADP-balance blog, ranks prefilling at steps of their own, is the online
  picture; ``attention_dp_config.enable_balance`` exists to restore this alignment there).

The model: one rank's run in closed form (``closed_form.schedule`` on the rank's own limits,
pool and ``ceil(N / r)`` requests); each class of steps timed as ``r`` copies of that rank's
batch: the step model gives each rank ``1 / r`` of a step's tokens and the routed experts all
of them, so the rank-local work is the busiest rank's and the experts run ``r`` times its
rows, the padded gather. No constant."""

from __future__ import annotations

import math

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.protocol import StepTimeModel
from inferplan.plan.closed_form import run_seconds


def rank_limits(plan: MemoryPlan, isl: int, osl: int, num_requests: int) -> tuple[int, int, int]:
    """(slots in use, token budget, requests) of the busiest attention-DP rank: its own
    ``max_batch_size`` (times ``pp``) bounded by its own KV pool and its ``ceil(N / r)``
    requests, and its own ``max_num_tokens`` (times ``pp``)."""
    cfg, par = plan.config, plan.parallelism
    ranks, pp = par.attention_dp, par.pp
    requests = math.ceil(num_requests / ranks)
    blocks_per_request = math.ceil((isl + osl) / cfg.block_size)
    pool = (plan.num_blocks // ranks) // blocks_per_request
    batch = min(cfg.max_num_seqs * pp, requests, pool)
    return batch, pp * cfg.max_num_batched_tokens, requests


def rank_run_seconds(
    plan: MemoryPlan, step: StepTimeModel, isl: int, osl: int, num_requests: int
) -> float | None:
    """Seconds of an offline fixed-length run of ``num_requests`` under attention DP, rank by
    rank (the module docstring); None if one request's KV does not fit a rank's pool."""
    ranks = plan.parallelism.attention_dp
    batch, budget, requests = rank_limits(plan, isl, osl, num_requests)
    if batch < 1:
        return None
    return run_seconds(step, batch, budget, isl, osl, requests, ranks=ranks)
