"""What a simulation run returns: ``SimulationResult``, assembled from the replicas at its end.

The records, the ITL histogram and each replica's step trace are the run's own objects (not
copies); the duration runs from the first send to the last finish; the KV tiers' and speculative
decoding's summaries are those of ``engine/offload.py`` and ``engine/speculation.py``. The event
loop (``engine/simulator.py``) calls ``run_result`` once, after its last event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplan.engine.admission import AdmissionLedger
from inferplan.engine.offload import offload_summary
from inferplan.engine.speculation import speculation_summary
from inferplan.memory.prefixcache import PrefixCache
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords
from inferplan.metrics.steptrace import StepTrace

if TYPE_CHECKING:
    from inferplan.engine.replica import Replica


@dataclass
class SimulationResult:
    records: RequestRecords
    itl: ItlHistogram
    traces: list[StepTrace]
    duration_s: float
    num_steps: int
    idle_slot_steps: int  # static batching: slot-steps held by finished members of a batch
    # The trace time of the first arrival: every time in ``records`` and ``traces`` counts from
    # it (add it back to show trace times).
    time_offset_s: float = 0.0
    admission: AdmissionLedger | None = None  # with an admission config: its per-request state
    # Each replica's prefix cache (None entries: caching did not apply), for per-replica hits.
    prefix_caches: list[PrefixCache | None] = field(default_factory=list)
    kv_tiers: dict[str, Any] | None = None  # with KV tiers: ``offload_summary``
    speculative: dict[str, Any] | None = None  # with speculation: ``speculation_summary``


def run_result(
    replicas: list[Replica],
    records: RequestRecords,
    itl: ItlHistogram,
    time_offset_s: float,
    ledger: AdmissionLedger | None,
) -> SimulationResult:
    """The run's result once its last event is done (an unfinished run's rows still running
    give their worst ITL gaps first)."""
    for replica in replicas:
        replica.running.rows.flush_itl()
    ends = records.finish_s[np.isfinite(records.finish_s)]
    start = float(records.dispatch_s.min()) if records.num_requests else 0.0
    duration = float(ends.max()) - start if len(ends) else 0.0
    offloads = [r.offload for r in replicas if r.offload is not None]
    return SimulationResult(
        records=records,
        itl=itl,
        traces=[r.trace for r in replicas],
        duration_s=duration,
        num_steps=sum(r.num_steps for r in replicas),
        idle_slot_steps=sum(r.idle_slot_steps for r in replicas),
        time_offset_s=time_offset_s,
        admission=ledger,
        prefix_caches=[r.pool.cache for r in replicas],
        kv_tiers=offload_summary(offloads, duration) if offloads else None,
        speculative=speculation_summary(replicas),
    )
