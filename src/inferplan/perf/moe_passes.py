"""The routed experts' memory passes around their two grouped GEMMs, in TensorRT-LLM's MoE.

TensorRT-LLM's fused MoE (``torch.ops.trtllm.fused_moe``, the CUTLASS backend its PyTorch
runtime takes for the table's MoE models: ``_torch/modules/fused_moe/fused_moe_cutlass.py``,
``cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm``, ``moe_kernels.cu``) runs one layer's
routed experts as five kernels in a row: ``expandInputRowsKernel`` copies each token's
(quantised) row once for each of its ``k`` experts into the experts' contiguous slots; the
first grouped GEMM writes the gate and up projections in BF16; ``doActivation`` reads them,
applies SwiGLU and writes the second GEMM's (quantised) input; the second grouped GEMM writes
one BF16 hidden row per pick; ``finalizeMoeRoutingKernel`` reads the ``k`` rows of each token
back and sums them with the routing weights. The three passes between the GEMMs are memory
bound and run on their own, so their time adds to the GEMMs' rather than hiding under them,
which is how ``perf/roofline.py`` had them (inside the experts' operator, ``max(compute,
memory)``).

Per pick (one token's row sent to one expert on this rank; ``H`` hidden, ``I`` the expert's
width on the rank, ``q`` bytes a value of the experts' input format: FP8 1, NVFP4 0.5 + 1/16,
BF16 2, ``perf/moe_comm.py``): the copy reads and writes ``H q``, the activation reads
``2 x 2I`` (gated; ``2I`` ungated) and writes ``I q``, the finalize reads ``2H``. The bytes
scale as ``k (4 + 2q) H`` against ``k 6 H I`` GEMM FLOPs, so the passes weigh most where the
experts are narrow (Qwen3-30B-A3B's 768, Qwen3-235B-A22B's 1,536), where tensor parallelism
narrows them further (every rank copies and sums full hidden rows for ``I / tp`` of the
GEMMs), and on the parts whose FLOPs outrun their bandwidth (NVFP4 on Blackwell).

Taken for TensorRT-LLM's runs only (``ENGINES_WITH_PASSES``): vLLM's and SGLang's Triton
fused MoE gathers its input rows inside the first GEMM (no copy) and their runs carry an
experts' kernel factor fitted with whatever their own passes cost (``perf/engine_kernels.py``,
``perf/vllm_moe.py``, ``perf/sglang_moe.py``), so adding the passes there would count them
twice. The passes read and write at the family's ``memory_bandwidth`` fraction; nothing new is
fitted. docs/validation.md (``moe18``) has what they move.
"""

from __future__ import annotations

from inferplan.perf.moe import RankTable
from inferplan.perf.moe_comm import gathered_bytes_per_value
from inferplan.perf.op import Op
from inferplan.specs.dtypes import NumberFormat
from inferplan.specs.model import FfnSpec

# Engines whose MoE layer runs the copy, activation and finalize passes as separate kernels
# around CUTLASS grouped GEMMs (the GPU family's ``moe_gemm`` fraction is fitted to them).
ENGINES_WITH_PASSES = frozenset({"trtllm"})


def engine_moe_passes(engine: str) -> bool:
    """Whether ``engine``'s step model times the experts' passes (``ENGINES_WITH_PASSES``)."""
    return engine in ENGINES_WITH_PASSES


def pass_bytes_per_pick(hidden: int, width: float, input_bytes: float, gated: bool) -> float:
    """Bytes one pick moves through the copy, the activation and the finalize: the quantised
    row read and written, the first GEMM's BF16 output read and the second's input written, the
    second GEMM's BF16 row read back (the weighted sum writes one row per token, not per pick,
    whatever the passes: it is the layer's output, left out)."""
    first_out = (2.0 if gated else 1.0) * width
    return 2 * hidden * input_bytes + 2 * first_out + width * input_bytes + 2 * hidden


def expert_passes(
    ffn: FfnSpec,
    hidden: int,
    tokens: float,
    count: int,
    table: RankTable,
    tp: int,
    experts: NumberFormat,
    bytes_s: float,
) -> Op:
    """The passes of ``count`` MoE layers of ``tokens`` tokens on the busiest expert-parallel
    rank (its share of the picks, ``table``), a memory-bound operator at ``bytes_s``; without
    EP every rank runs every pick on ``1 / tp`` of each expert's width, but copies and sums
    whole hidden rows."""
    picks = tokens * ffn.num_experts_per_tok * float(table.assignment_share.max())
    width = ffn.intermediate_size / (1 if table.num_ranks > 1 else tp)
    per_pick = pass_bytes_per_pick(hidden, width, gathered_bytes_per_value(experts), ffn.is_gated)
    return Op("expert_passes", 0.0, 0.0, picks * per_pick, 0.0, 1.0, bytes_s, count)
