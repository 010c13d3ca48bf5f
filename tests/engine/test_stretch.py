"""The closed-form stretch's shortcuts against their plain definitions.

``num_victims`` (the vector preemption step's victim count) against the cumulative-sum rule it
replaced, and ``advance_decode`` reusing what ``stretch_steps`` computed only for the state it
computed it for.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig
from inferplan.engine.stretch import num_victims
from inferplan.perf.batch import StepBatch
from inferplan.perf.protocol import StepTime
from inferplan.workload import Workload


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), min_size=1, max_size=40),
    st.integers(0, 60),
)
def test_num_victims_is_the_smallest_tail_that_fits(rows: list[tuple[int, int]], free: int) -> None:
    need = np.array([r[0] for r in rows], dtype=np.int64)
    held = np.array([r[1] for r in rows], dtype=np.int64)
    n = len(rows)
    cum_need = np.concatenate(([0], np.cumsum(need)))  # rows[:m]
    held_tail = np.concatenate(([0], np.cumsum(held[::-1])))  # the last p rows
    fits = cum_need[n - np.arange(n + 1)] <= free + held_tail
    assert num_victims(need, held, free) == int(np.argmax(fits))


class _LineModel:
    """A step-time model whose decode steps are ``1 ms + 1 us per context token``."""

    def step_time(self, batch: StepBatch) -> StepTime:
        total = 1e-3 + 1e-6 * (batch.decode_context_tokens + batch.prefill_tokens)
        return StepTime(total, {"memory": total}, {})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 1e-3, 1e-6, float("inf")


def _decoding_replica() -> Replica:
    """A replica whose four requests have all sampled their first token (a decode batch)."""
    n = 4
    wl = Workload(
        arrival_s=np.zeros(n),
        input_tokens=np.array([30, 40, 50, 60], dtype=np.int64),
        output_tokens=np.array([200, 300, 400, 500], dtype=np.int64),
        class_ids=np.zeros(n, dtype=np.int64),
    )
    cfg = SchedulerConfig(
        max_num_batched_tokens=8192, max_num_seqs=64, block_size=16, num_blocks=500
    )
    sim = Simulation(wl, SimulationConfig(cfg, 4096), _LineModel())
    for _ in range(n):
        sim._arrive(0.0)
    replica = sim.replicas[0]
    replica.step()  # the prompts
    assert replica.is_decoding()
    return replica


def _state(replica: Replica) -> tuple[float, list[int], list[int], int]:
    run = replica.running
    return replica.now, run.num_computed.tolist(), run.held_blocks.tolist(), replica.pool.free


def test_advance_decode_reuses_the_stretch_only_for_its_own_state() -> None:
    planned, fresh = _decoding_replica(), _decoding_replica()
    k, a, b, _ = planned.stretches.stretch_steps(float("inf"))
    planned.stretches.advance_decode(5, a, b)
    fresh.stretches.advance_decode(5, a, b)
    assert _state(planned) == _state(fresh)
    # A stretch planned, then the batch changes (a row preempted): the plan must not be used.
    stale, clean = _decoding_replica(), _decoding_replica()
    stale.stretches.stretch_steps(float("inf"))
    for replica in (stale, clean):
        replica.scheduler.preempt(len(replica.running) - 1)
        replica.stretches.advance_decode(3, a, b)
    assert _state(stale) == _state(clean)
    assert stale.now == clean.now
    assert k > 5
