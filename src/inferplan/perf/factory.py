"""Build the step-time model for a memory plan: roofline, optionally backed by a measured table."""

from __future__ import annotations

from pathlib import Path

from inferplan.memory.plan import MemoryPlan
from inferplan.perf.efficiency import Efficiency, efficiency_for
from inferplan.perf.moe import Routing
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.table import TableModel, load_operator_table


def build_step_model(
    plan: MemoryPlan,
    *,
    efficiency: Efficiency | None = None,
    routing: Routing | None = None,
    cuda_graphs: bool = True,
    table_path: Path | None = None,
) -> StepTimeModel:
    roofline = RooflineModel(
        plan.spec,
        plan.gpu,
        plan.parallelism,
        plan.weight_formats,
        plan.kv_format,
        efficiency or efficiency_for(plan.gpu),
        routing=routing,
        cuda_graphs=cuda_graphs,
        topology=plan.topology,
    )
    if table_path is None:
        return roofline
    return TableModel(roofline, load_operator_table(table_path))
