"""An engine's own MoE step pieces, set wherever a step model is built for it.

``validate`` (``published_runs.run_step_model``), ``simulate`` (``cli_flags.DeploymentFlags``)
and the planner (``bounds.step_model``) build their step models apart; each calls
``with_engine_moe`` so that the same engine times its MoE layers alike in all three: the
exchange it runs under attention DP (``run_exchange``) and TensorRT-LLM's expert passes
(``perf/moe_passes.py``)."""

from __future__ import annotations

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.moe_passes import engine_moe_passes
from inferplan.perf.roofline import RooflineModel
from inferplan.plan.closed_form import bench_exchange


def run_exchange(plan: MemoryPlan, engine: str) -> str | None:
    """The MoE exchange a run's engine takes under attention DP, or None for the step model's
    default (``perf/moe_comm.py``): TensorRT-LLM's, ``trtllm-bench`` and ``trtllm-serve`` alike
    (``closed_form.bench_exchange``: an all-gather of the quantised activations and a
    reduce-scatter of the output on the published parts); SGLang's DP attention without a
    DeepEP backend (none of the table's runs states ``--moe-a2a-backend``) gathers every rank's
    BF16 hidden states before the MoE layer quantises them and reduce-scatters its output
    (``layers/dp_attention.py`` ``dp_gather_partial``, ``dp_reduce_scatter_tensor``)."""
    if engine == "trtllm":
        return bench_exchange(plan)
    dp_moe = plan.spec.moe_ffn is not None and plan.parallelism.attention_dp > 1
    if engine == "sglang" and dp_moe:
        return "allgather_bf16"
    return None


def with_engine_moe(model: RooflineModel, plan: MemoryPlan, engine: str) -> None:
    """Set ``engine``'s MoE exchange (where it differs from the default) and expert passes."""
    exchange = run_exchange(plan, engine)
    if exchange is not None:
        model.moe_exchange = exchange
    model.moe_passes = engine_moe_passes(engine)
