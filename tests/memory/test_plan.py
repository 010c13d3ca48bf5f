"""The memory plan: sharding, the per-device budget, pipeline stages, fit boundary, quantization.

Expected values are rebuilt here from config fields and vLLM's rules (shared/notes/engines.md
1.5): budget = memory x utilisation; KV = budget - weights - activation peak - reserve;
num_blocks = floor(KV / (block_size x KV bytes per token on the device)).
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.errors import InferplanError
from inferplan.memory.blockpool import pool_layout
from inferplan.memory.plan import MemoryConfig, MemoryPlan, plan_memory, weight_formats_for
from inferplan.memory.weights import attention_rank_params, ffn_rank_bytes, stage_weights
from inferplan.specs.catalog import load_model
from inferplan.specs.hardware import GIB, load_gpu
from inferplan.specs.model import parse_config
from inferplan.specs.parallel import Parallelism, stage_layer_counts
from inferplan.specs.topology import topology_for

FP8 = 1 + 4 / (128 * 128)  # e4m3 plus one fp32 scale per 128x128 block
INT4 = 0.5 + 4 / 128  # AWQ/GPTQ: fp16 scale + fp16 zero per 128 values
MXFP4 = 0.5 + 1 / 32  # e2m1 plus one e8m0 scale per 32 values

# Llama-3.1-70B config fields.
H70, L70, NH70, NKV70, HD70, I70, V70 = 8192, 80, 64, 8, 128, 28672, 128_256


def plan(
    model: str,
    gpu: str = "h100",
    *,
    tp: int = 1,
    pp: int = 1,
    ep: bool = False,
    **cfg: object,
) -> MemoryPlan:
    par = Parallelism(tp=tp, pp=pp, enable_expert_parallel=ep)
    device = load_gpu(gpu)
    topology = topology_for(device, allow_cross_node_tp=True)  # these test sharding arithmetic
    return plan_memory(load_model(model), device, par, MemoryConfig(**cfg), topology)  # type: ignore[arg-type]


def llama70_weights_bytes(tp: int) -> int:
    """bf16 weights on one rank of Llama-3.1-70B under tensor parallelism ``tp``."""
    kv_heads = max(1, NKV70 // tp)  # K/V heads split, one per rank (replicated) past 8
    split = 2 * H70 * NH70 * HD70 + 3 * H70 * I70  # q, o and gate/up/down: column/row-parallel
    per_layer = split // tp + 2 * H70 * kv_heads * HD70 + 2 * H70  # + replicated norms
    table = V70 // tp * H70  # 128256 is already a multiple of 64: no padding
    return 2 * (L70 * per_layer + H70 + 2 * table)  # + final norm, embedding, head


# --- sharding -----------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_llama70_weights_per_device_by_hand(tp: int) -> None:
    assert plan("Llama-3.1-70B", tp=tp).stages[0].weights.total_bytes == llama70_weights_bytes(tp)


def test_tp_roughly_halves_weights() -> None:
    w1, w2, w8 = (plan("Llama-3.1-70B", tp=tp).stages[0].weights.total_bytes for tp in (1, 2, 8))
    assert w1 == 2 * 70_553_706_496  # every parameter once, in bf16
    assert 0.5 < w2 / w1 < 0.5001  # only norms are replicated
    assert 1 / 8 < w8 / w1 < 1 / 8 * 1.001


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    att = load_model("Llama-3.1-70B").layers[0].attention
    q_and_o = H70 * NH70 * HD70 + NH70 * HD70 * H70
    assert attention_rank_params(att, H70, 8) == (q_and_o // 8 + 2 * H70 * 1 * HD70, 0)
    assert attention_rank_params(att, H70, 16) == (q_and_o // 16 + 2 * H70 * 1 * HD70, 0)
    per_token_8 = plan("Llama-3.1-70B", tp=8).stages[0].kv_bytes_per_token
    per_token_16 = plan("Llama-3.1-70B", tp=16).stages[0].kv_bytes_per_token
    assert per_token_8 == per_token_16 == 2 * 1 * HD70 * L70 * 2


def test_embedding_is_vocab_parallel_with_padding_to_64() -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 32_001,
    }
    spec = parse_config(cfg, name="tiny", source="tiny.json")
    formats = weight_formats_for(spec, None)
    padded = 32_064  # ceil(32001 / 64) * 64
    for tp in (1, 2, 4):
        weights = stage_weights(
            spec, Parallelism(tp=tp), formats, spec.layers, is_first=True, is_last=True
        )
        assert weights.by_component_bytes["embedding"] == padded // tp * 256 * 2
        assert weights.by_component_bytes["lm_head"] == padded // tp * 256 * 2


def test_mla_down_projections_are_replicated() -> None:
    att = load_model("DeepSeek-V3").layers[0].attention
    h, nh, q_lora, kv_lora, nope, rope, v = 7168, 128, 1536, 512, 128, 64, 128
    replicated = h * q_lora + h * (kv_lora + rope)  # q_a_proj, kv_a_proj_with_mqa
    split = q_lora * nh * (nope + rope) + kv_lora * nh * (nope + v) + nh * v * h  # q_b, kv_b, o
    norms = q_lora + kv_lora  # q_a / kv_a layernorms
    for tp in (1, 8, 16):
        assert attention_rank_params(att, h, tp) == (replicated + split // tp, norms)


def test_experts_spread_whole_over_ep_ranks() -> None:
    spec = load_model("Mixtral-8x7B-v0.1")
    ffn, h, inter = spec.layers[0].ffn, 4096, 14336
    formats = weight_formats_for(spec, None)
    router = h * 8 * 2
    # tp=16 without EP: each of the 8 experts sharded 16 ways = half an expert per rank.
    tp_only = ffn_rank_bytes(ffn, h, Parallelism(tp=16), formats)
    assert tp_only == 8 * 3 * h * inter // 16 * 2 + router
    # with EP over 16 ranks: whole experts, ceil(8 / 16) = 1 per rank.
    with_ep = ffn_rank_bytes(ffn, h, Parallelism(tp=16, enable_expert_parallel=True), formats)
    assert with_ep == 1 * 3 * h * inter * 2 + router
    # ep = tp x dp: Qwen3-30B-A3B's 128 experts over 2 x 4 ranks = 16 whole experts each.
    qwen = load_model("Qwen3-30B-A3B")
    par = Parallelism(tp=2, dp=4, enable_expert_parallel=True)
    assert par.ep == 8
    moe = qwen.layers[0].ffn
    expected = 16 * 3 * 2048 * 768 * 2 + 2048 * 128 * 2
    assert ffn_rank_bytes(moe, 2048, par, weight_formats_for(qwen, None)) == expected


def test_ep_plan_puts_one_expert_per_rank() -> None:
    ffn_bytes = plan("Mixtral-8x7B-v0.1", tp=16, ep=True).stages[0].weights.by_component_bytes
    assert ffn_bytes["ffn"] == 32 * (3 * 4096 * 14336 * 2 + 4096 * 8 * 2)


def test_sharding_errors() -> None:
    with pytest.raises(InferplanError, match="-tp 3: does not divide the 64 attention heads"):
        plan("Llama-3.1-70B", tp=3)
    with pytest.raises(InferplanError, match=r"--enable-expert-parallel: .* has no experts"):
        plan("Llama-3.1-8B", ep=True)
    with pytest.raises(InferplanError, match="--tensor-parallel-size: must be an integer >= 1"):
        Parallelism(tp=0)
    with pytest.raises(InferplanError, match="at most 80"):
        plan("Llama-3.1-70B", pp=81)


@pytest.mark.parametrize(
    ("shape", "tp", "message"),
    [
        pytest.param(  # TP larger than the KV heads must be a multiple of them
            {
                "hidden_size": 1536,
                "num_attention_heads": 12,
                "num_key_value_heads": 4,
                "intermediate_size": 6144,
            },
            6,
            "-tp 6: must be a multiple of the 4 KV heads",
            id="larger_than_kv_heads_must_be_a_multiple",
        ),
        pytest.param(  # TP smaller than the KV heads must divide them
            {
                "hidden_size": 5120,
                "num_attention_heads": 40,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "intermediate_size": 10240,
            },
            5,
            "-tp 5",
            id="smaller_than_kv_heads_must_divide_them",
        ),
    ],
)
def test_tp_against_the_kv_heads(shape: dict[str, int], tp: int, message: str) -> None:
    spec = parse_config(
        {**shape, "num_hidden_layers": 2, "vocab_size": 1000}, name="t", source="t.json"
    )
    with pytest.raises(InferplanError, match=message):
        plan_memory(spec, load_gpu("h100"), Parallelism(tp=tp), MemoryConfig())


# --- the budget, by hand ------------------------------------------------------------------


def test_llama8b_on_h100_budget_by_hand() -> None:
    h, inter, vocab, params = 4096, 14336, 128_256, 8_030_261_248
    p = plan("Llama-3.1-8B", "h100")
    stage = p.stages[0]
    budget = 0.9 * (81559 * 2**20 - 0.5 * GIB)  # vLLM: utilization x total_gpu_memory (79.15 GiB)
    weights = params * 2  # bf16, tp=1, vocab already a multiple of 64
    # Activation estimate: 8192 tokens x bf16 x (residual + hidden + widest intermediate,
    # here SwiGLU's 3 x 14336), plus 2 fp32 sampler copies of 1024 rows x vocab.
    activation = 8192 * 2 * (2 * h + 3 * inter) + 2 * 4 * 1024 * vocab
    reserve = 0.5 * GIB  # CUDA context + workspaces; no comm buffers on one device
    kv = budget - weights - activation - reserve
    assert p.budget_bytes == pytest.approx(budget, rel=1e-15)
    assert stage.weights.total_bytes == weights == 16_060_522_496
    assert stage.activation_bytes == activation == 1_889_533_952
    assert stage.reserve_bytes == reserve
    assert stage.kv_bytes == pytest.approx(kv, rel=1e-12)
    block_bytes = 16 * 131_072
    assert p.num_blocks == math.floor(kv / block_bytes) == 27_655
    assert p.kv_capacity_tokens == 27_655 * 16
    # One 131072-token sequence needs 8192 blocks: 27655 // 8192 = 3 fit at once.
    assert p.max_concurrent_seqs[131_072] == 27_655 // 8192 == 3
    assert p.max_concurrent_seqs[1024] == 27_655 // 64
    assert p.fits


def test_comm_reserve_only_when_the_replica_spans_devices() -> None:
    assert plan("Llama-3.1-8B", tp=1).stages[0].reserve_bytes == 0.5 * GIB
    assert plan("Llama-3.1-8B", tp=2).stages[0].reserve_bytes == 1.0 * GIB
    assert plan("Llama-3.1-8B", pp=2).stages[0].reserve_bytes == 1.0 * GIB


# --- pipeline parallelism -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (80, 1, [80]),
        (80, 4, [20, 20, 20, 20]),
        (80, 3, [27, 27, 26]),  # remainder 2 -> the two stages before the last
        (61, 4, [15, 15, 16, 15]),  # remainder 1 -> the stage just before the last
        (62, 4, [15, 16, 16, 15]),
        (32, 32, [1] * 32),
    ],
)
def test_stage_layer_counts_follow_vllm_get_pp_indices(
    layers: int, pp: int, expected: list[int]
) -> None:
    assert stage_layer_counts(layers, pp) == expected
    assert sum(expected) == layers


def test_pipeline_stages_hold_their_layers() -> None:
    p = plan("Llama-3.1-70B", "h200", pp=3, max_model_len=8192)
    layer_bytes = 2 * (2 * H70 * NH70 * HD70 + 2 * H70 * NKV70 * HD70 + 3 * H70 * I70 + 2 * H70)
    table = 2 * V70 * H70
    expected = [27 * layer_bytes + table, 27 * layer_bytes, 26 * layer_bytes + table + 2 * H70]
    assert [s.weights.total_bytes for s in p.stages] == expected
    assert p.stages[0].weights.by_component_bytes["lm_head"] == 0
    assert p.stages[2].weights.by_component_bytes["embedding"] == 0
    per_layer_kv = 2 * NKV70 * HD70 * 2
    assert [s.kv_bytes_per_token for s in p.stages] == [27 * per_layer_kv] * 2 + [26 * per_layer_kv]
    assert p.num_blocks == min(s.num_blocks for s in p.stages)
    assert p.kv_bytes_per_token == L70 * per_layer_kv  # the whole model, for one sequence


def test_tied_head_is_the_embedding_on_one_stage_and_a_copy_on_the_last() -> None:
    one = plan("gemma-3-27b-it", pp=1).stages[0].weights.by_component_bytes
    assert one["lm_head"] == 0 and one["embedding"] > 0
    two = plan("gemma-3-27b-it", pp=2).stages
    assert two[1].weights.by_component_bytes["lm_head"] == one["embedding"]
    assert two[0].weights.by_component_bytes["vision_encoder"] > 0
    assert "vision_encoder" not in two[1].weights.by_component_bytes


# --- fit boundary and capacity ------------------------------------------------------------


def test_llama70_fp8_on_one_h200_fit_boundary() -> None:
    # fp8 linear weights, bf16 embedding/head/norms.
    linear = L70 * (2 * H70 * NH70 * HD70 + 2 * H70 * NKV70 * HD70 + 3 * H70 * I70)
    other = 2 * V70 * H70 + L70 * 2 * H70 + H70
    weights = linear * FP8 + other * 2
    activation = 8192 * 2 * (2 * H70 + 3 * I70) + 2 * 4 * 1024 * V70
    reserve = 0.5 * GIB
    one_sequence = 131_072 * 2 * NKV70 * HD70 * L70 * 2  # bf16 KV at max_model_len, 8192 blocks
    threshold = (weights + activation + reserve + one_sequence) / (143771 * 2**20 - 0.5 * GIB)
    assert 0.75 < threshold < 0.85
    at = plan("Llama-3.1-70B", "h200", quantization="fp8", gpu_memory_utilization=threshold)
    assert at.stages[0].weights.total_bytes == weights
    above = plan(
        "Llama-3.1-70B", "h200", quantization="fp8", gpu_memory_utilization=threshold + 1e-6
    )
    below = plan(
        "Llama-3.1-70B", "h200", quantization="fp8", gpu_memory_utilization=threshold - 1e-6
    )
    assert above.fits and above.max_concurrent_seqs[131_072] == 1
    assert not below.fits and below.max_concurrent_seqs[131_072] == 0
    assert below.stages[0].kv_bytes > 0  # weights fit; one max-length sequence does not


def test_weights_that_do_not_fit() -> None:
    p = plan("Llama-3.1-70B", "h100")
    assert p.stages[0].kv_bytes < 0
    assert p.num_blocks == 0
    assert not p.fits


@pytest.mark.parametrize(
    "model", ["Llama-3.1-8B", "gemma-3-27b-it", "gpt-oss-120b", "Qwen3-Next-80B-A3B-Thinking"]
)
def test_max_concurrency_decreases_with_context(model: str) -> None:
    p = plan(model, "h200", tp=2 if model != "gpt-oss-120b" else 1)
    contexts = sorted(p.max_concurrent_seqs)
    assert contexts[-1] == p.max_model_len
    counts = [p.max_concurrent_seqs[c] for c in contexts]
    assert counts == sorted(counts, reverse=True)
    assert counts[0] > counts[-1]


def test_report_contexts_stop_at_max_model_len() -> None:
    p = plan("Llama-3.1-8B", max_model_len=5000)
    assert list(p.max_concurrent_seqs) == [1024, 4096, 5000]


def test_fp8_kv_doubles_capacity() -> None:
    bf16 = plan("Llama-3.1-8B", kv_cache_dtype="bf16")
    fp8 = plan("Llama-3.1-8B", kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert 2 * bf16.num_blocks <= fp8.num_blocks <= 2 * bf16.num_blocks + 1
    for context, seqs in bf16.max_concurrent_seqs.items():
        assert 2 * seqs <= fp8.max_concurrent_seqs[context] <= 2 * seqs + 1


def test_qwen3_next_linear_state_counts_against_concurrency() -> None:
    p = plan("Qwen3-Next-80B-A3B-Thinking", "h200", tp=4)
    stage = p.stages[0]
    state = (2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128  # per linear layer, whole model
    per_seq = 36 * state // 4 * 2 + 1024 * 12 * 2 * 1 * 256 * 2  # tp=4: 2 KV heads -> 1 / rank
    assert stage.kv_bytes_per_token == 12 * 2 * 1 * 256 * 2
    assert p.max_concurrent_seqs[1024] == int(stage.kv_bytes // per_seq)


# --- checkpoint quantization --------------------------------------------------------------


def deepseek_components() -> dict[str, int]:
    h, n_layers, n_dense, nh, q_lora, kv_lora, nope, rope, v = (
        7168, 61, 3, 128, 1536, 512, 128, 64, 128,
    )  # fmt: skip
    inter, moe_inter, n_exp, vocab = 18432, 2048, 256, 129_280
    mla = (
        h * q_lora
        + q_lora * nh * (nope + rope)
        + h * (kv_lora + rope)
        + kv_lora * nh * (nope + v)
        + nh * v * h
    )
    n_moe = n_layers - n_dense
    return {
        "linear": n_layers * mla
        + n_dense * 3 * h * inter
        + n_moe * (n_exp + 1) * 3 * h * moe_inter,  # routed + 1 shared expert
        "other": 2 * vocab * h  # embedding and head
        + n_moe * (h * n_exp + n_exp)  # router + e_score_correction_bias
        + n_layers * (2 * h + q_lora + kv_lora)  # norms incl. MLA's q_a / kv_a layernorms
        + h,
    }


def test_deepseek_r1_default_fp8_weights() -> None:
    parts = deepseek_components()
    assert parts["linear"] + parts["other"] == 671_026_419_200
    p = plan("DeepSeek-R1", "b200")  # one device: does not fit, but the bytes are defined
    assert p.weight_formats.linear.name == "fp8"
    assert p.weight_formats.other.name == "bf16"
    weights = p.stages[0].weights.total_bytes
    assert weights == pytest.approx(parts["linear"] * FP8 + parts["other"] * 2, rel=1e-12)
    assert 671e9 < weights < 675e9  # ~1 byte per parameter + bf16 embedding and head


def test_quantization_flag_overrides_the_checkpoint() -> None:
    p = plan("DeepSeek-R1", "b200", quantization="bf16")
    assert p.stages[0].weights.total_bytes == 2 * 671_026_419_200
    gpt = plan("gpt-oss-120b", "b200", quantization="bf16")
    assert gpt.weight_formats.experts.name == "bf16"
    assert gpt.stages[0].weights.total_bytes == 2 * 116_829_156_672


def test_int4_weights_on_llama8b() -> None:
    embedding, norms, params = 128_256 * 4096, 2 * 4096 * 32 + 4096, 8_030_261_248
    linear = params - 2 * embedding - norms
    p = plan("Llama-3.1-8B", quantization="int4")
    assert p.stages[0].weights.total_bytes == linear * INT4 + (2 * embedding + norms) * 2


def test_gpt_oss_default_mxfp4_experts_only() -> None:
    h, n_layers, nh, nkv, hd, inter, n_exp, vocab = 2880, 36, 64, 8, 64, 2880, 128, 201_088
    attention_linear = h * nh * hd + 2 * h * nkv * hd + nh * hd * h
    attention_other = nh * hd + 2 * nkv * hd + h + nh  # q/k/v biases, o bias, sinks
    expert_weights = n_exp * 3 * h * inter
    expert_biases = n_exp * (2 * inter + h)
    router = h * n_exp + n_exp
    bf16_per_layer = attention_linear + attention_other + expert_biases + router + 2 * h
    per_layer = bf16_per_layer * 2 + expert_weights * MXFP4
    expected = n_layers * per_layer + (2 * vocab * h + h) * 2
    assert plan("gpt-oss-120b", "h200").stages[0].weights.total_bytes == expected


# --- invariants ---------------------------------------------------------------------------

# Models whose every divisor of the attention-head count is a valid tp (dense MLP widths and
# KV-head counts divide accordingly); they cover GQA, MLA, sliding, linear attention and MoE.
PROPERTY_MODELS = [
    "Llama-3.1-8B",
    "Qwen3-32B",
    "Mixtral-8x7B-v0.1",
    "gpt-oss-20b",
    "gemma-3-27b-it",
    "Qwen3-Next-80B-A3B-Thinking",
    "DeepSeek-V3",
]


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    model=st.sampled_from(PROPERTY_MODELS),
    pp=st.sampled_from([1, 2, 3, 4]),
    utilisation=st.floats(min_value=0.05, max_value=1.0),
    kv_dtype=st.sampled_from(["auto", "fp8", "int8"]),
    block_size=st.sampled_from([1, 16, 32]),
)
def test_budget_adds_up_and_blocks_fit(
    data: st.DataObject,
    model: str,
    pp: int,
    utilisation: float,
    kv_dtype: str,
    block_size: int,
) -> None:
    heads = load_model(model).layers[0].attention.num_heads
    tp = data.draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]), "tp")
    p = plan(
        model,
        "h200",
        tp=tp,
        pp=pp,
        gpu_memory_utilization=utilisation,
        kv_cache_dtype=kv_dtype,
        block_size=block_size,
    )
    assert p.budget_bytes == pytest.approx(load_gpu("h200").memory_bytes * utilisation)
    for stage in p.stages:
        used = stage.weights.total_bytes + stage.activation_bytes + stage.reserve_bytes
        assert used + stage.kv_bytes == pytest.approx(p.budget_bytes, rel=1e-12)
        block_bytes = stage.kv_bytes_per_token * block_size
        assert stage.num_blocks * block_bytes <= max(stage.kv_bytes, 0)
        assert (stage.num_blocks + 1) * block_bytes > stage.kv_bytes
    assert p.num_blocks == min(s.num_blocks for s in p.stages)
    assert p.fits == (p.max_concurrent_seqs[p.max_model_len] >= 1)


# --- DeepSeek sparse attention: the indexer's key cache -------------------------------------


def test_v32_pool_counts_the_index_keys_by_hand() -> None:
    """DeepSeek-V3.2 on 8 H200 (TP8): 61 MLA layers keep a bf16 latent of 512 + 64 values
    and the indexer's FP8 key of 128 plus one fp32 scale per token, so a token takes
    61 x (576 x 2 + 132) = 78,324 bytes on every rank (SGLang's cell size), not 70,272."""
    p = plan("DeepSeek-V3.2", "h200", tp=8, ep=True, mem_fraction_static=0.8, block_size=64)
    stage = p.stages[0]
    assert p.kv_bytes_per_token == 61 * (576 * 2 + 132) == 78_324
    assert stage.kv_bytes_per_token == 78_324
    assert stage.num_blocks == int(stage.kv_bytes // (78_324 * 64))
    assert stage.paged_kv_bytes == pytest.approx(stage.kv_bytes * 70_272 / 78_324)
    # The engine's pool (values only in each block) holds the same tokens as the plan.
    layout = pool_layout(p)
    assert layout.block_bytes == 70_272 * 64
    assert layout.num_blocks == stage.num_blocks
    per_seq = 8192 * 78_324  # 8192 is a whole number of 64-token blocks
    assert p.max_concurrent_seqs[8192] == int(stage.kv_bytes // per_seq)
