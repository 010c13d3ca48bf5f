"""When the waiting pass runs in block counts (``Scheduler._admits_plainly``).

Only vLLM v1's own scheduler on a uniform pool without a prefix cache, KV tiers or an admission
policy finds no prefix hit and reserves nothing beyond a chunk's blocks. Each test below differs
from the plain replica in one of those, so dropping any condition fails one of them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inferplan.engine.admission import Admission, AdmissionConfig, AdmissionLedger
from inferplan.engine.replica import Replica, SchedulerConfig
from inferplan.engine.schedulers import SCHEDULERS, Scheduler
from inferplan.memory.prefixcache import PrefixCache
from inferplan.memory.tiers import OffloadConfig, TierSpec

from .replica_helpers import replica_at_zero
from .test_fast_equals_exact import WINDOWED
from .test_head_fit import _FlatModel

PROMPTS, OUTPUTS = [8, 8], [4, 4]
PLAIN = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, block_size=4, num_blocks=16)


def _replica(cfg: SchedulerConfig = PLAIN) -> Replica:
    return replica_at_zero(PROMPTS, OUTPUTS, cfg, _FlatModel())


def test_plain_vllm_v1_without_prefix_caching_admits_plainly() -> None:
    replica = _replica()
    assert type(replica.scheduler) is Scheduler
    assert replica.scheduler._admits_plainly()


def test_a_prefix_cache_does_not() -> None:
    replica = _replica()
    replica.pool.cache = PrefixCache(((1, 2), (1, 3)), entry_blocks=2)  # as ``Replica`` sets it
    assert not replica.scheduler._admits_plainly()


def test_kv_tiers_do_not() -> None:
    host = TierSpec("host", 1e9, 40e9, 10e9)
    cfg = replace(PLAIN, kv_block_bytes=1024.0, kv_tiers=OffloadConfig((host,), 1024.0))
    replica = _replica(cfg)
    assert replica.scheduler.offload is not None
    assert not replica.scheduler._admits_plainly()


def test_an_admission_policy_does_not() -> None:
    replica = _replica()
    sched, n = replica.scheduler, len(PROMPTS)
    prompts = np.array(PROMPTS, dtype=np.int64)
    ledger = AdmissionLedger(
        AdmissionConfig(policy="reserve-none"), prompts, np.array(OUTPUTS), np.zeros(n, np.int64),
        10**6,
    )  # fmt: skip
    sched.admission = Admission(ledger, replica.pool, replica.records, [])
    assert not sched._admits_plainly()


def test_a_sliding_window_pool_does_not() -> None:
    replica = _replica(replace(PLAIN, kv_groups=WINDOWED))
    assert not replica.pool.is_uniform
    assert not replica.scheduler._admits_plainly()


@pytest.mark.parametrize("name", sorted(set(SCHEDULERS) - {"continuous"}))
def test_other_engines_schedulers_do_not(name: str) -> None:
    """TensorRT-LLM's, SGLang's, static batching's and vLLM V0's subclass vLLM v1's."""
    replica = _replica(replace(PLAIN, scheduler=name))
    assert isinstance(replica.scheduler, Scheduler) and type(replica.scheduler) is not Scheduler
    assert not replica.scheduler._admits_plainly()
