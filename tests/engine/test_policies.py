"""Queue policies and routers, driven directly: each order is pinned so that reversing it fails.

FCFS pops in arrival order and a preempted request goes back to the head; priority pops the
lowest value first (vLLM's convention), ties by arrival; SPF pops the shortest predicted output
first, ties by arrival; ``least_outstanding`` routes to the replica with the fewest requests
queued or running, ties to the lowest index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from inferplan.engine.policies import (
    WaitingQueue,
    least_outstanding,
    policy_keys,
    round_robin,
)
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.simulator import Simulation, SimulationConfig
from inferplan.errors import InferplanError
from inferplan.perf.batch import StepBatch, StepTime
from inferplan.workload import Workload


def _drain(queue: WaitingQueue) -> list[int]:
    order = []
    while len(queue):
        order.append(queue.pop())
    return order


def test_fcfs_pops_in_arrival_order_and_preempted_go_first() -> None:
    queue = WaitingQueue("fcfs", None)
    for rid in (0, 1, 2):
        queue.push(rid, num_tokens=10)
    queue.push_front(7, num_tokens=30)
    assert queue.peek() == (7, 30)
    assert _drain(queue) == [7, 0, 1, 2]


def test_priority_pops_lowest_value_first_ties_by_arrival() -> None:
    priorities = np.array([2, 0, 1, 0, 2])
    keys = policy_keys("priority", np.zeros(5), priorities, np.ones(5))
    queue = WaitingQueue("priority", keys)
    for rid in (4, 0, 2, 3, 1):  # pushed out of order
        queue.push(rid, num_tokens=rid + 1)
    assert _drain(queue) == [1, 3, 2, 0, 4]


def test_priority_preempted_request_reenters_by_its_key() -> None:
    keys = policy_keys("priority", np.zeros(3), np.array([1, 0, 2]), np.ones(3))
    queue = WaitingQueue("priority", keys)
    queue.push(2, num_tokens=5)
    queue.push(1, num_tokens=5)
    queue.push_front(0, num_tokens=9)  # preempted: not the head, its key ranks it
    assert _drain(queue) == [1, 0, 2]


def test_spf_pops_shortest_predicted_output_first() -> None:
    predicted = np.array([300, 10, 200, 10])
    keys = policy_keys("spf", np.zeros(4), None, predicted)
    queue = WaitingQueue("spf", keys)
    for rid in range(4):
        queue.push(rid, num_tokens=1)
    assert _drain(queue) == [1, 3, 2, 0]


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(InferplanError, match="--scheduling-policy"):
        WaitingQueue("lifo", None)


@dataclass
class _Load:
    outstanding: int


def test_least_outstanding_picks_the_least_loaded_ties_to_lowest_index() -> None:
    assert least_outstanding([_Load(3), _Load(1), _Load(2)], 0) == 1
    assert least_outstanding([_Load(2), _Load(5), _Load(2)], 7) == 0
    assert least_outstanding([_Load(0)], 3) == 0


def test_round_robin_cycles() -> None:
    replicas = [_Load(0), _Load(9), _Load(0)]
    assert [round_robin(replicas, i) for i in range(5)] == [0, 1, 2, 0, 1]


class _ConstantModel:
    """Every step takes 10 ms per sequence in it (decode line: a = 10 ms x n, b = 0)."""

    def step_time(self, batch: StepBatch) -> StepTime:
        total_s = 0.01 * (batch.num_prefill_seqs + batch.num_decode_seqs)
        return StepTime(total_s=total_s, by_bound_s={"overhead": total_s})

    def decode_line(self, num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        return 0.01 * num_seqs, 0.0, float("inf")


def _serial_run(policy: str, priorities: list[int], outputs: list[int]) -> np.ndarray:
    """One sequence at a time; request 0 occupies the replica while the others queue."""
    n = len(outputs)
    wl = Workload(
        arrival_s=np.arange(n, dtype=np.float64) * 1e-3,
        input_tokens=np.full(n, 8),
        output_tokens=np.array(outputs),
        class_ids=np.zeros(n, dtype=np.int64),
        priorities=np.array(priorities),
    )
    sched = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=1, block_size=16, num_blocks=64)
    cfg = SimulationConfig(sched, max_model_len=1024, scheduling_policy=policy)
    res = Simulation(wl, cfg, _ConstantModel()).run()
    return np.argsort(res.records.finish_s, kind="stable")


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("fcfs", [0, 1, 2, 3]), ("priority", [0, 3, 2, 1]), ("spf", [0, 2, 3, 1])],
)
def test_policies_order_service_end_to_end(policy: str, expected: list[int]) -> None:
    order = _serial_run(policy, priorities=[0, 3, 1, 0], outputs=[50, 40, 5, 20])
    assert order.tolist() == expected


def test_least_outstanding_router_balances_unequal_requests() -> None:
    """Two replicas; a long request pins replica 0, so least-outstanding sends the next two to
    replica 1 one after another while round robin alternates."""
    n = 4
    wl = Workload(
        arrival_s=np.array([0.0, 0.001, 0.5, 0.501]),
        input_tokens=np.full(n, 8),
        output_tokens=np.array([400, 5, 5, 5]),
        class_ids=np.zeros(n, dtype=np.int64),
    )
    sched = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=16, num_blocks=64)
    finish = {}
    for router in ("round_robin", "least_outstanding"):
        cfg = SimulationConfig(sched, max_model_len=1024, data_parallel_size=2, router=router)
        res = Simulation(wl, cfg, _ConstantModel()).run()
        finish[router] = res.records.finish_s
    # Request 2 arrives while request 0 still runs on replica 0 and replica 1 is idle.
    rr, lo = finish["round_robin"], finish["least_outstanding"]
    assert lo[2] < rr[2]  # least-outstanding avoided the busy replica
