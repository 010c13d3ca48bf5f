"""What a replica on more than one GPU pays each step that a single-GPU replica does not.

**The ranks' per-step sync (host).** Every engine runs one process per GPU of a replica, and
only rank 0 holds the scheduler's input. A replica on more than one GPU must bring the other
ranks into each step, work a single-GPU replica never does:

- vLLM v1 runs the model in worker processes (``MultiprocExecutor``) only when
  ``tp x pp > 1`` (one GPU: ``UniProcExecutor``, in the engine core's process): each step the
  scheduler's output is pickled into the shared-memory broadcast queue
  (``vllm/distributed/device_communicators/shm_broadcast.py`` ``MessageQueue``), every worker
  polls it, and the output rank's sampled tokens come back through a second queue;
- TensorRT-LLM's PyTorch executor broadcasts the new requests from rank 0 to every rank each
  iteration, empty or not (``executor_request_queue.py`` ``_fetch_and_process_requests``:
  ``dist.broadcast`` over MPI), and its C++ executor does the same in leader mode;
- SGLang's TP ranks each run a scheduler; rank 0 broadcasts the received requests over the
  CPU process group every iteration (``scheduler.py`` ``recv_requests``: ``broadcast_pyobj``).

Each rank then runs its own host loop in lockstep with the others (the forward's first
collective waits for the slowest). A shared-memory or MPI broadcast on one node costs about the
same to two readers as to eight, so this is a per-step constant paid from two GPUs on, not a
cost that grows with the ranks like a ring collective's: ``Efficiency.rank_step_overhead_s``,
an engine release's constant, added to the per-step host work ``step_overhead_s``
(``with_rank_sync``: an overlap scheduler hides it as it hides the rest, and pipeline
micro-batches each pay it, ``perf/pipeline_costs.py``).

**The LM head's logits all-gather (GPU).** Each TP rank computes its slice of the
vocabulary-parallel LM head's logits; every rank receives the others' slices before sampling,
once per micro-batch, on the rows that need logits, in the activations' 16-bit type:
TensorRT-LLM's ``lm_head`` is a column-parallel linear with ``gather_output=True`` (its C++
engines' ``ColumnLinear`` and the PyTorch backend's ``LMHead``), vLLM v1's
``LogitsProcessor._gather_logits`` all-gathers on GPUs, SGLang's ``LogitsProcessor`` calls
``tensor_model_parallel_all_gather``. A rank receives ``(p - 1) / p`` of
``rows x padded_vocab x 2`` bytes (``perf/comm.py`` ``allgather_s``): a decode batch of 256
rows over a 128k vocabulary gathers 64 MB a step. It is timed as an operator of the LM head's
piece (the collective's latency folded into its bytes), so every fast path that adds a step's
operators adds it. ``LOGITS_GATHER`` switches it.

Both measured in docs/validation.md (``tp19``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from inferplan.perf.comm import allgather_s, link_bytes_s
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.op import ACT_BYTES, Op
from inferplan.specs.hardware import GpuSpec
from inferplan.specs.parallel import Parallelism
from inferplan.specs.topology import Topology

LOGITS_GATHER = False


class _Replica(Protocol):
    """What the gather reads of a step model (``perf/roofline.py`` ``RooflineModel``)."""

    padded_vocab: int
    par: Parallelism
    gpu: GpuSpec
    eff: Efficiency
    topology: Topology


def with_rank_sync(eff: Efficiency, par: Parallelism) -> Efficiency:
    """``eff`` with its multi-rank per-step work in ``step_overhead_s`` where the replica spans
    more than one GPU, then ``rank_step_overhead_s`` 0 (applying it twice changes nothing)."""
    if eff.rank_step_overhead_s == 0.0:
        return eff
    if par.devices_per_replica == 1:
        return replace(eff, rank_step_overhead_s=0.0)
    return replace(
        eff,
        step_overhead_s=eff.step_overhead_s + eff.rank_step_overhead_s,
        rank_step_overhead_s=0.0,
    )


def logits_gather_ops(rows: float, model: _Replica) -> tuple[Op, ...]:
    """The all-gather of ``rows`` rows of logits over the model's TP ranks as one operator, or
    none where there is nothing to gather (TP1, no rows, ``LOGITS_GATHER`` off)."""
    tp = model.par.tp
    if not LOGITS_GATHER or tp <= 1 or rows <= 0:
        return ()
    gpu, eff, topology = model.gpu, model.eff, model.topology
    rate = link_bytes_s(gpu, tp, topology) * eff.collective_bandwidth
    seconds = allgather_s(rows * model.padded_vocab * ACT_BYTES, tp, gpu, eff, topology)
    return (Op("logits_gather", 0.0, 0.0, seconds * rate, 0.0, 1.0, rate, 1, False),)
