"""Factory helpers for metrics tests: small hand-written RequestRecords."""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from inferplan.metrics.records import RequestRecords, RequestStatus

C, R, A = int(RequestStatus.COMPLETED), int(RequestStatus.REJECTED), int(RequestStatus.ABORTED)
NAN = float("nan")

# Five requests, latencies by hand (seconds):
#   r0 completed  ttft 0.5  e2el 1.5  tpot 1.0/10 = 0.1  queue 0.1  class chat  asked 11
#   r1 completed  ttft 0.3  e2el 4.3  tpot 4.0/20 = 0.2  queue 0.2  class code  asked 300
#      (held 0.5 s by the client: dispatched at 0.5, arrived at 1.0)
#   r2 completed  ttft 1.0  e2el 1.0  one token, no tpot  queue 0.0  class chat  asked 1
#   r3 rejected                                                      class code  asked 2000
#   r4 aborted after its first token                                 class chat  asked 20000
TINY: dict[str, Any] = {
    "arrival_s": [0.0, 1.0, 2.0, 2.5, 3.0],
    "dispatch_s": [0.0, 0.5, 2.0, 2.5, 3.0],
    "first_scheduled_s": [0.1, 1.2, 2.0, NAN, 3.1],
    "first_token_s": [0.5, 1.3, 3.0, NAN, 3.5],
    "finish_s": [1.5, 5.3, 3.0, NAN, NAN],
    "input_tokens": [100, 200, 50, 400, 80],
    "output_tokens": [11, 21, 1, 0, 5],
    "status": [C, C, C, R, A],
    "class_ids": [0, 1, 0, 1, 0],
    "num_preemptions": [0, 2, 0, 0, 1],
    "recomputed_tokens": [0, 300, 0, 0, 90],
    "max_itl_s": [0.1, 0.25, NAN, NAN, 0.4],
    "swapped_bytes": [0, 0, 0, 0, 4096],
    "requested_output_tokens": [11, 300, 1, 2000, 20000],
}


def build_records(columns: dict[str, Any], class_names: tuple[str, ...]) -> RequestRecords:
    arrays: dict[str, Any] = {}
    for name, values in columns.items():
        dtype = np.float64 if name.endswith("_s") else np.int64
        arrays[name] = np.asarray(values, dtype=dtype)
    return RequestRecords(class_names=class_names, **arrays)


@pytest.fixture
def make_records() -> Callable[..., RequestRecords]:
    """``make_records(**overrides)``: the TINY records with some columns replaced."""

    def make(class_names: tuple[str, ...] = ("chat", "code"), **overrides: Any) -> RequestRecords:
        return build_records({**TINY, **overrides}, class_names)

    return make
