"""The memory plan (capability 2): what each device holds, and the KV capacity that is left.

Budget per device, as vLLM v1 sizes it (``v1/worker/gpu_worker.py`` ``determine_available_memory``):
``KV = total * gpu_memory_utilization - weights - activation peak - non-torch memory``; CUDA
graphs are captured afterwards, in the ``1 - utilization`` headroom. Blocks:
``num_blocks = floor(KV / (block_size * KV bytes per token on this device))``; with pipeline
parallelism the replica has the smallest stage's block count.

Each engine sizes its KV pool by its own rule, chosen by which fraction the config carries:
- vLLM (neither set): ``total * gpu_memory_utilization - weights - activation - non-torch``;
- TensorRT-LLM (``kv_cache_free_gpu_mem_fraction``): that fraction of the memory still free after
  weights, the warm-up's activations and runtime buffers (``KvCacheCreator``, ``_util.py``);
- SGLang (``mem_fraction_static``): weights and KV pool together take that fraction of the
  memory at start, so ``KV = total * fraction - weights - non-torch`` (``model_runner.py``
  ``profile_max_num_token``); activations and CUDA graphs live in the rest.

Two estimates stand in for what vLLM measures at start-up (see ``docs/modeling.md``):
- activation peak of the profiling forward over ``max_num_batched_tokens`` tokens: the residual
  stream and hidden state plus the widest intermediate (QKV, SwiGLU gate/up, or fused-MoE caches
  for top-k copies), in the activation dtype, plus the sampler's fp32 logits and probabilities
  for ``max_num_seqs`` rows over the full vocabulary;
- non-torch memory: 0.5 GiB of CUDA context and library workspaces per device, plus 0.5 GiB of
  communication buffers (NCCL, custom all-reduce) when the replica spans several devices.

Under TensorRT-LLM's rule a routed-expert layer's part of that peak is its fused-MoE kernel's
workspace for the rows its warm-up runs (``trtllm_moe_workspace_bytes``): ``KvCacheCreator``'s
dummy requests fill ``max_num_tokens`` on every attention-DP rank, and the MoE layer runs on
all ranks' tokens gathered, ``max_num_tokens x dp_size`` rows (``moe_max_num_tokens``' default,
no chunking), so an attention-DP replica's warm-up peak, and the memory its KV pool loses,
grows with the ranks.

A DeepSeek sparse-attention layer (``specs/sparse.py``) also caches its lightning indexer's
FP8 key and scale for every token the pool holds, in the KV dtype's stead: SGLang counts them in
its cell size (``model_runner.py`` ``profile_max_num_token``, ``NSATokenToKVPool``), vLLM as one
more cache spec per layer (``DeepseekV32IndexerCache``), so a token's bytes are the latent's
plus the index key's, and the pool holds correspondingly fewer tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inferplan.errors import InferplanError
from inferplan.memory.weights import DeviceWeights, WeightFormats, stage_weights
from inferplan.specs.dtypes import NumberFormat, kv_format, weight_format
from inferplan.specs.hardware import GIB, GpuSpec
from inferplan.specs.kv import kv_bytes_per_token, kv_values_per_token, sequence_kv_bytes
from inferplan.specs.model import AttentionSpec, LayerGroup, ModelSpec
from inferplan.specs.parallel import Parallelism, stage_layer_counts
from inferplan.specs.params import ParamCounts, count_params, ffn_matrices
from inferplan.specs.topology import Topology, check_layout, topology_for

RUNTIME_RESERVE_BYTES = 0.5 * GIB
COMM_RESERVE_BYTES = 0.5 * GIB
SAMPLER_FP32_COPIES = 2
REPORT_CONTEXTS = (1024, 4096, 8192, 32768, 131072)


@dataclass(frozen=True)
class MemoryConfig:
    """The user's knobs, with vLLM's names; None = the engine's or the model's default."""

    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    block_size: int = 16
    kv_cache_free_gpu_mem_fraction: float | None = None  # TensorRT-LLM's rule when set
    mem_fraction_static: float | None = None  # SGLang's rule when set
    # (hidden, intermediate per rank) multiples the engine's MoE kernel pads routed experts to
    # (vLLM's MXFP4 Marlin kernel, ``specs/engines.py`` ``vllm_expert_padding``); None: none.
    expert_padding: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for flag, fraction in (
            ("--gpu-memory-utilization", self.gpu_memory_utilization),
            ("--kv-cache-free-gpu-mem-fraction", self.kv_cache_free_gpu_mem_fraction),
            ("--mem-fraction-static", self.mem_fraction_static),
        ):
            if fraction is not None and not 0 < fraction <= 1:
                raise InferplanError(f"{flag}: must be in (0, 1], got {fraction}")
        if self.kv_cache_free_gpu_mem_fraction is not None and self.mem_fraction_static:
            raise InferplanError(
                "--kv-cache-free-gpu-mem-fraction (TensorRT-LLM) and --mem-fraction-static "
                "(SGLang) are two engines' rules: give one"
            )
        for flag, value in (
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--max-num-seqs", self.max_num_seqs),
            ("--block-size", self.block_size),
            ("--max-model-len", self.max_model_len),
        ):
            if value is not None and value < 1:
                raise InferplanError(f"{flag}: must be an integer >= 1, got {value}")


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage's device."""

    weights: DeviceWeights
    activation_bytes: float
    reserve_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float  # one token, every layer of this stage, on one device
    num_blocks: int
    layers: tuple[tuple[AttentionSpec, int], ...]  # attention shapes of this stage, counted

    @property
    def paged_kv_bytes(self) -> float:
        """The pool's bytes for the paged KV values: ``kv_bytes`` less the indexer keys that
        every held token carries beside them (all of it without an indexer)."""
        index = index_key_bytes_per_token(self.layers)
        if not index:
            return self.kv_bytes
        return self.kv_bytes * (1.0 - index / self.kv_bytes_per_token)


