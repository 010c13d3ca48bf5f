"""Which TensorRT-LLM runtime a simulation emulates: ``trtllm-serve`` (the default) or
``trtllm-bench``.

Both run the PyTorch backend, with different settings (``notes/engines.md`` sec. 3,
``plan/trtllm_serve.py``), and ``inferplan validate`` predicts each published row with the
runtime that measured it. ``simulate --engine trtllm --trtllm-runtime`` and a plan request's
``trtllm_runtime`` choose one the same way:

- **trtllm-serve** (default): an online run with an arrival process is what the OpenAI server
  does. Its host costs (a streamed response per request and step, each layer's kernels
  launched from Python on a step without a CUDA graph) behind the overlap scheduler, its
  kernel factors (``plan/data/trtllm_serve.yaml``), decode CUDA graphs of ``1..32, 64, 128``
  without padding (``DecodeCudaGraphConfig`` defaults), and its HTTP front end
  (``engine/data/frontend.yaml`` ``trtllm-serve``).
- **trtllm-bench**: the offline benchmark. The release's host costs fitted to ``trtllm-bench``
  rows (``plan/data/published_cpu_costs.yaml``), decode graphs for every batch (it pads its
  graphs up to ``max_batch_size``; the generic rule of ``perf/cudagraph.py``, as ``validate``
  predicts those rows) and no HTTP front end (it feeds the executor in process). The limits
  stay the LLM API's defaults or the flags: ``trtllm-bench``'s own heuristic from the dataset
  (``plan/trtllm_bench.py``) is not applied; give ``--max-num-seqs`` and
  ``--max-num-batched-tokens`` to match a run.

Other engines ignore the choice (and the CLI refuses it with them).
"""

from __future__ import annotations

from inferplan.engine.frontend import FrontEnd, engine_frontend
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.cudagraph import CudaGraphs
from inferplan.perf.efficiency import Efficiency
from inferplan.perf.overlap import on_host
from inferplan.plan.served import served_efficiency, served_graphs
from inferplan.plan.trtllm_serve import serve_efficiency

TRTLLM_SERVE, TRTLLM_BENCH = "trtllm-serve", "trtllm-bench"
TRTLLM_RUNTIMES = (TRTLLM_SERVE, TRTLLM_BENCH)


def check_trtllm_runtime(engine: str, runtime: str | None, where: str) -> None:
    """A runtime named with another engine is a mistake (``where``: the flag or key)."""
    if runtime is None:
        return
    if runtime not in TRTLLM_RUNTIMES:
        valid = "|".join(TRTLLM_RUNTIMES)
        raise InferplanError(f"{where}: unknown runtime {runtime!r}; valid: {valid}")
    if engine != "trtllm":
        raise InferplanError(f"{where}: applies to --engine trtllm only (got {engine})")


def is_serve(engine: str, runtime: str | None) -> bool:
    """Whether ``engine`` runs as ``trtllm-serve`` (TensorRT-LLM without another choice)."""
    return engine == "trtllm" and (runtime or TRTLLM_SERVE) == TRTLLM_SERVE


def runtime_efficiency(
    family: Efficiency, plan: MemoryPlan, engine: str, runtime: str | None = None
) -> Efficiency:
    """``family`` as ``engine`` runs ``plan``: ``plan/served.py``'s constants, then, for
    ``trtllm-serve``, its own host costs and kernel factor behind the overlap scheduler (as
    ``validate`` predicts a ``trtllm-serve`` row); TensorRT-LLM's host work at the host CPU's
    speed (``perf/overlap.py`` ``on_host``: a Grace-hosted part's ``grace_host``)."""
    eff = served_efficiency(family, plan, engine)
    eff = serve_efficiency(eff, plan) if is_serve(engine, runtime) else eff
    return on_host(eff, plan.gpu) if engine == "trtllm" else eff


def runtime_graphs(plan: MemoryPlan, engine: str, runtime: str | None = None) -> CudaGraphs | None:
    """The decode CUDA graphs: the engine's defaults; None (every batch captured) for
    ``trtllm-bench``, which pads its graphs up to its ``max_batch_size``."""
    if engine == "trtllm" and not is_serve(engine, runtime):
        return None
    return served_graphs(plan, engine)


def runtime_frontend(engine: str, runtime: str | None = None) -> FrontEnd:
    """The HTTP front end: the engine's fitted one; none for ``trtllm-bench`` (offline)."""
    if engine == "trtllm" and not is_serve(engine, runtime):
        return FrontEnd()
    return engine_frontend(engine)
