"""``simulate --pools``: the class-pool flags, their checks, and the run with its
``class_pools`` JSON section (``cluster/classpools.py``, ``cluster/classpool_sim.py``). Kept out
of ``cli.py`` so that the command module stays a thin parser."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import click

from inferplan.cli_checks import bounded
from inferplan.cli_flags import option_group
from inferplan.cluster.classpool_sim import simulate_class_pools
from inferplan.cluster.classpools import MAX_INTERVAL_S, class_pools
from inferplan.engine.frontend import FrontEnd, seen_result
from inferplan.engine.session import ServingOptions, simulation_config
from inferplan.engine.simulator import SimulationResult
from inferplan.engine.tokenizer_stage import at_client_times, tokenized
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryPlan
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.request import Workload


@dataclass(frozen=True)
class ClassPoolFlags:
    pools: str | None
    default_pool: str | None
    repartition: str | None
    repartition_interval_s: float | None
    repartition_cooldown_s: float | None

    def check(self) -> None:
        """Flags that need another flag (their values are checked with the replica count)."""
        if self.pools is None:
            for f in fields(self):
                if f.name != "pools" and getattr(self, f.name) is not None:
                    raise InferplanError(f"--{f.name.replace('_', '-')}: needs --pools")
        elif self.repartition is None:
            for name in ("repartition_interval_s", "repartition_cooldown_s"):
                if getattr(self, name) is not None:
                    raise InferplanError(f"--{name.replace('_', '-')}: needs --repartition")

    def check_with(self, disaggregate: bool) -> None:
        if self.pools is not None and disaggregate:
            raise InferplanError(
                "--pools: class pools split data-parallel replicas; not with --disaggregate"
            )


classpool_options = option_group(
    [
        click.option(
            "--pools",
            default=None,
            metavar="NAME=N,...",
            help="Split the replicas into pools by workload class, e.g. reasoning=3,chat=5 "
            "(counts add up to --data-parallel-size; docs/pools.md)",
        ),
        click.option(
            "--default-pool",
            default=None,
            help="Pool for classes without a pool of their name (default: the last listed)",
        ),
        click.option(
            "--repartition",
            default=None,
            metavar="queue:N|ttft:S",
            help="Move a replica to a pool whose waiting requests or TTFT cross the threshold",
        ),
        click.option(
            "--repartition-interval-s",
            type=bounded(0, MAX_INTERVAL_S, is_int=False, low_open=True),
            default=None,
            help="Seconds between repartition checks (default 5)",
        ),
        click.option(
            "--repartition-cooldown-s",
            type=bounded(0, MAX_INTERVAL_S, is_int=False),
            default=None,
            help="Seconds after a move ends before the next may start (default 60)",
        ),
    ],
    ClassPoolFlags,
    "classpool",
)


def pooled_run(
    flags: ClassPoolFlags,
    plan: MemoryPlan,
    model: StepTimeModel,
    workload: Workload,
    options: ServingOptions,
    on_progress: Callable[[int], None] | None,
    frontend: FrontEnd | None = None,
) -> tuple[SimulationResult, dict[str, Any]]:
    """The run on ``--pools``' class pools behind ``frontend``'s tokenizer stage, on the
    client's clock (as ``simulate_tokenized`` runs the shared pool; the stream gate, one replica
    only, does not apply to pools), and ``{"class_pools": its JSON section}`` as the client sees
    it through ``frontend`` (``engine/frontend.py``)."""
    assert flags.pools is not None
    spec = class_pools(
        flags.pools,
        options.data_parallel_size,
        flags.default_pool,
        flags.repartition,
        flags.repartition_interval_s,
        flags.repartition_cooldown_s,
    )
    cfg = simulation_config(plan, options)
    fe = frontend or FrontEnd()
    # Behind the front end's tokenizer stage, as the run without pools (``simulate_tokenized``).
    delayed, delays = tokenized(workload, fe, options)
    pooled = simulate_class_pools(delayed, cfg, model, spec, on_progress)
    pooled = replace(pooled, result=at_client_times(pooled.result, delays))
    seen, _ = seen_result(pooled.result, fe, options.data_parallel_size)
    return pooled.result, {"class_pools": replace(pooled, result=seen).summary_json(spec)}