@dataclass(frozen=True)
class MemoryPlan:
    spec: ModelSpec
    gpu: GpuSpec
    parallelism: Parallelism
    config: MemoryConfig
    params: ParamCounts
    weight_formats: WeightFormats
    kv_format: NumberFormat
    max_model_len: int
    budget_bytes: float  # per device: what the engine claims (vLLM: total x utilisation)
    stages: tuple[StagePlan, ...]
    kv_bytes_per_token: float  # whole model, one sequence, chosen KV dtype
    num_blocks: int  # per replica
    max_concurrent_seqs: dict[int, int]
    topology: Topology  # nodes, scale-up domains and the links the parallel groups use

    @property
    def worst_stage(self) -> StagePlan:
        """The stage with the fewest KV blocks (it bounds the replica)."""
        return min(self.stages, key=lambda s: s.num_blocks)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.config.block_size

    @property
    def fits(self) -> bool:
        return all(s.kv_bytes > 0 for s in self.stages) and (
            self.max_concurrent_seqs.get(self.max_model_len, 0) >= 1
        )


def index_key_bytes_per_token(layers: tuple[tuple[AttentionSpec, int], ...]) -> float:
    """The lightning indexers' cached key bytes one token adds over ``layers`` (attention,
    count) pairs; the key is one head, so every tensor-parallel rank keeps all of it."""
    return sum(att.indexer.key_bytes_per_token * n for att, n in layers if att.indexer is not None)


def weight_formats_for(spec: ModelSpec, quantization: str | None) -> WeightFormats:
    """Formats per weight class: ``--quantization`` wins, else the checkpoint's own config."""
    base = weight_format(spec.dtype)
    if quantization is not None:
        fmt = weight_format(quantization)
        return WeightFormats(linear=fmt, experts=fmt, other=base)
    if spec.quantization is None:
        return WeightFormats(base, base, base)
    fmt = weight_format(spec.quantization.method)
    linear = fmt if spec.quantization.scope == "linear" else base
    return WeightFormats(linear=linear, experts=fmt, other=base)


