"""How one replica is split across devices (vLLM's flags and meanings).

``tp`` shards every layer's heads and FFN columns; ``pp`` splits the layer stack into stages;
with ``enable_expert_parallel`` the routed experts are spread whole over ``ep = tp * dp`` ranks
instead of being sharded by ``tp`` (vLLM: EP size = TP x DP).

``dp`` means what it means in vLLM. Without expert parallelism it counts independent replicas.
With it, the ``dp`` ranks form one replica whose attention is data-parallel: each rank runs
attention (and dense layers) with ``tp``-way sharding on its own share of the sequences and
keeps their KV cache, while every MoE layer dispatches tokens to the experts spread over all
``tp * dp`` ranks (vLLM's DP + EP deployment, DeepSeek's "DP attention").

``num_redundant_experts`` extra expert slots (vLLM ``--num-redundant-experts``, DeepSeek's
EPLB) hold copies of hot experts: each EP rank stores ``(E + R) / ep`` experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.errors import InferplanError


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    enable_expert_parallel: bool = False
    num_redundant_experts: int = 0

    def __post_init__(self) -> None:
        for flag, value in (
            ("--tensor-parallel-size", self.tp),
            ("--pipeline-parallel-size", self.pp),
            ("--data-parallel-size", self.dp),
        ):
            if value < 1:
                raise InferplanError(f"{flag}: must be an integer >= 1, got {value}")
        if self.num_redundant_experts < 0:
            raise InferplanError(
                f"--num-redundant-experts: must be >= 0, got {self.num_redundant_experts}"
            )
        if self.num_redundant_experts and not self.enable_expert_parallel:
            raise InferplanError(
                "--num-redundant-experts: copies of experts need --enable-expert-parallel"
            )

    @property
    def ep(self) -> int:
        """Expert-parallel group size (1 when experts are tensor-sharded)."""
        return self.tp * self.dp if self.enable_expert_parallel else 1

    @property
    def attention_dp(self) -> int:
        """Data-parallel attention ranks inside one replica (1 unless DP + EP)."""
        return self.dp if self.enable_expert_parallel else 1

    @property
    def num_replicas(self) -> int:
        return self.dp // self.attention_dp

    @property
    def devices_per_replica(self) -> int:
        return self.tp * self.pp * self.attention_dp

    @property
    def num_devices(self) -> int:
        return self.tp * self.pp * self.dp


def stage_layer_counts(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: even split, the remainder on the stages before the last
    (vLLM ``get_pp_indices``), so the last stage, which also holds the LM head, is lighter."""
    if pp > num_layers:
        raise InferplanError(
            f"--pipeline-parallel-size: {pp} stages for {num_layers} layers; at most {num_layers}"
        )
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return sizes
