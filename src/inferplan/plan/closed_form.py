"""The closed-form prediction of ``trtllm-bench``'s offline fixed-length runs (moved from
``published_runs.py``, whose docstring describes it): ``B`` sequence slots kept full, each
request a prefill step plus ``OSL - 1`` decode steps, from the step-time model.

How many prompts a step admits follows TensorRT-LLM's micro-batch scheduler
(``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp``): every generation request in the
step takes one token of ``max_num_tokens`` and each context request its prompt, so the prompts
share the budget with the decodes they run beside (``admitted_per_step``).

Under attention DP an expert-parallel MoE layer exchanges its tokens the way TensorRT-LLM's
PyTorch backend does (``perf/moe_comm.py`` ``trtllm_moe_exchange``: an all-gather of the
quantised activations and a reduce-scatter of the BF16 output, unless the group is a multi-node
NVLink domain with more EP ranks than ``top_k``), not the generic all-to-all: ``bench_exchange``
chooses it (``TRTLLM_MOE_EXCHANGE``; docs/validation.md, ``hopdep16``) and
``published_runs.run_step_model`` sets it on the run's step model where it builds it.

The host's per-step work runs at the host CPU's speed, set on the run's model where
``run_step_model`` builds it (``perf/overlap.py`` ``on_host``: a Grace-hosted GH200, GB200 or
GB300 takes the release's ``grace_host`` times an x86 server's; 1, the same, as committed: the
refit with the overlap scheduler's ``max(GPU, host)`` did not cross-validate better,
docs/validation.md ``grace17``)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.batch import StepBatch, chunk_attention_pairs
from inferplan.perf.moe_comm import trtllm_moe_exchange
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel

# Attention-DP ranks each hold max_batch_size, max_num_tokens, their own KV pool and share of
# the requests, timed rank by rank (plan/adp_steps.py): built, measured and left off
# (docs/validation.md, `trtp93`, `adp19`): the rows want the old reading.
ATTENTION_DP_RANK_LIMITS = False
# The attention-DP MoE layers exchange tokens as TensorRT-LLM does (all-gather + reduce-scatter
# on the bundled parts), not by the generic all-to-all (docs/validation.md, `hopdep16`).
TRTLLM_MOE_EXCHANGE = True
# A step that carries a prompt runs eagerly (no CUDA graph), and the executor's thread launches
# its kernels one by one, so none of the next step's host work hides behind it; only a graph
# replay frees the host (``eager_step_model``). Built, measured and left off
# (docs/validation.md, ``trt1019``).
EAGER_STEPS_HIDE_NO_HOST = False


def bench_exchange(plan: MemoryPlan) -> str | None:
    """The MoE exchange TensorRT-LLM runs for ``plan`` (``trtllm_moe_exchange``), or None where
    the model has no routed experts or the replica no attention DP (the layer all-reduces)."""
    par, moe = plan.parallelism, plan.spec.moe_ffn
    if not TRTLLM_MOE_EXCHANGE or moe is None or par.attention_dp < 2:
        return None
    return trtllm_moe_exchange(moe.num_experts_per_tok, par, plan.gpu)


def eager_step_model(step: StepTimeModel) -> StepTimeModel:
    """The model that times a step with a prompt in it: ``step`` with nothing of the host's
    work hidden behind the GPU's (``host_overlap`` 0), when ``EAGER_STEPS_HIDE_NO_HOST``.

    TensorRT-LLM's overlap loop (``_torch/pyexecutor/py_executor.py``
    ``_executor_loop_overlap``) prepares step ``n + 1`` and processes step ``n - 1``'s results
    while the GPU runs step ``n``. A pure decode replays a captured CUDA graph: one launch, and
    the host is free at once. A step with a context request cannot replay a graph (the
    perf-overview runs capture decode batches only), so the executor's thread is the one
    launching its layers' kernels through PyTorch while the GPU runs them: the host work of the
    neighbouring steps waits for the launches. On a slower host (Grace, ``perf/overlap.py``
    ``on_host``) that serial work grows with the share of such steps: the GB200 / B200 pairs of
    one release, model and lengths measure 0.61-0.85 where most steps carry a prompt and
    1.04-1.09 where almost none do (docs/validation.md, ``trt1019``). Other models, and
    ``step`` when off or without an overlap: ``step`` itself."""
    if not EAGER_STEPS_HIDE_NO_HOST or not isinstance(step, RooflineModel):
        return step
    if step.eff.host_overlap == 0.0:
        return step
    eager = copy.copy(step)  # shares the operators' caches (GPU work only)
    eager.eff = replace(step.eff, host_overlap=0.0)
    eager._lines = {}  # its own decode lines: the run's hide the host work (``_line``)
    return eager


def _prefill_batch(num: float, tokens: int, decodes: int, context: int) -> StepBatch:
    """A step with ``num`` prompts' worth of prefill (a mean: chunks of a prompt count their
    share of its tokens and of its causal attention pairs) beside ``decodes`` decodes."""
    return StepBatch(
        prefill_tokens=round(num * tokens),
        prefill_attention_pairs=num * chunk_attention_pairs(tokens, 0),
        num_prefill_seqs=max(1, round(num)),
        num_decode_seqs=decodes,
        decode_context_tokens=decodes * context,
    )


def _decode_batch(rows: int, context: int) -> StepBatch:
    return StepBatch(num_decode_seqs=rows, decode_context_tokens=rows * context)


def admitted_per_step(budget: int, isl: int, osl: int, batch: int) -> float:
    """The mean prompts a step admits while the run is in flight: TensorRT-LLM's micro-batch
    scheduler charges each generation request one token of ``max_num_tokens`` (``budget``)
    before it places a prompt, so ``k`` prompts fit beside the ``S - k`` slots decoding when
    ``(S - k) + k ISL <= budget``, with ``S = min(batch, k OSL)`` busy slots (a request holds its
    slot ``OSL`` steps). Prompt-bound (``k OSL <= batch``): ``k = budget / (ISL + OSL - 1)``;
    slot-bound: ``k = (budget - batch) / (ISL - 1)``; a fractional ``k`` is the mean over steps
    that admit ``floor(k)`` or ``ceil(k)`` whole prompts, at most ``budget // ISL``.
    ``trtllm-bench`` raises ``max_num_tokens`` to ``ISL + max_batch_size``
    (``plan/trtllm_bench.py``), so at least one prompt always fits beside a full batch. (With
    chunked context, ``trtllm-bench``'s default from the v1.1 documentation revision on, the
    leftover budget takes part of a prompt: the same means, since the raised budget leaves
    less than one prompt's worth over; not modelled apart.)"""
    whole = float(budget // isl)
    prompt_bound = budget / (isl + osl - 1)
    if prompt_bound * osl <= batch or isl <= 1:
        return min(whole, prompt_bound)
    return min(whole, max(1.0, (budget - batch) / (isl - 1)))


def schedule(
    batch: int, per_step: float, osl: int, requests: int
) -> dict[str, tuple[int, float, float]]:
    """The run's steps in four classes, each ``(steps, prompts, decode rows)`` per step (means):
    ``ramp``, the prefill steps that first fill the slots; ``refill``, the prefill steps that
    admit a queued request into the slots a finished group left; ``full``, the decode steps with
    every slot decoding; ``drain``, the decode steps after the last refill, as slots empty.

    ``k = min(per_step, batch)`` prompts enter a step (``admitted_per_step``) and a request
    holds its slot for ``osl`` steps (its prefill step, then ``osl - 1`` decodes), so at most
    ``k * osl`` slots are ever busy: ``B = min(batch, k * osl)`` of them in ``G = ceil(B / k)``
    equal groups of ``B / G`` (a fractional ``k`` is a mean over steps), a group's slots
    refilled ``osl`` steps after it entered. With ``requests = W B + r``: ``G`` ramp steps,
    ``ceil((requests - B) G / B)`` refill steps, ``W (osl - G)`` full steps, and
    a drain of ``G - 1`` steps (``r = 0``) or ``osl - 1`` (the last refill's requests decode
    alone). Every request decodes ``osl - 1`` times, the decodes of the prefill steps among them:
    the rows of all classes sum to ``requests * (osl - 1)``."""
    k = min(per_step, batch)
    slots = min(batch, max(1, math.floor(k * osl)))
    groups = math.ceil(slots / k)
    k = slots / groups  # the slots fill in equal groups
    waves, rest = divmod(requests, slots)
    refills = math.ceil((requests - slots) * groups / slots)
    ramp = (groups, k, k * (groups - 1) / 2)
    refill = (refills, (requests - slots) / max(refills, 1), float(slots - k))
    full = (waves * max(osl - groups, 0), 0.0, float(slots))
    drain_steps = osl - 1 if rest else groups - 1
    placed = sum(n * rows for n, _, rows in (ramp, refill, full))
    left = max(requests * (osl - 1) - placed, 0.0)
    drain = (drain_steps, 0.0, left / drain_steps if drain_steps > 0 else 0.0)
    return {"ramp": ramp, "refill": refill, "full": full, "drain": drain}


def steady_state_throughput(
    plan: MemoryPlan,
    step: StepTimeModel,
    isl: int,
    osl: int,
    num_requests: int,
    *,
    python_executor: bool = False,
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
    admitted per step (one micro-batch per stage) are ``pp`` times the per-micro-batch limits.

    Under attention DP each of the ``r`` ranks runs its own scheduler with ``max_batch_size``
    slots and a ``max_num_tokens`` budget, and the request queue admits up to ``r *
    max_batch_size`` active requests in all (``_torch/pyexecutor/executor_request_queue.py``
    ``_fetch_new_requests``: ``tp_size * max_num_active_requests``); ``trtllm-bench`` sizes both
    limits for the whole group (``bench/build/tuning.py``: the group's KV memory) and passes them
    unchanged. So each rank runs the closed form on its own limits, pool and share of the
    requests, the ranks in lockstep (``plan/adp_steps.py``, with ``ATTENTION_DP_RANK_LIMITS``;
    off, the stated limits bound the whole group).

    ``python_executor``: the run's executor is the PyTorch backend's Python loop, whose steps
    with a prompt hide none of the host's work (``eager_step_model``); the C++ flow of the
    TensorRT engines enqueues a whole step at once."""
    if ATTENTION_DP_RANK_LIMITS and plan.parallelism.attention_dp > 1:
        from inferplan.plan.adp_steps import rank_run_seconds  # it builds on this module

        seconds = rank_run_seconds(plan, step, isl, osl, num_requests)
        return None if seconds is None else (num_requests * osl / seconds, num_requests / seconds)
    cfg = plan.config
    pp = plan.parallelism.pp
    blocks_per_request = math.ceil((isl + osl) / cfg.block_size)
    slots = cfg.max_num_seqs * pp
    batch = min(slots, num_requests, plan.num_blocks // blocks_per_request)
    if batch < 1:
        return None
    budget = pp * cfg.max_num_batched_tokens
    eager = eager_step_model(step) if python_executor else None
    total_s = run_seconds(step, batch, budget, isl, osl, num_requests, eager=eager)
    return num_requests * osl / total_s, num_requests / total_s


def run_seconds(
    step: StepTimeModel,
    batch: int,
    budget: int,
    isl: int,
    osl: int,
    num_requests: int,
    *,
    ranks: int = 1,
    eager: StepTimeModel | None = None,
) -> float:
    """Seconds of ``num_requests`` fixed-length requests run ``batch`` at a time with a
    ``budget`` of prompt tokens a step (``schedule``), each class of steps timed at its mean:
    ``ranks`` copies of a step's batch (attention DP's ranks in lockstep, ``plan/adp_steps.py``),
    the steps with a prompt timed by ``eager`` (``eager_step_model``; ``step`` where none)."""
    per_step = min(batch, admitted_per_step(budget, max(isl, 1), osl, batch))
    steps = schedule(batch, max(per_step, 1.0), osl, num_requests)
    mean = isl + osl // 2
    prompt_step = step if eager is None else eager
    total_s = 0.0
    for name, (count, prompts, rows) in steps.items():
        if count <= 0:
            continue
        # The decodes of the steps that fill the slots have just begun: ISL + 1 tokens each.
        context = isl + 1 if name == "ramp" else mean
        if prompts > 0:
            batch_of = _prefill_batch(ranks * prompts, isl, round(ranks * rows), context)
            total_s += count * prompt_step.step_time(batch_of).total_s
        else:  # a step decodes one at least
            batch_of = _decode_batch(max(1, round(ranks * rows)), context)
            total_s += count * step.step_time(batch_of).total_s
    return total_s
