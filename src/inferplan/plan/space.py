"""The search space: every per-replica configuration the request file allows.

A *replica configuration* is GPU x TP x PP x EP (MoE models only) x weight format x KV dtype x
engine x ``max_num_seqs`` x ``max_num_batched_tokens``; a *deployment* is a replica
configuration times a replica count (DP), from 1 to ``max_gpus`` / GPUs per replica. The search
enumerates replica configurations and derives the replica count from simulation (``capacity``),
so the deployments are counted (``num_deployments``) but never listed one by one.

Node boundaries: a TP group stays inside one node (``gpus_per_node``, 8 on HGX/DGX boards,
whose NVLink domain it is) unless ``allow_cross_node_tp``; pipeline stages may span nodes (their
point-to-point sends are small). TP sizes must divide the model's heads (vLLM's rule,
``memory.plan.check_sharding``); configurations that break it are dropped, not counted.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from inferplan.errors import InferplanError
from inferplan.memory.plan import check_sharding
from inferplan.plan.request import PlanRequest
from inferplan.specs.catalog import load_model
from inferplan.specs.parallel import Parallelism


@dataclass(frozen=True, order=True)
class ReplicaConfig:
    hardware_index: int  # into the request's hardware list
    gpu: str
    tp: int
    pp: int
    ep: bool
    quantization: str
    kv_cache_dtype: str
    engine: str
    max_num_seqs: int
    max_num_batched_tokens: int
    max_gpus: int
    gpus_per_node: int

    @property
    def devices_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def max_replicas(self) -> int:
        return self.max_gpus // self.devices_per_replica

    @property
    def parallelism(self) -> Parallelism:
        return Parallelism(tp=self.tp, pp=self.pp, enable_expert_parallel=self.ep)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        ep = " ep" if self.ep else ""
        return (
            f"{self.gpu} tp{self.tp} pp{self.pp}{ep} {self.quantization}/kv {self.kv_cache_dtype} "
            f"{self.engine} seqs {self.max_num_seqs} tokens {self.max_num_batched_tokens}"
        )


def replica_configs(request: PlanRequest) -> list[ReplicaConfig]:
    """Every valid replica configuration, in a fixed order (the file's lists' order)."""
    spec = load_model(request.model)
    space = request.parallelism
    eps = space.expert_parallel if space.expert_parallel is not None else [False, spec.is_moe]
    eps = sorted(set(e for e in eps if spec.is_moe or not e))
    out = []
    for index, hw in enumerate(request.hardware):
        shapes = itertools.product(space.tensor_parallel_size, space.pipeline_parallel_size, eps)
        for tp, pp, ep in shapes:
            if tp * pp > hw.max_gpus or (tp > hw.gpus_per_node and not space.allow_cross_node_tp):
                continue
            if not _shards(spec, Parallelism(tp=tp, pp=pp, enable_expert_parallel=ep)):
                continue
            knobs = itertools.product(
                request.quantization,
                request.kv_cache_dtype,
                request.engines,
                request.max_num_seqs,
                request.max_num_batched_tokens,
            )
            for quant, kv, engine, seqs, tokens in knobs:
                out.append(
                    ReplicaConfig(
                        index,
                        hw.gpu,
                        tp,
                        pp,
                        ep,
                        quant,
                        kv,
                        engine,
                        seqs,
                        tokens,
                        hw.max_gpus,
                        hw.gpus_per_node,
                    )
                )
    return out


def _shards(spec: Any, par: Parallelism) -> bool:
    try:
        check_sharding(spec, par)
    except InferplanError:
        return False
    return par.pp <= spec.num_layers


def num_deployments(configs: list[ReplicaConfig]) -> int:
    """Replica configurations times their possible replica counts."""
    return sum(c.max_replicas for c in configs)
