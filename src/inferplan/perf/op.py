"""One operator of the roofline model: FLOPs and bytes affine in the decode context, achieved at
a compute and a memory rate; its time is the larger of the two terms (``perf/roofline.py`` adds
the operators of a step; ``docs/modeling.md`` has the formulas)."""

from __future__ import annotations

from dataclasses import dataclass

ACT_BYTES = 2.0  # bytes of one bf16 activation value


@dataclass(slots=True)
class Op:
    """One operator on one device: FLOPs ``f0 + f1*C``, bytes ``b0 + b1*C`` (C = decode context),
    achieved at ``flops_s`` and ``bytes_s``. ``count`` repeats it (layers of one shape).

    Not frozen, though nothing assigns to an operator once built (the roofline's caches share
    them): a frozen dataclass sets each field through ``object.__setattr__``, about six times
    a slotted class's construction, and a step shape never met before builds one to four of
    them (``perf/step_seconds.py``)."""

    name: str
    f0: float
    f1: float
    b0: float
    b1: float
    flops_s: float
    bytes_s: float
    count: int = 1
    per_stage: bool = True  # runs on every pipeline stage pass; False: once per micro-batch

    def terms(self, context: float) -> tuple[float, float]:
        compute = (self.f0 + self.f1 * context) / self.flops_s * self.count
        memory = (self.b0 + self.b1 * context) / self.bytes_s * self.count
        return compute, memory

    def crossing(self, context: float) -> float | None:
        """The context at which compute and memory terms are equal, if they ever are."""
        slope = self.f1 / self.flops_s - self.b1 / self.bytes_s
        if slope == 0:
            return None
        return (self.b0 / self.bytes_s - self.f0 / self.flops_s) / slope