def trtllm_moe_workspace_bytes(spec: ModelSpec, par: Parallelism, cfg: MemoryConfig) -> float:
    """The largest routed-expert layer's buffers in TensorRT-LLM's warm-up forward: its fused
    MoE (``cpp/tensorrt_llm/kernels/mixtureOfExperts/moe_kernels.cu``
    ``getWorkspaceDeviceBufferSizes``) on ``rows = max_num_tokens x attention_dp`` tokens (the
    gathered tokens of every attention-DP rank; ``fused_moe`` ``moe_max_num_tokens``), each
    copied to its ``k`` experts: the permuted input and the FC2 output share one buffer (BF16
    ``H``), the gated FC1 output (BF16 ``2 I``) and the activation (``I``, at most 2 bytes)
    another's worth, so ``k rows (2 H + 6 I)`` bytes; beside them the gathered input, the
    combined output and its reduce-scatter copy, ``3 rows H`` at 2 bytes at most (``I``: one
    expert's width on its rank, the whole width under expert parallelism). 0 without experts.
    Every run under TensorRT-LLM's KV rule takes it, the 0.17 C++ runs (Mixtral) too, as
    cross-validated (``hopdep17``); that release's own warm-up is not read."""
    rows = cfg.max_num_batched_tokens * par.attention_dp
    hidden = spec.hidden_size
    peak = 0.0
    for group in spec.layer_groups:
        ffn = group.ffn
        if ffn.kind != "moe" or ffn.num_experts_per_tok < 1:
            continue
        inter = ffn.intermediate_size / (1 if par.enable_expert_parallel else par.tp)
        per_copy = 2 * hidden + 6 * inter
        peak = max(peak, rows * (ffn.num_experts_per_tok * per_copy + 3 * 2 * hidden))
    return peak


def activation_peak_bytes(spec: ModelSpec, par: Parallelism, cfg: MemoryConfig) -> float:
    """Estimated peak of the profiling forward pass plus the sampler (see module docstring).
    Under TensorRT-LLM's rule (``kv_cache_free_gpu_mem_fraction`` set) a routed-expert layer's
    part is its fused-MoE workspace on the gathered tokens (``trtllm_moe_workspace_bytes``)."""
    tokens = cfg.max_num_batched_tokens
    hidden = spec.hidden_size
    trtllm = cfg.kv_cache_free_gpu_mem_fraction is not None
    widest = 0
    for group in spec.layer_groups:
        att, ffn = group.attention, group.ffn
        qkv = (att.num_heads * att.head_dim + 2 * max(att.num_kv_heads, 1) * att.head_dim) / par.tp
        if ffn.kind == "dense":
            mlp = ffn_matrices(ffn) * ffn.intermediate_size / par.tp
        elif trtllm:
            mlp = 0.0  # the fused MoE's workspace, below
        else:  # MoE, or no FFN (no experts per token: 0)
            per_copy = (
                ffn_matrices(ffn)
                * ffn.intermediate_size
                / (par.ep if par.enable_expert_parallel else par.tp)
            )
            mlp = ffn.num_experts_per_tok * (per_copy + hidden)
        widest = max(widest, int(qkv), int(mlp))
    act_bytes = 2.0
    forward = tokens * act_bytes * (2 * hidden + widest)
    if trtllm:
        stream = tokens * act_bytes * 2 * hidden
        forward = max(forward, stream + trtllm_moe_workspace_bytes(spec, par, cfg))
    sampler = SAMPLER_FP32_COPIES * 4.0 * min(cfg.max_num_seqs, tokens) * spec.vocab_size
    return forward + sampler


def kv_pool_bytes(
    total_bytes: float, cfg: MemoryConfig, weights: float, activation: float, reserve: float
) -> float:
    """One device's KV pool by its engine's rule (module docstring)."""
    if cfg.kv_cache_free_gpu_mem_fraction is not None:
        free = total_bytes - weights - activation - reserve
        return cfg.kv_cache_free_gpu_mem_fraction * free
    if cfg.mem_fraction_static is not None:
        return total_bytes * cfg.mem_fraction_static - weights - reserve
    return total_bytes * cfg.gpu_memory_utilization - weights - activation - reserve


