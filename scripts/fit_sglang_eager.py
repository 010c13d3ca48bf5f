"""``fit_frontend.py`` with SGLang's eager kernel launches as a host axis (measured, not kept).

SGLang 0.5 runs every extend (prefill) batch without CUDA graphs (piecewise graphs are opt-in,
``enable_piecewise_cuda_graph`` False) and decode batches above ``cuda_graph_max_bs`` too; the
roofline charges such a step ``eager_layer_overhead_s`` a decoder layer (``perf/roofline.py``
``_overhead``; the GPU family's 10 us). TensorRT-LLM's PyTorch backend, which launches a layer's
kernels from Python the same way, is fitted at 200-300 us (``plan/data/trtllm_serve.yaml``).
This adds host points with 100 and 300 us a layer to SGLang's grid, at the host costs of
``HOSTS`` (a fourth element of the host tuple); everything else is ``fit_frontend.py``'s,
including its arguments (docs/validation.md ``served5``):

    .venv/bin/python scripts/fit_sglang_eager.py --engine sglang --dry-run --by --factors 0.3,1
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from inferplan.perf.efficiency import Efficiency

sys.path.insert(0, str(Path(__file__).parent))
import fit_frontend as ff  # a sibling script, found once the path is set

MS, US = 1e-3, 1e-6
EAGER_HOSTS: list[tuple[float, ...]] = [
    (5 * MS, 100 * US, 0.0, 300 * US),
    (1.25 * MS, 25 * US, 0.0, 300 * US),
    (5 * MS, 100 * US, 0.0, 100 * US),
]
_with_host = ff.with_host


def with_eager_host(eff: Efficiency, host: tuple[float, ...]) -> Efficiency:
    """``fit_frontend.with_host``, the fourth element (if any) as ``eager_layer_overhead_s``."""
    eff = _with_host(eff, host[:3])
    return replace(eff, eager_layer_overhead_s=host[3]) if len(host) > 3 else eff


if __name__ == "__main__":
    ff.HOSTS = [*ff.HOSTS, *EAGER_HOSTS]  # type: ignore[list-item]
    ff.with_host = with_eager_host
    ff.loaded_host = lambda host: host
    sys.exit(ff.main(sys.argv[1:]))
