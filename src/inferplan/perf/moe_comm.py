"""The communication of one expert-parallel MoE layer: all-to-all, or all-gather + reduce-scatter.

Two ways to bring every attention rank's tokens to the experts and their outputs back:

- ``alltoall`` (DeepEP, TensorRT-LLM's MNNVL all-to-all, vLLM's ``deepep_*`` / ``pplx``
  backends): a token travels once to each rank that holds one of its experts, so the busiest
  receiver gets ``T (ep-1)/ep * h_max * H`` activations in the dispatch (``h_max``: the largest
  per-rank dispatch probability, ``perf/moe.py``) and sends as many back in the combine.
- ``allgather`` (TensorRT-LLM's attention-DP MoE whenever its all-to-all is off, vLLM's default
  ``allgather_reducescatter`` backend, SGLang's DP-attention gather): every rank gathers every
  other rank's tokens, whether any of its experts is picked or not, runs its experts on them and
  reduce-scatters the full ``T x H`` output back. TensorRT-LLM's PyTorch backend
  (``_torch/modules/fused_moe/fused_moe_cutlass.py``, ``select_alltoall_method_type``) turns
  its all-to-all off when ``moe_ep_size <= top_k``, and otherwise uses it only on a multi-node
  NVLink domain (MNNVL, GB200 NVL72) or with DeepEP enabled by environment variable; every
  attention-DP row of the published table (EP 2-8 with top-4 or top-8 routing) gathers.
  The gather carries the activations in the experts' input format (FP8 or NVFP4 quantised
  before the gather, ``fp4_quantize`` / ``static_quantize_e4m3_per_tensor``; BF16 otherwise),
  the reduce-scatter the BF16 output.

Both collectives run on the scale-up link at the family's fitted collective bandwidth and
latency (``perf/comm.py``); without attention DP (tokens already replicated by TP) the layer
all-reduces as before. ``RooflineModel.moe_exchange`` picks one (default ``alltoall``). The
closed form of ``trtllm-bench``'s rows applies ``trtllm_moe_exchange`` (``plan/closed_form.py``
``bench_exchange``, since ``hopdep16``; docs/validation.md), for ``trtllm-serve`` too since
``srvtail17`` (``plan/engine_moe.py`` ``run_exchange``); SGLang's DP attention gathers the BF16
hidden states before its MoE quantises them (``allgather_bf16``: ``dp_gather_partial``, then
``dp_reduce_scatter_tensor``); vLLM's runs keep the default.
"""

from __future__ import annotations

from inferplan.perf.comm import allgather_s, alltoall_s, reducescatter_s
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.op import ACT_BYTES
from inferplan.specs.dtypes import NumberFormat
from inferplan.specs.hardware import GpuSpec
from inferplan.specs.parallel import Parallelism
from inferplan.specs.topology import Topology

MOE_EXCHANGES = ("alltoall", "allgather", "allgather_bf16")  # the last: BF16 gathered
# Bytes per activation value as gathered for an expert GEMM of this compute dtype: FP8 one
# byte; NVFP4 half a byte plus one FP8 scale per 16 values; anything else BF16.
_GATHER_BYTES = {"fp8": 1.0, "fp4": 0.5 + 1.0 / 16}


def gathered_bytes_per_value(experts: NumberFormat) -> float:
    return _GATHER_BYTES.get(experts.compute_dtype, ACT_BYTES)


def moe_exchange_s(
    exchange: str,
    token_values: float,
    hit: float,
    par: Parallelism,
    experts: NumberFormat,
    gpu: GpuSpec,
    eff: Efficiency,
    topology: Topology | None = None,
) -> float:
    """Seconds of one MoE layer's dispatch and combine for ``token_values`` activation values
    (the replica's tokens in the layer x hidden size); ``hit``: the largest per-rank dispatch
    probability (``alltoall`` only)."""
    if exchange in ("allgather", "allgather_bf16") and par.attention_dp > 1:
        per_value = ACT_BYTES if exchange == "allgather_bf16" else gathered_bytes_per_value(experts)
        gathered = token_values * per_value
        return allgather_s(gathered, par.ep, gpu, eff, topology) + reducescatter_s(
            token_values * ACT_BYTES, par.ep, gpu, eff, topology
        )
    dispatch = token_values * hit * ACT_BYTES
    return 2 * alltoall_s(dispatch, par.ep, gpu, eff, topology)


def trtllm_moe_exchange(top_k: int, par: Parallelism, gpu: GpuSpec) -> str:
    """TensorRT-LLM's PyTorch backend: all-to-all only with attention DP, ``moe_ep_size >
    top_k`` and a multi-node NVLink domain (MNNVL: more than 8 GPUs in one NVLink domain);
    DeepEP needs an environment variable the published runs do not state."""
    mnnvl = gpu.scale_up_domain_size > 8
    if par.attention_dp > 1 and par.ep > top_k and mnnvl:
        return "alltoall"
    return "allgather"