def _stage_plans(
    spec: ModelSpec,
    gpu: GpuSpec,
    par: Parallelism,
    cfg: MemoryConfig,
    fmt: WeightFormats,
    kv: NumberFormat,
) -> tuple[StagePlan, ...]:
    reserve = RUNTIME_RESERVE_BYTES + (COMM_RESERVE_BYTES if par.devices_per_replica > 1 else 0)
    activation = activation_peak_bytes(spec, par, cfg)
    plans = []
    start = 0
    counts = stage_layer_counts(spec.num_layers, par.pp)
    for i, count in enumerate(counts):
        layers: tuple[LayerGroup, ...] = spec.layers[start : start + count]
        start += count
        weights = stage_weights(
            spec,
            par,
            fmt,
            layers,
            is_first=i == 0,
            is_last=i == par.pp - 1,
            expert_padding=cfg.expert_padding,
        )
        kv_bytes = kv_pool_bytes(gpu.memory_bytes, cfg, weights.total_bytes, activation, reserve)
        per_token = sum(
            kv_values_per_token(g.attention, par.tp) for g in layers
        ) * kv.bytes_per_value + index_key_bytes_per_token(tuple((g.attention, 1) for g in layers))
        block_bytes = per_token * cfg.block_size
        num_blocks = int(max(kv_bytes, 0) // block_bytes) if block_bytes else 0
        grouped: dict[AttentionSpec, int] = {}
        for g in layers:
            grouped[g.attention] = grouped.get(g.attention, 0) + 1
        plans.append(
            StagePlan(
                weights,
                activation,
                reserve,
                kv_bytes,
                per_token,
                num_blocks,
                tuple(grouped.items()),
            )
        )
    return tuple(plans)


def sequence_bytes(
    stage: StagePlan,
    context: int,
    spec: ModelSpec,
    par: Parallelism,
    cfg: MemoryConfig,
    kv: NumberFormat,
) -> float:
    """KV bytes one sequence of ``context`` tokens holds on one device of ``stage``, in whole
    blocks, its indexer keys included. Under SGLang's rule (``mem_fraction_static`` set) and
    TensorRT-LLM's (``kv_cache_free_gpu_mem_fraction`` set) a windowed layer keeps every token,
    as SGLang's one token-to-KV pool and TensorRT-LLM's KV manager without
    ``max_attention_window`` do (``memory/sglang_pool.py``, the pool the simulator runs for
    both, ``engine/session.py``)."""
    layers = stage.layers
    if cfg.mem_fraction_static is not None or cfg.kv_cache_free_gpu_mem_fraction is not None:
        layers = tuple((replace(att, window_tokens=None), n) for att, n in layers)
    per_seq = sequence_kv_bytes(
        layers,
        context,
        kv,
        weight_format(spec.dtype).bytes_per_value,
        tp=par.tp,
        block_tokens=cfg.block_size,
    )
    return per_seq + index_key_bytes_per_token(layers) * _whole_block_tokens(context, cfg)


def _max_concurrency(
    stages: tuple[StagePlan, ...],
    spec: ModelSpec,
    par: Parallelism,
    cfg: MemoryConfig,
    kv: NumberFormat,
    contexts: list[int],
) -> dict[int, int]:
    out = {}
    for context in contexts:
        seqs = []
        for stage in stages:
            per_seq = sequence_bytes(stage, context, spec, par, cfg, kv)
            seqs.append(int(max(stage.kv_bytes, 0) // per_seq) if per_seq else cfg.max_num_seqs)
        out[context] = min(seqs)
    return out


def _whole_block_tokens(tokens: int, cfg: MemoryConfig) -> int:
    return -(-tokens // cfg.block_size) * cfg.block_size


def _budget_bytes(gpu: GpuSpec, cfg: MemoryConfig, stages: tuple[StagePlan, ...]) -> float:
    if cfg.mem_fraction_static is not None:
        return gpu.memory_bytes * cfg.mem_fraction_static
    if cfg.kv_cache_free_gpu_mem_fraction is not None:
        return max(
            s.weights.total_bytes + s.activation_bytes + s.reserve_bytes + max(s.kv_bytes, 0.0)
            for s in stages
        )
    return gpu.memory_bytes * cfg.gpu_memory_utilization


def plan_memory(
    spec: ModelSpec,
    gpu: GpuSpec,
    par: Parallelism,
    cfg: MemoryConfig,
    topology: Topology | None = None,
) -> MemoryPlan:
    """The memory plan of one replica of ``spec`` on ``gpu`` split as ``par``; ``topology``
    defaults to the catalog's nodes and links for ``gpu``."""
    check_sharding(spec, par)
    topology = topology or topology_for(gpu)
    check_layout(topology, par)
    fmt = weight_formats_for(spec, cfg.quantization)
    kv = kv_format(cfg.kv_cache_dtype, model_dtype=spec.dtype)
    max_model_len = cfg.max_model_len or spec.max_position_embeddings
    stages = _stage_plans(spec, gpu, par, cfg, fmt, kv)
    contexts = sorted({c for c in REPORT_CONTEXTS if c <= max_model_len} | {max_model_len})
    return MemoryPlan(
        spec=spec,
        gpu=gpu,
        parallelism=par,
        config=cfg,
        params=count_params(spec),
        weight_formats=fmt,
        kv_format=kv,
        max_model_len=max_model_len,
        budget_bytes=_budget_bytes(gpu, cfg, stages),
        stages=stages,
        kv_bytes_per_token=kv_bytes_per_token(spec, kv)
        + index_key_bytes_per_token(tuple((g.attention, g.num_layers) for g in spec.layer_groups)),
        # DP attention: each data-parallel rank keeps the KV of its own sequences.
        num_blocks=min(s.num_blocks for s in stages) * par.attention_dp,
        max_concurrent_seqs={
            context: seqs * par.attention_dp
            for context, seqs in _max_concurrency(stages, spec, par, cfg, kv, contexts).items()
        },
        topology=topology,
    )


def check_sharding(spec: ModelSpec, par: Parallelism) -> None:
    """vLLM's divisibility rules for tensor and expert parallelism."""
    tp = par.tp
    for group in spec.layer_groups:
        att, ffn = group.attention, group.ffn
        heads = att.linear_num_value_heads if att.kind == "linear" else att.num_heads
        if heads % tp:
            raise InferplanError(
                f"-tp {tp}: does not divide the {heads} attention heads of {spec.name}; "
                f"valid: {_divisors(heads)}"
            )
        if att.kind == "gqa" and tp <= att.num_kv_heads and att.num_kv_heads % tp:
            raise InferplanError(
                f"-tp {tp}: does not divide the {att.num_kv_heads} KV heads of {spec.name}"
            )
        if att.kind == "gqa" and tp > att.num_kv_heads and tp % att.num_kv_heads:
            raise InferplanError(
                f"-tp {tp}: must be a multiple of the {att.num_kv_heads} KV heads when larger"
            )
        if ffn.kind == "dense" and ffn.intermediate_size % tp:
            raise InferplanError(
                f"-tp {tp}: does not divide the MLP width {ffn.intermediate_size} of {spec.name}"
            )
    if par.enable_expert_parallel and not spec.is_moe:
        raise InferplanError(f"--enable-expert-parallel: {spec.name} has no experts")
    moe = next((g.ffn for g in spec.layer_groups if g.ffn.kind == "moe"), None)
    experts, redundant = (moe.num_experts if moe else 0), par.num_redundant_experts
    if redundant and (experts + redundant) % par.ep:
        raise InferplanError(
            f"--num-redundant-experts {redundant}: {experts} experts + redundant copies must "
            f"fill the {par.ep} expert-parallel ranks evenly (a multiple of {par.ep})"
        )


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and d <= 64)
