"""CUDA-graph capture sizes per engine, and the batch a decode step actually runs.

A pure-decode step of ``n`` sequences replays the captured graph of the smallest capture size
``>= n`` (its rows padded with dummy tokens), or runs eagerly (a launch per kernel) above the
largest size, or, where the engine does not pad, at any size that was not captured
(from each engine's source, cited per engine below):

- **vLLM 0.10/0.11**: ``[1, 2, 4] + 8..max step 8``, ``max = min(2 * max_num_seqs, 512)``,
  sizes above ``max_num_batched_tokens`` dropped (``config/__init__.py``
  ``_set_cudagraph_sizes``). 0.12 on: ``[1, 2, 4] + 8..248 step 8 + 256..max step 16``
  (``vllm-0.13.0:vllm/config/vllm.py``). Padding on.
- **SGLang 0.5**: ``[1, 2, 4, 8, 12] + 16..256 step 8 + 272..496 step 16 + 512..max step 32``
  up to ``cuda_graph_max_bs`` (``server_args.py`` ``_generate_cuda_graph_batch_sizes``), whose
  default follows the device's memory and TP (``specs/engines.py``). Padding on.
- **TensorRT-LLM (PyTorch backend)**: decode-only graphs of sizes ``1..31, 32, 64, 128`` (max
  128), no padding by default (``llm_args.py`` ``CudaGraphConfig``): other sizes run eager.
- **TensorRT-LLM's perf-overview runs** (``trtllm-bench``, v0.19 on): ``llm_options.yml`` sets
  ``enable_padding: true`` and the sizes ``1, 2, 4, ..., 256, 384, 512, 1024, ..., 8192``
  (``docs/source/performance/perf-overview.md``). The executor keeps the sizes up to
  ``min(max_batch_size, max_num_tokens)`` and, when a listed size is above that cap, adds the
  cap itself (``_torch/pyexecutor/model_engine.py`` ``_filter_cuda_graph_batch_sizes``), so
  every decode batch the executor can form replays a graph, padded to the next size. Under
  attention DP each rank replays its own graph of its own batch: the padding is per rank.

Padded rows cost what real rows cost in the weight GEMMs (they read no KV), so a step of ``n``
sequences is timed as ``padded`` rows for its per-sequence terms; the step-time model asks
``decode_graph`` which rows run and whether the step is eager.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from inferplan.perf.batch import StepBatch

CUDA_GRAPH_MAX_BATCH = 512  # vLLM's largest captured decode batch by default

TRTLLM_GRAPH_SIZES = (*range(1, 32), 32, 64, 128)
# The perf overview's ``cuda_graph_config.batch_sizes`` (v0.19 to v1.2, padding on).
TRTLLM_BENCH_GRAPH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class CudaGraphs:
    """An engine's captured decode batch sizes (ascending) and whether it pads up to them."""

    sizes: tuple[int, ...]
    pads: bool = True
    # Under DP attention each rank pads its own share of the batch (TensorRT-LLM); False: the
    # generic rule below (no padding under DP attention).
    pads_per_rank: bool = False

    @property
    def max_batch(self) -> int:
        return self.sizes[-1] if self.sizes else 0

    def graph_batch(self, num_seqs: int) -> int | None:
        """The batch a decode step of ``num_seqs`` sequences replays (padded), or None where
        it runs eagerly (above the largest size, or an uncaptured size without padding)."""
        i = bisect.bisect_left(self.sizes, num_seqs)
        if i == len(self.sizes):
            return None
        size = self.sizes[i]
        if size != num_seqs and not self.pads:
            return None
        return size


def vllm_graph_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, version: str = "0.11"
) -> tuple[int, ...]:
    """vLLM's default capture sizes (see the module docstring)."""
    largest = min(2 * max_num_seqs, 512)
    if version.startswith(("0.10", "0.11")):
        sizes = [1, 2, 4, *range(8, largest + 1, 8)]
    else:
        sizes = [1, 2, 4, *range(8, min(largest, 248) + 1, 8), *range(256, largest + 1, 16)]
    return tuple(s for s in sizes if s <= max(largest, 1) and s <= max_num_batched_tokens)


def sglang_graph_sizes(cuda_graph_max_bs: int) -> tuple[int, ...]:
    """SGLang's default capture sizes up to ``cuda_graph_max_bs``."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 497, 16), *range(512, 4097, 32)]
    return tuple(s for s in sizes if s <= cuda_graph_max_bs)


def trtllm_bench_graphs(
    max_batch_size: int, max_num_tokens: int, sizes: tuple[int, ...] = TRTLLM_BENCH_GRAPH_SIZES
) -> CudaGraphs:
    """The padded decode graphs of a ``trtllm-bench`` run (module docstring): ``sizes`` up to
    ``min(max_batch_size, max_num_tokens)``, and that cap when a listed size lies above it."""
    cap = max(1, min(max_batch_size, max_num_tokens))
    kept = [s for s in sizes if s <= cap]
    if any(s > cap for s in sizes) and (not kept or kept[-1] != cap):
        kept.append(cap)
    return CudaGraphs(tuple(kept), pads=True, pads_per_rank=True)


def engine_graphs(
    engine: str, max_num_seqs: int, max_num_batched_tokens: int, sglang_max_bs: int = 256
) -> CudaGraphs:
    """The default decode graphs of ``--engine`` (vllm, sglang, trtllm)."""
    if engine == "sglang":
        return CudaGraphs(sglang_graph_sizes(sglang_max_bs))
    if engine == "trtllm":
        return CudaGraphs(TRTLLM_GRAPH_SIZES, pads=False)
    return CudaGraphs(vllm_graph_sizes(max_num_seqs, max_num_batched_tokens))


def decode_graph(
    graphs: CudaGraphs | None, enabled: bool, batch: StepBatch, dpa: int
) -> tuple[int, bool]:
    """(token rows the step's GEMMs run, whether the step launches eagerly) for one step.

    Only a pure decode with graphs ``enabled`` replays a graph. ``graphs`` None is the generic
    rule: every decode batch up to ``CUDA_GRAPH_MAX_BATCH`` per DP-attention rank captured, no
    padding. Padding applies without DP attention only (each rank's batch is its own), unless
    the graphs pad per rank (``pads_per_rank``: each rank pads ``ceil(rows / dpa)``).
    """
    if not enabled or batch.prefill_tokens:
        return batch.num_tokens, True
    # With speculative decoding the graphs are keyed by query rows (vLLM v1 captures uniform
    # decode batches of ``1 + k`` rows per sequence), so the limits apply to the rows.
    rows = batch.num_decode_tokens
    if graphs is None:
        return batch.num_tokens, rows / dpa > CUDA_GRAPH_MAX_BATCH
    if dpa > 1 and graphs.pads_per_rank:  # each rank pads its even share
        per_rank = graphs.graph_batch(math.ceil(rows / dpa))
        if per_rank is None:
            return batch.num_tokens, True
        return max(batch.num_tokens, dpa * per_rank), False
    eager = graphs.graph_batch(rows // dpa) is None
    padded = graphs.graph_batch(rows) if dpa == 1 else None
    return (batch.num_tokens if padded is None else padded), eager
