"""``inferplan profile``: measure operator times with PyTorch into the table ``TableModel`` reads.

The package needs the ``profile`` extra (``pip install 'inferplan[profile]'``). Only this module
is imported without it: ``run_profile`` checks for torch first and fails with one line, and the
torch-backed modules (``timing``, ``kernels``, ``allreduce``, ``runner``) are imported after.
``shapes`` and ``grid`` are plain Python: what is timed, and where. ``docs/profiling.md`` says
what each operator's timing includes and leaves out.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryPlan

if TYPE_CHECKING:
    from inferplan.profile.runner import Profile

DEVICES = ("auto", "cpu", "cuda")
NO_TORCH = "inferplan profile needs PyTorch: pip install 'inferplan[profile]'"


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InferplanError(NO_TORCH) from None


def profile_to_csv(
    plan: MemoryPlan, path: Path, *, gpu_name: str, device: str, tiny: bool
) -> Profile:
    """Profile ``plan`` on ``device`` and write the table to ``path``."""
    if not path.parent.is_dir():  # before minutes of profiling, not after
        raise InferplanError(f"--output: no folder {path.parent} to write {path.name} in")
    require_torch()
    from inferplan.profile.runner import run_profile, write_profile

    profile = run_profile(plan, gpu_name=gpu_name, device=device, tiny=tiny)
    write_profile(profile, path)
    return profile
