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

Padded rows cost what real rows cost in the weight GEMMs (they read no KV), so a step of ``n``
sequences is timed as ``padded`` rows for its per-sequence terms; the step-time model asks
``decode_graph`` which rows run and whether the step is eager.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from inferplan.perf.batch import StepBatch

CUDA_GRAPH_MAX_BATCH = 512  # vLLM's largest captured decode batch by default

TRTLLM_GRAPH_SIZES = (*range(1, 32), 32, 64, 128)


@dataclass(frozen=True)
class CudaGraphs:
    """An engine's captured decode batch sizes (ascending) and whether it pads up to them."""

    sizes: tuple[int, ...]
    pads: bool = True

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
    padding. Padding applies without DP attention only (each rank's batch is its own).
    """
    if not enabled or batch.prefill_tokens:
        return batch.num_tokens, True
    # With speculative decoding the graphs are keyed by query rows (vLLM v1 captures uniform
    # decode batches of ``1 + k`` rows per sequence), so the limits apply to the rows.
    rows = batch.num_decode_tokens
    if graphs is None:
        return batch.num_tokens, rows / dpa > CUDA_GRAPH_MAX_BATCH
    eager = graphs.graph_batch(rows // dpa) is None
    padded = graphs.graph_batch(rows) if dpa == 1 else None
    return (batch.num_tokens if padded is None else padded), eager
