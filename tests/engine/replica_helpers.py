"""One replica for the hand-computed scenario tests: requests ``0..n-1`` all arriving at 0,
known to the replica's records but not queued yet (the tests call ``add_request``)."""

from __future__ import annotations

import numpy as np

from inferplan.engine.policies import WaitingQueue
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords
from inferplan.metrics.steptrace import StepTrace
from inferplan.perf.protocol import StepTimeModel


def replica_at_zero(
    prompts: list[int],
    outputs: list[int],
    cfg: SchedulerConfig,
    model: StepTimeModel,
    waiting: WaitingQueue | None = None,
) -> Replica:
    """A replica under ``cfg`` whose requests have these prompt and output lengths."""
    records = RequestRecords.empty(len(prompts))
    records.input_tokens[:] = prompts
    assert records.requested_output_tokens is not None
    records.requested_output_tokens[:] = outputs
    records.arrival_s[:] = 0.0
    return Replica(
        0,
        cfg,
        model,
        records,
        np.array(prompts, dtype=np.int64),
        waiting if waiting is not None else WaitingQueue("fcfs", None),
        ItlHistogram(),
        StepTrace(cfg.num_blocks),
    )
