"""From a memory plan, a step-time model and a workload to a finished simulation.

The scheduler's limits come from the plan (KV pool blocks per layer kind, block size, token
budget, max sequences, max model length); swap traffic uses one pool block's bytes over the
GPU's host link.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from inferplan.engine.admission import AdmissionConfig
from inferplan.engine.apart import auto_workers, run_apart
from inferplan.engine.replica import SchedulerConfig
from inferplan.engine.schedulers import SCHEDULERS as SCHEDULER_KINDS
from inferplan.engine.sglang_ranks import ranked_scheduler
from inferplan.engine.simsetup import arrival_rejections
from inferplan.engine.simulator import Simulation, SimulationConfig, SimulationResult
from inferplan.engine.speculation import SimSpeculation
from inferplan.errors import InferplanError
from inferplan.memory.blockpool import FULL_ATTENTION, BlockPool, pool_layout
from inferplan.memory.plan import MemoryPlan
from inferplan.memory.sglang_pool import full_length_pool
from inferplan.memory.tiers import OffloadConfig, TierRequest, replica_tier
from inferplan.perf.protocol import StepTimeModel
from inferplan.workload.prefixes import with_own_blocks
from inferplan.workload.request import Workload

SCHEDULERS = ("continuous", "static", "prefill-first")
ENGINE_SCHEDULERS = {"vllm": "continuous", "trtllm": "trtllm", "sglang": "sglang"}
PREEMPTION_MODES = ("recompute", "swap")


@dataclass(frozen=True)
class ServingOptions:
    scheduler: str = "continuous"
    preemption_mode: str = "recompute"
    scheduling_policy: str = "fcfs"
    data_parallel_size: int = 1
    router: str = "round_robin"
    max_concurrency: int | None = None
    exact: bool = False
    engine: str = "vllm"
    num_scheduler_steps: int = 1  # prefill-first: vLLM V0's multi-step scheduling
    # vLLM v1's automatic prefix caching or SGLang's radix cache; None: on for vLLM's v1
    # scheduler and SGLang (their defaults).
    enable_prefix_caching: bool | None = None
    # Admission control, length predictors, SPF aging (``engine/admission.py``); None: off.
    admission: AdmissionConfig | None = None
    # KV tiers below HBM (``memory/tiers.py``, ``engine/offload.py``); empty: none.
    kv_tiers: tuple[TierRequest, ...] = ()
    kv_eviction_cap_bytes_s: float | None = None
    # SGLang's ``--schedule-conservativeness`` (its new-token ratio's scale); None: 1.
    schedule_conservativeness: float | None = None
    # TensorRT-LLM's ``enable_chunked_prefill`` (off by default in its LLM API and
    # ``trtllm-serve``): contexts chunked first come first served (``TrtllmChunkedScheduler``).
    trtllm_chunked_prefill: bool = False
    # Speculative decoding (``engine/speculation.py``): vLLM v1 only; None: off.
    speculative: SimSpeculation | None = None
    # Processes that simulate DP replicas apart where routing is known in advance (round
    # robin; ``engine/apart.py``): the same result as one process, in less wall time.
    # None: ``apart.auto_workers`` decides (one per usable core for large runs).
    sim_workers: int | None = 1

    @property
    def prefix_caching(self) -> bool:
        if self.enable_prefix_caching is not None:
            return self.enable_prefix_caching
        # vLLM v1's prefix caching and SGLang's radix cache are both on by default.
        return self.engine in ("vllm", "sglang") and self.scheduler == "continuous"

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise InferplanError(f"--scheduler: valid: {', '.join(SCHEDULERS)}")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise InferplanError(f"--preemption-mode: valid: {', '.join(PREEMPTION_MODES)}")
        if self.engine == "sglang" and self.scheduler != "continuous":
            raise InferplanError(
                f"--scheduler {self.scheduler}: --engine sglang runs SGLang's own scheduler; "
                "drop --scheduler (or use --engine vllm)"
            )
        if self.engine == "sglang" and self.scheduling_policy not in ("fcfs", "lpm"):
            raise InferplanError(
                f"--scheduling-policy {self.scheduling_policy}: SGLang's scheduler is emulated "
                "with fcfs (its default) or lpm (its --schedule-policy lpm)"
            )
        if self.engine != "sglang" and self.scheduling_policy == "lpm":
            raise InferplanError(
                "--scheduling-policy lpm: SGLang's longest-prefix-match policy; needs "
                "--engine sglang"
            )
        if self.engine not in ENGINE_SCHEDULERS:
            raise InferplanError(
                f"--engine {self.engine}: its scheduler is not emulated yet; "
                f"simulate supports {', '.join(ENGINE_SCHEDULERS)} "
                "(memory and roofline accept every engine)"
            )
        if self.preemption_mode == "swap" and self.scheduler != "prefill-first":
            # vLLM v1 preempts by recompute only; TensorRT-LLM's GUARANTEED_NO_EVICT and static
            # batching never preempt. vLLM V0 (emulated by prefill-first) swaps to host memory.
            raise InferplanError(
                "--preemption-mode swap: only vLLM V0 swaps (--scheduler prefill-first); vLLM v1 "
                "preempts by recompute, TensorRT-LLM and static batching never preempt"
            )
        if self.trtllm_chunked_prefill and self.engine != "trtllm":
            raise InferplanError(
                f"--engine {self.engine}: TensorRT-LLM's chunked context applies to "
                "--engine trtllm only"
            )
        if self.num_scheduler_steps < 1:
            raise InferplanError(
                f"--num-scheduler-steps: must be >= 1, got {self.num_scheduler_steps}"
            )
        if self.num_scheduler_steps > 1 and self.scheduler != "prefill-first":
            raise InferplanError(
                "--num-scheduler-steps: multi-step scheduling is emulated with "
                "--scheduler prefill-first only (vLLM V0)"
            )
        if self.enable_prefix_caching and (
            self.engine not in ("vllm", "sglang") or self.scheduler != "continuous"
        ):
            raise InferplanError(
                "--enable-prefix-caching: emulated for vLLM v1 (--engine vllm, --scheduler "
                "continuous) and SGLang's radix cache (--engine sglang)"
            )
        if self.admission is not None:
            self.admission.check(self.engine, self.scheduler, self.scheduling_policy)
        self._check_conservativeness()
        self._check_kv_tiers()
        self._check_speculative()
        if self.data_parallel_size < 1:
            raise InferplanError(
                f"--data-parallel-size: must be >= 1, got {self.data_parallel_size}"
            )

    def _check_conservativeness(self) -> None:
        value = self.schedule_conservativeness
        if value is None:
            return
        if self.engine != "sglang":
            raise InferplanError(
                "--schedule-conservativeness: SGLang's flag; needs --engine sglang"
            )
        if not 0 < value < float("inf"):
            raise InferplanError(f"--schedule-conservativeness: must be > 0, got {value}")

    def _check_kv_tiers(self) -> None:
        if self.kv_eviction_cap_bytes_s is not None and not self.kv_tiers:
            raise InferplanError("--kv-eviction-bandwidth: needs --kv-tiers")
        if self.kv_tiers and (self.engine, self.scheduler, self.preemption_mode) != (
            "vllm",
            "continuous",
            "recompute",
        ):
            raise InferplanError(
                "--kv-tiers: emulated for vLLM v1 only (--engine vllm, --scheduler continuous, "
                "--preemption-mode recompute)"
            )

    def _check_speculative(self) -> None:
        if self.speculative is None:
            return
        if (self.engine, self.scheduler) != ("vllm", "continuous"):
            raise InferplanError(
                "--speculative-method: emulated in the simulator for vLLM v1 only (--engine "
                "vllm, --scheduler continuous)"
            )
        admission = self.admission is not None and self.admission.is_active
        if self.kv_tiers or admission:
            flag = "--kv-tiers" if self.kv_tiers else "--admission"
            raise InferplanError(f"{flag}: not emulated with --speculative-method")


def offload_config(plan: MemoryPlan, options: ServingOptions, block_bytes: float) -> OffloadConfig:
    """The replica's tiers: the catalog's per-GPU bandwidths times its GPUs, one pool block's
    bytes over the TP x PP GPUs that hold it (a DP-attention rank's group)."""
    par = plan.parallelism
    gpus = par.devices_per_replica
    tiers = tuple(replica_tier(t, plan.gpu.host_link_bytes_s, gpus) for t in options.kv_tiers)
    return OffloadConfig(
        tiers=tiers,
        block_bytes=block_bytes * par.tp * par.pp,
        eviction_cap_bytes_s=options.kv_eviction_cap_bytes_s,
        overlaps_compute=True,  # vLLM v1's KV connectors load and store asynchronously
    )


def _replica_scheduler(options: ServingOptions) -> str:
    if options.scheduler == "continuous":
        if options.engine == "trtllm" and options.trtllm_chunked_prefill:
            return "trtllm_chunked"
        return ENGINE_SCHEDULERS[options.engine]
    return options.scheduler.replace("-", "_")


def simulate(
    plan: MemoryPlan,
    model: StepTimeModel,
    workload: Workload,
    options: ServingOptions,
    on_progress: Callable[[int], None] | None = None,
) -> SimulationResult:
    sim_cfg = simulation_config(plan, options)
    served = served_workload(workload, options, sim_cfg)
    sim = Simulation(served, sim_cfg, model)
    workers = auto_workers(sim) if options.sim_workers is None else options.sim_workers
    if workers > 1:
        result = run_apart(sim, workers, on_progress)
    else:
        result = sim.run(on_progress=on_progress)
    if not _rehits_own_blocks(options) or workload.prefix_hashes is not None:
        return result
    # Nothing is shared between distinct prompts: the cache's hit counts (re-hits after a
    # preemption) are not the prefix reuse the summary reports, which keeps its keys off.
    records = replace(result.records, cached_tokens=None, prefix_queried_tokens=None)
    return replace(result, records=records, prefix_caches=[])


def rejection_counts(
    plan: MemoryPlan, workload: Workload, options: ServingOptions
) -> dict[str, int]:
    """How many requests the server refuses at arrival, per reason (``arrival_rejections``),
    for the reasons that hold for any: what `simulate` tells a user whose run rejected some."""
    cfg = simulation_config(plan, options)
    sched = cfg.scheduler
    pool = BlockPool(sched.num_blocks, sched.block_size, sched.kv_groups)
    masks = arrival_rejections(cfg, workload, SCHEDULER_KINDS[sched.scheduler], pool)
    counts = {reason: int(mask.sum()) for reason, mask in masks.items()}
    return {reason: n for reason, n in counts.items() if n}


def sglang_radix_note(plan: MemoryPlan, workload: Workload, options: ServingOptions) -> str | None:
    """What ``simulate`` tells a user whose SGLang run under DP attention carries prefix hashes:
    SGLang keeps one radix tree per DP-attention rank, which the per-rank scheduler
    (``sglang_ranks.py``) does not emulate, so no prefix hit is counted there (every prompt is
    prefilled in full). None where the radix cache would not have applied anyway."""
    dpa = plan.parallelism.attention_dp
    if options.engine != "sglang" or dpa <= 1 or not options.prefix_caching:
        return None
    if workload.prefix_hashes is None:
        return None
    return (
        f"SGLang's radix cache is not emulated under DP attention ({dpa} ranks, one tree each): "
        "no prefix hits are counted, every prompt is prefilled in full"
    )


def served_workload(
    workload: Workload, options: ServingOptions, sim_cfg: SimulationConfig
) -> Workload:
    """The workload the engine runs: with blocks of each request's own where vLLM v1 re-hits
    them (``_rehits_own_blocks``) and it has no hashes. Full-attention pools count them
    (``memory/ownblocks.py``); a windowed pool's cache moves parts within its LRU list on a
    hit and needs one id per block."""
    if not _rehits_own_blocks(options) or workload.prefix_hashes is not None:
        return workload
    return with_own_blocks(workload, hashed=sim_cfg.scheduler.kv_groups != FULL_ATTENTION)


# SGLang 0.5 with DP attention (``server_args.py`` ``_handle_data_parallelism``) divides
# ``chunked_prefill_size`` by ``dp_size`` per rank ("to avoid MoE kernel issues") and scales
# ``schedule_conservativeness`` by 0.3.
SGLANG_DP_ATTENTION_CONSERVATIVENESS = 0.3


def sglang_dp_attention(chunk: int, conservativeness: float | None) -> tuple[int, float]:
    """SGLang's prefill budget and conservativeness with DP attention on: each rank gets
    ``chunk // dp`` tokens, so the ranks together take ``chunk`` (the replica's config holds the
    ranks' totals; ``sglang_ranks.py`` gives each rank its share), and the new-token ratio
    starts at 0.3 of its scale."""
    return chunk, (conservativeness or 1.0) * SGLANG_DP_ATTENTION_CONSERVATIVENESS


def _rehits_own_blocks(options: ServingOptions) -> bool:
    """vLLM v1 with its prefix caching on, recompute preemption and nothing else that reads
    the cache (KV tiers, admission policies): a preempted request hits its own freed blocks
    when it is admitted again (``workload/prefixes.py`` ``with_own_blocks``)."""
    return (
        options.engine == "vllm"
        and options.scheduler == "continuous"
        and options.prefix_caching
        and options.preemption_mode == "recompute"
        and not options.kv_tiers
        and options.admission is None
    )


def simulation_config(plan: MemoryPlan, options: ServingOptions) -> SimulationConfig:
    """The scheduler's limits from the plan, the run's knobs from the options."""
    cfg = plan.config
    host_link = plan.gpu.host_link_bytes_s or 32e9
    layout = pool_layout(plan)  # full and sliding-window layers share the pool
    # Windowed layers at full length: SGLang has no hybrid SWA pool by default; TensorRT-LLM's
    # KV manager gives every layer ``max_seq_len`` unless ``kv_cache_config.max_attention_window``
    # lists the windows (``plan/trtllm_serve.py``).
    # A per-sequence linear state keeps the shared layout (its group would be lost).
    linear_state = any(g.max_blocks == 1 for g in layout.groups)
    if options.engine in ("sglang", "trtllm") and not linear_state:
        layout = full_length_pool(plan) or layout
    dpa = plan.parallelism.attention_dp  # DP-attention ranks schedule side by side
    if options.engine == "sglang" and linear_state:
        # SGLang's admission counts tokens in its pool; a fixed per-sequence state (Mamba,
        # linear attention) lives in a separate pool there, which is not emulated.
        raise InferplanError(
            f"--engine sglang: {plan.spec.name} keeps a per-sequence linear-attention state; "
            "SGLang's separate state pool is not emulated: use --engine vllm"
        )
    budget, conservativeness = cfg.max_num_batched_tokens * dpa, options.schedule_conservativeness
    kind, exact = _replica_scheduler(options), options.exact
    if options.engine == "sglang" and dpa > 1:
        budget, conservativeness = sglang_dp_attention(cfg.max_num_batched_tokens, conservativeness)
        # Each rank schedules on its own (``sglang_ranks.py``), one step at a time.
        kind, exact = ranked_scheduler(dpa), True
    scheduler = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=cfg.max_num_seqs * dpa,
        block_size=cfg.block_size,
        num_blocks=layout.num_blocks,
        preemption_mode=options.preemption_mode,
        scheduler=kind,
        kv_block_bytes=layout.block_bytes,
        host_link_bytes_s=host_link,
        num_scheduler_steps=options.num_scheduler_steps,
        kv_groups=layout.groups,
        enable_prefix_caching=options.prefix_caching,
        kv_tiers=offload_config(plan, options, layout.block_bytes) if options.kv_tiers else None,
        schedule_conservativeness=conservativeness or 1.0,
    )
    return SimulationConfig(
        scheduler=scheduler,
        max_model_len=plan.max_model_len,
        data_parallel_size=options.data_parallel_size,
        router=options.router,
        scheduling_policy=options.scheduling_policy,
        max_concurrency=options.max_concurrency,
        exact=exact,
        admission=options.admission,
        speculative=options.speculative,
    )
