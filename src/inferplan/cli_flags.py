"""The command line's shared flag groups, each collapsed into one small object.

Deployment flags follow vLLM's names and meanings; workload flags follow ``vllm bench serve``.
A decorator adds a group's options to a command and hands the command one object
(``deployment`` or ``workload``) instead of a dozen parameters. Each option's type carries its
range (``cli_checks.bounded``), and the decorator calls the group's ``check()`` (names, device
count, the files given) before the command does any work (``docs/errors.md``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click

from inferplan.cli_checks import bounded, check_devices, check_engine_rules, check_name
from inferplan.cli_checks import goodput_slo as goodput_slo  # re-exported for other commands
from inferplan.cli_checks import int_list as int_list  # re-exported for other commands
from inferplan.engine.frontend import FrontEnd
from inferplan.errors import InferplanError
from inferplan.limits import (
    MAX_BLOCK_TOKENS,
    MAX_DEVICES,
    MAX_NUM_REQUESTS,
    MAX_NUM_SEQS,
    MAX_SEED,
    MAX_STEP_TOKENS,
    MAX_TOKENS,
    MIN_BURSTINESS,
)
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory
from inferplan.perf.efficiency import Efficiency, efficiency_for, load_efficiency_file
from inferplan.perf.expert_loads import parse_routing
from inferplan.perf.factory import build_step_model
from inferplan.perf.placement import PLACEMENTS
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.table import load_operator_table
from inferplan.plan.engine_moe import with_engine_moe
from inferplan.plan.trtllm_runtime import runtime_efficiency, runtime_frontend, runtime_graphs
from inferplan.specs.catalog import load_model
from inferplan.specs.engines import (
    ENGINES,
    TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION,
    engine_defaults,
    sglang_mem_fraction_static,
    vllm_expert_padding,
)
from inferplan.specs.hardware import load_gpu
from inferplan.specs.parallel import Parallelism
from inferplan.specs.topology import topology_for
from inferplan.workload import build_workload
from inferplan.workload.request import Workload

DEVICES = bounded(1, MAX_DEVICES, limit="MAX_DEVICES")
TOKENS = bounded(1, MAX_TOKENS, limit="MAX_TOKENS")


def build_memory_plan(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    ep: bool,
    quantization: str | None,
    kv_cache_dtype: str,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    block_size: int | None,
    engine: str = "vllm",
    dp: int = 1,
    *,
    gpus_per_node: int | None = None,
    allow_cross_node_tp: bool = False,
    num_redundant_experts: int = 0,
    kv_cache_free_gpu_mem_fraction: float | None = None,
    mem_fraction_static: float | None = None,
) -> MemoryPlan:
    """Resolve flags (engine defaults where unset) into a memory plan. Each engine sizes its
    KV pool by its own rule (``memory/plan.py``): TensorRT-LLM 0.9 of the memory free after
    weights unless ``--kv-cache-free-gpu-mem-fraction``, SGLang its computed
    ``--mem-fraction-static``, vLLM ``--gpu-memory-utilization`` of the total."""
    spec = load_model(model)
    device = load_gpu(gpu)
    defaults = engine_defaults(engine, device)
    if engine == "trtllm" and kv_cache_free_gpu_mem_fraction is None:
        kv_cache_free_gpu_mem_fraction = TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION
    if engine == "sglang" and mem_fraction_static is None:
        mem_fraction_static = sglang_mem_fraction_static(device, tp, pp, dp if ep else 1)
    for flag, value, owner in (
        ("--kv-cache-free-gpu-mem-fraction", kv_cache_free_gpu_mem_fraction, "trtllm"),
        ("--mem-fraction-static", mem_fraction_static, "sglang"),
    ):
        if value is not None and engine != owner:
            raise InferplanError(f"{flag}: applies to --engine {owner} only (got {engine})")

    def default(value: int | None, fallback: int) -> int:
        return fallback if value is None else value

    budget = default(max_num_batched_tokens, defaults.max_num_batched_tokens)
    seqs_default = defaults.max_num_seqs
    if engine == "vllm":  # vLLM lowers its default max_num_seqs to the token budget
        seqs_default = min(seqs_default, budget)
    seqs = default(max_num_seqs, seqs_default)
    check_engine_rules(
        spec,
        engine,
        max_model_len=max_model_len,
        block_size=block_size,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
    )
    padding = vllm_expert_padding(spec, device, quantization) if engine == "vllm" else None
    cfg = MemoryConfig(
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        block_size=default(block_size, defaults.block_size),
        kv_cache_free_gpu_mem_fraction=kv_cache_free_gpu_mem_fraction,
        mem_fraction_static=mem_fraction_static,
        expert_padding=padding,
    )
    par = Parallelism(
        tp=tp,
        pp=pp,
        dp=dp,
        enable_expert_parallel=ep,
        num_redundant_experts=num_redundant_experts,
    )
    topology = topology_for(
        device, gpus_per_node=gpus_per_node, allow_cross_node_tp=allow_cross_node_tp
    )
    return plan_memory(spec, device, par, cfg, topology)


@dataclass(frozen=True)
class DeploymentFlags:
    model: str
    gpu: str
    tp: int
    pp: int
    dp: int
    enable_expert_parallel: bool
    quantization: str | None
    kv_cache_dtype: str
    max_model_len: int | None
    gpu_memory_utilization: float
    max_num_batched_tokens: int | None
    max_num_seqs: int | None
    block_size: int | None
    engine: str
    calibration: str | None
    operator_table: str | None
    gpus_per_node: int | None
    allow_cross_node_tp: bool
    expert_routing: str | None
    expert_placement: str
    num_redundant_experts: int
    kv_cache_free_gpu_mem_fraction: float | None = None
    mem_fraction_static: float | None = None
    # ``simulate --trtllm-runtime`` (not a deployment option: set by that command only);
    # None: trtllm-serve (``plan/trtllm_runtime.py``).
    trtllm_runtime: str | None = None

    def check(self) -> None:
        """Names, device count and the files given (read now, so a bad one fails first)."""
        for flag, value in (
            ("--model", self.model),
            ("--gpu", self.gpu),
            ("--calibration", self.calibration),
            ("--operator-table", self.operator_table),
        ):
            check_name(flag, value)
        check_devices(self.tp, self.pp, self.dp)
        self.efficiency()
        if self.operator_table:
            load_operator_table(Path(self.operator_table))

    def efficiency(self) -> Efficiency | None:
        """Constants from ``--calibration`` (None: the GPU family's bundled ones)."""
        return load_efficiency_file(Path(self.calibration)) if self.calibration else None

    def step_model(
        self,
        plan: MemoryPlan,
        *,
        moe_skew: float = 0.0,
        cuda_graphs: bool = True,
        class_token_shares: dict[str, float] | None = None,
        engine_costs: bool = False,
    ) -> StepTimeModel:
        """The roofline with ``--calibration``'s constants, backed by ``--operator-table``;
        MoE routing from ``--expert-routing`` (or ``--moe-skew``), mixed by traffic class.
        ``engine_costs``: ``--engine``'s host costs, kernel factor and decode CUDA graphs, as
        ``validate`` predicts a served run (``plan/served.py``; TensorRT-LLM's by
        ``--trtllm-runtime``, ``plan/trtllm_runtime.py``; ``--calibration`` replaces the
        constants). The MoE layers exchange tokens under attention DP and run their expert
        passes as ``--engine`` does (``plan/engine_moe.py``)."""
        moe = next((g.ffn for g in plan.spec.layer_groups if g.ffn.kind == "moe"), None)
        routing = parse_routing(
            self.expert_routing,
            moe_skew=moe_skew,
            placement=self.expert_placement,
            num_experts=moe.num_experts if moe else None,
            token_shares=class_token_shares,
        )
        efficiency = self.efficiency()
        if engine_costs and efficiency is None:
            family = efficiency_for(plan.gpu)
            efficiency = runtime_efficiency(family, plan, self.engine, self.trtllm_runtime)
        model = build_step_model(
            plan,
            efficiency=efficiency,
            routing=routing,
            cuda_graphs=cuda_graphs,
            table_path=Path(self.operator_table) if self.operator_table else None,
        )
        if isinstance(model, RooflineModel):
            if engine_costs:
                model.graphs = runtime_graphs(plan, self.engine, self.trtllm_runtime)
            with_engine_moe(model, plan, self.engine)  # as ``validate`` runs it
        return model

    def frontend(self) -> FrontEnd:
        """``--engine``'s HTTP front end (``engine/frontend.py``); none with ``--calibration``,
        whose constants were fitted to end-to-end measurements that already include it, and
        none with ``--trtllm-runtime trtllm-bench`` (offline)."""
        if self.calibration:
            return FrontEnd()
        return runtime_frontend(self.engine, self.trtllm_runtime)

    def plan(self) -> MemoryPlan:
        return build_memory_plan(
            self.model,
            self.gpu,
            self.tp,
            self.pp,
            self.enable_expert_parallel,
            self.quantization,
            self.kv_cache_dtype,
            self.max_model_len,
            self.gpu_memory_utilization,
            self.max_num_batched_tokens,
            self.max_num_seqs,
            self.block_size,
            self.engine,
            dp=self.dp,
            gpus_per_node=self.gpus_per_node,
            allow_cross_node_tp=self.allow_cross_node_tp,
            num_redundant_experts=self.num_redundant_experts,
            kv_cache_free_gpu_mem_fraction=self.kv_cache_free_gpu_mem_fraction,
            mem_fraction_static=self.mem_fraction_static,
        )


@dataclass(frozen=True)
class WorkloadFlags:
    dataset_name: str
    dataset_path: str | None
    num_prompts: int | None
    random_input_len: int | None
    random_output_len: int | None
    random_range_ratio: float | None
    request_rate: float | None
    burstiness: float
    seed: int
    reasoning_share: float | None = None  # --dataset-name mixed

    def check(self) -> None:
        check_name("--dataset-path", self.dataset_path)

    def build(self) -> Workload:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return build_workload(values.pop("dataset_name"), **values)


def option_group(
    options: list[Callable[[Any], Any]], flags_type: type, keyword: str
) -> Callable[[Any], Any]:
    """A decorator adding ``options`` and passing their values as one ``flags_type``."""
    names = [f.name for f in fields(flags_type)]

    def decorate(func: Callable[..., Any]) -> Any:
        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            # Fields without an option of the group keep their defaults (a command sets them).
            group = flags_type(**{name: kwargs.pop(name) for name in names if name in kwargs})
            if hasattr(group, "check"):
                group.check()  # every flag of the group checked before the command's work
            return func(**{keyword: group}, **kwargs)

        for option in reversed(options):
            command = option(command)
        return command

    return decorate


deployment_options = option_group(
    [
        click.option(
            "--model", required=True, help="Bundled model (HF id or short name) or config.json path"
        ),
        click.option("--gpu", required=True, help="Catalog GPU (h100, h200, ...) or YAML file"),
        click.option(
            "--tensor-parallel-size", "-tp", "tp", type=DEVICES, default=1, show_default=True
        ),
        click.option(
            "--pipeline-parallel-size", "-pp", "pp", type=DEVICES, default=1, show_default=True
        ),
        click.option(
            "--data-parallel-size",
            "-dp",
            "dp",
            type=DEVICES,
            default=1,
            show_default=True,
            help="Replicas; with --enable-expert-parallel, DP-attention ranks of one replica",
        ),
        click.option(
            "--enable-expert-parallel", is_flag=True, help="Spread whole experts over the ranks"
        ),
        click.option(
            "--quantization",
            "-q",
            default=None,
            help="Weights: bf16|fp16|fp8|int8|int4|nvfp4|mxfp4 (default: checkpoint's)",
        ),
        click.option(
            "--kv-cache-dtype",
            default="auto",
            show_default=True,
            help="auto|bf16|fp16|fp8|fp8_e4m3|fp8_e5m2|int8|int4",
        ),
        click.option(
            "--max-model-len",
            type=TOKENS,
            default=None,
            help="Max context length (default: the model's)",
        ),
        click.option(
            "--gpu-memory-utilization",
            type=bounded(0, 1, is_int=False, low_open=True),
            default=0.9,
            show_default=True,
        ),
        click.option(
            "--kv-cache-free-gpu-mem-fraction",
            type=float,
            default=None,
            help="--engine trtllm: KV share of the memory free after weights (default 0.9)",
        ),
        click.option(
            "--mem-fraction-static",
            type=float,
            default=None,
            help="--engine sglang: weights + KV share of the memory (default: SGLang's formula)",
        ),
        click.option(
            "--max-num-batched-tokens",
            type=bounded(1, MAX_STEP_TOKENS, limit="MAX_STEP_TOKENS"),
            default=None,
            help="Token budget per step (default: the engine's)",
        ),
        click.option(
            "--max-num-seqs",
            type=bounded(1, MAX_NUM_SEQS, limit="MAX_NUM_SEQS"),
            default=None,
            help="Max running sequences (default: the engine's)",
        ),
        click.option(
            "--block-size",
            type=bounded(1, MAX_BLOCK_TOKENS, limit="MAX_BLOCK_TOKENS"),
            default=None,
            help="KV block size in tokens (vLLM: 1, 8, 16, 32, 64, 128)",
        ),
        click.option(
            "--engine",
            type=click.Choice(ENGINES),
            default="vllm",
            show_default=True,
            help="Whose defaults to use (memory, token budget, block size)",
        ),
        click.option(
            "--calibration",
            default=None,
            help="YAML of efficiency constants (the GPU family's bundled ones by default)",
        ),
        click.option(
            "--operator-table",
            default=None,
            metavar="FILE",
            help="Measured operator times (`inferplan profile` CSV); the roofline fills gaps",
        ),
        click.option(
            "--gpus-per-node",
            type=int,
            default=None,
            help="GPUs per node (default: the catalog's scale-up domain, 8 for PCIe cards)",
        ),
        click.option(
            "--allow-cross-node-tp",
            is_flag=True,
            help="Let a tensor-parallel group span nodes (its all-reduces cross the NICs)",
        ),
        click.option(
            "--expert-routing",
            default=None,
            metavar="uniform|zipf:S|FILE",
            help="MoE routing distribution: uniform, Zipf exponent S, or an expert-load CSV",
        ),
        click.option(
            "--expert-placement",
            type=click.Choice(tuple(PLACEMENTS)),
            default="linear",
            show_default=True,
            help=(
                "Experts on EP ranks: contiguous ids, round-robin, EPLB load-balanced, or "
                "oblivious (hot experts at ids unrelated to load)"
            ),
        ),
        click.option(
            "--num-redundant-experts",
            type=int,
            default=0,
            show_default=True,
            help="Extra expert slots for copies of hot experts (with --expert-placement eplb)",
        ),
    ],
    DeploymentFlags,
    "deployment",
)

workload_options = option_group(
    [
        click.option(
            "--dataset-name",
            default="random",
            show_default=True,
            help="random|trace|servegen|reasoning|mixed|reasoning-burst",
        ),
        click.option(
            "--dataset-path", default=None, help="Trace file or bundled trace name (see README)"
        ),
        click.option(
            "--num-prompts",
            type=bounded(1, MAX_NUM_REQUESTS, limit="MAX_NUM_REQUESTS"),
            default=None,
            help="Requests (default 1000)",
        ),
        click.option("--random-input-len", type=TOKENS, default=None),
        click.option("--random-output-len", type=TOKENS, default=None),
        click.option(
            "--random-range-ratio", type=bounded(0, 1, is_int=False, high_open=True), default=None
        ),
        click.option(
            "--request-rate",
            type=bounded(0, math.inf, is_int=False, low_open=True),
            default=None,
            help="Requests/s (default inf: all at once; traces keep their times)",
        ),
        click.option(
            "--burstiness",
            type=bounded(MIN_BURSTINESS, math.inf, is_int=False, limit="MIN_BURSTINESS"),
            default=1.0,
            show_default=True,
            help="Gamma shape of inter-arrivals (1 = Poisson)",
        ),
        click.option(
            "--seed", type=bounded(0, MAX_SEED, limit="MAX_SEED"), default=0, show_default=True
        ),
        click.option(
            "--reasoning-share",
            type=bounded(0, 1, is_int=False),
            default=None,
            help="--dataset-name mixed: share of reasoning requests (default 0.3; the rest chat)",
        ),
    ],
    WorkloadFlags,
    "workload",
)

json_option = click.option(
    "--json", "json_out", is_flag=True, help="Machine-readable output on stdout"
)
