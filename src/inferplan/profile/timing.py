"""The device, the dtypes operators run in, and the clock (PyTorch).

- Device: ``auto`` takes CUDA when torch sees it, else the CPU.
- Dtypes: on the CPU everything runs in float32 (the CPU's native matmul dtype; a CPU profile
  only tests the pipeline). On CUDA activations, attention and weights run in the model's dtype
  (bf16 or fp16). FP8 weights run through ``torch._scaled_mm`` (per-tensor scales, activations
  quantised on the fly) where torch has it and the device is SM 8.9 or newer (Ada, Hopper,
  Blackwell); routed experts have no grouped FP8 GEMM in torch. Formats torch has no kernel for
  (int8, int4, mxfp4, nvfp4 weights; fp8/int KV caches) run in the model dtype instead, and the
  profile's notes say so: such a time has the compute of a weight-only kernel but reads 2-4x the
  format's weight bytes.
- Clock: on CUDA, CUDA events around each run with the L2 cache flushed before it (weights are
  not L2-resident between layers in a real forward pass); on the CPU ``time.perf_counter``.
  The time recorded is the median of the timed runs, after warm-up runs.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from inferplan.errors import InferplanError
from inferplan.specs.dtypes import NumberFormat

L2_FLUSH_BYTES = 512 * 2**20  # larger than any GPU's last-level cache in the catalog
FP8_MIN_CAPABILITY = (8, 9)


def pick_device(choice: str) -> str:
    """``cpu`` or ``cuda`` for ``--device auto|cpu|cuda``."""
    has_cuda = torch.cuda.is_available()
    if choice == "cuda" and not has_cuda:
        raise InferplanError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    return "cuda" if choice != "cpu" and has_cuda else "cpu"


def describe_device(device: str) -> str:
    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} visible)"
    return "cpu (1 thread)"


@dataclass(frozen=True)
class Precision:
    """How one class of weights is timed: ``dtype`` tensors, or FP8 via ``torch._scaled_mm``."""

    dtype: torch.dtype
    is_fp8: bool = False


def activation_dtype(device: str, model_dtype: str) -> torch.dtype:
    if device == "cpu":
        return torch.float32
    return torch.float16 if model_dtype == "fp16" else torch.bfloat16


@functools.cache
def _fp8_works(device: str) -> bool:
    if device != "cuda" or not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return False
    if torch.cuda.get_device_capability() < FP8_MIN_CAPABILITY:
        return False
    try:  # a private API whose signature has changed across releases: try it once
        a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device, dtype=torch.float32)
        torch._scaled_mm(a, a.t(), one, one, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError):
        return False
    return True


def precision_for(
    fmt: NumberFormat, *, what: str, device: str, model_dtype: str, notes: list[str], grouped: bool
) -> Precision:
    """The precision ``what`` (a weight class) is timed in; a fallback adds a note."""
    act = activation_dtype(device, model_dtype)
    if device == "cpu" or fmt.name == model_dtype:
        return Precision(act)
    if fmt.name == "fp8" and grouped:
        reason = "torch has no grouped FP8 GEMM"
    elif fmt.name == "fp8" and _fp8_works(device):
        return Precision(act, is_fp8=True)
    elif fmt.name == "fp8":
        reason = "torch._scaled_mm does not run here; it needs SM 8.9 or newer"
    elif fmt.name in ("bf16", "fp16", "fp32"):
        reason = "activations run in the model dtype"
    else:
        reason = f"torch has no {fmt.name} GEMM"
    notes.append(f"{what}: {fmt.name} weights timed as {model_dtype} ({reason})")
    return Precision(act)


class Timer:
    """Median wall time of a callable on one device, after warm-up runs."""

    def __init__(self, device: str, *, warmup: int, repeats: int) -> None:
        self.device, self.warmup, self.repeats = device, warmup, repeats
        self._flush: torch.Tensor | None = None

    def median_s(self, run: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            run()
        if self.device == "cuda":
            return self._cuda(run)
        samples = []
        for _ in range(self.repeats):
            start = time.perf_counter()
            run()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    def _cuda(self, run: Callable[[], object]) -> float:
        if self._flush is None:
            self._flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        samples = []
        for _ in range(self.repeats):
            self._flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return statistics.median(samples)
