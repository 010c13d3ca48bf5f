"""Parameter counts of every bundled model against the reference table in specs/README.md.

Totals are exact (the README's computed column); active counts are within 0.5 % of the README's
computed active figures. Llama-3.1-8B, Mixtral-8x7B and the DeepSeek MTP module are also
rebuilt here component by component from their config fields.
"""

import pytest

from inferplan.specs.catalog import BUNDLED_MODELS, load_model
from inferplan.specs.params import ParamCounts, count_params

# specs/README.md "Parameter-count checks": computed total (text stack; vision tower apart).
README_TOTALS = {
    "Llama-2-7b-hf": 6_738_415_616,
    "Llama-2-70b-hf": 68_976_648_192,
    "Llama-3.1-8B": 8_030_261_248,
    "Llama-3.1-70B": 70_553_706_496,
    "Llama-3.1-405B": 405_853_388_800,
    "Mistral-7B-v0.1": 7_241_732_096,
    # Not in the README table: v0.1 plus the 768 extra vocabulary rows in embedding and head.
    "Mistral-7B-v0.3": 7_241_732_096 + 2 * (32_768 - 32_000) * 4096,
    "Qwen3-8B": 8_190_735_360,
    "Qwen3-32B": 32_762_123_264,
    "Qwen3-30B-A3B": 30_532_122_624,
    "Qwen3-235B-A22B": 235_093_634_560,
    "Qwen3-Next-80B-A3B-Thinking": 79_674_391_296,
    "Mixtral-8x7B-v0.1": 46_702_792_704,
    "gpt-oss-120b": 116_829_156_672,
    "gpt-oss-20b": 20_914_757_184,
    "DeepSeek-V3": 671_026_419_200,
    "DeepSeek-R1": 671_026_419_200,
    "Kimi-K2-Instruct": 1_026_408_232_448,
    "gemma-3-27b-it": 27_009_346_304,
    # Added with the published measurements (shared/specs/models/SOURCES-2.md); computed here
    # from the configs with the same conventions. DeepSeek-V3.2's DSA indexer (about 0.85 B) is
    # not modelled, so its count is V3's; Llama 4 Scout has one shared expert per MoE layer.
    "DeepSeek-V3.2": 671_026_419_200,
    "Qwen3-14B": 14_768_307_200,
    "Mixtral-8x22B-v0.1": 140_620_634_112,
    "Llama-4-Scout-17B-16E-Instruct": 107_769_861_120,
    "Qwen3-VL-30B-A3B": 30_532_122_624,
    # Nemotron-H, built layer by layer in tests/specs/test_hybrid.py (NVIDIA: 31.6B).
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": 31_577_940_288,
    # Added for issue 11's rows (specs/data/PROVENANCE.md); the published totals they are checked
    # against (106B, 355B, ~400B) are in tests/specs/test_catalog_additions.py.
    "GLM-4.5-Air": 106_852_251_264,
    "GLM-4.6": 352_797_829_024,
    "Llama-4-Maverick-17B-128E-Instruct": 400_711_848_960,
}

# README "computed active" column (embedding included); dense models: active == total.
README_ACTIVE = {
    "DeepSeek-V3": 37.55e9,
    "DeepSeek-R1": 37.55e9,
    "Kimi-K2-Instruct": 32.86e9,
    "Qwen3-30B-A3B": 3.35e9,
    "Qwen3-235B-A22B": 22.19e9,
    "Qwen3-Next-80B-A3B-Thinking": 3.88e9,
    "Mixtral-8x7B-v0.1": 12.88e9,
    "DeepSeek-V3.2": 37.55e9,
    "Mixtral-8x22B-v0.1": 39.15e9,
    "Llama-4-Scout-17B-16E-Instruct": 17.17e9,
    "Qwen3-VL-30B-A3B": 3.35e9,
    "gpt-oss-120b": 5.71e9,
    "gpt-oss-20b": 4.19e9,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": 3_580_076_352,  # NVIDIA: 3.6B with embeddings
    "GLM-4.5-Air": 13_424_129_664,
    "GLM-4.6": 33_632_266_144,
    "Llama-4-Maverick-17B-128E-Instruct": 17_184_691_200,
}
# gpt-oss's published 5.1B / 3.6B leave the input embedding out (README verdict column).
README_ACTIVE_COMPUTE = {"gpt-oss-120b": 5.13e9, "gpt-oss-20b": 3.61e9}


def counts(short: str) -> ParamCounts:
    return count_params(load_model(short))


def test_the_reference_table_covers_every_bundled_model() -> None:
    assert set(README_TOTALS) == set(BUNDLED_MODELS)


@pytest.mark.parametrize("short", sorted(BUNDLED_MODELS))
def test_total_text_parameters_are_exact(short: str) -> None:
    c = counts(short)
    assert c.total - c.vision_encoder == README_TOTALS[short]


@pytest.mark.parametrize("short", sorted(BUNDLED_MODELS))
def test_active_parameters_match_the_reference(short: str) -> None:
    c = counts(short)
    expected = README_ACTIVE.get(short, README_TOTALS[short])
    assert c.active == pytest.approx(expected, rel=0.005)
    assert c.active <= c.total - c.vision_encoder
    assert c.active_compute == c.active - c.embedding


@pytest.mark.parametrize("short", sorted(README_ACTIVE_COMPUTE))
def test_gpt_oss_active_compute_excludes_the_input_embedding(short: str) -> None:
    c = counts(short)
    assert c.active_compute == pytest.approx(README_ACTIVE_COMPUTE[short], rel=0.005)
    assert c.active - c.active_compute == 201_088 * 2880  # vocab x hidden


def test_llama_3_1_8b_component_by_component() -> None:
    # config: hidden 4096, 32 layers, 32 heads, 8 KV heads (head_dim 4096/32 = 128),
    # intermediate 14336, vocab 128256, untied head, no biases.
    h, n_layers, nh, nkv, hd, inter, vocab = 4096, 32, 32, 8, 128, 14336, 128_256
    embedding = vocab * h  # 525,336,576
    attention_layer = h * nh * hd + 2 * h * nkv * hd + nh * hd * h  # q, k+v, o = 41,943,040
    mlp_layer = 3 * h * inter  # gate, up, down = 176,160,768
    norms = 2 * h * n_layers + h  # two RMSNorms per layer + the final one = 266,240
    c = counts("Llama-3.1-8B")
    assert c.embedding == embedding == 525_336_576
    assert c.lm_head == embedding
    assert c.attention == n_layers * attention_layer == 1_342_177_280
    assert c.dense_mlp == n_layers * mlp_layer == 5_637_144_576
    assert c.norms == norms == 266_240
    assert c.routed_experts == c.shared_experts == c.router == c.mtp == c.vision_encoder == 0
    total = 2 * embedding + n_layers * (attention_layer + mlp_layer) + norms
    assert c.total == c.active == total == 8_030_261_248


def test_mixtral_8x7b_component_by_component() -> None:
    # config: hidden 4096, 32 layers, 32 heads / 8 KV heads, 8 local experts of width 14336,
    # top-2 routing, vocab 32000, untied head, no shared experts.
    h, n_layers, nh, nkv, hd, inter, vocab, n_exp, top_k = 4096, 32, 32, 8, 128, 14336, 32000, 8, 2
    embedding = vocab * h  # 131,072,000
    attention_layer = h * nh * hd + 2 * h * nkv * hd + nh * hd * h
    expert = 3 * h * inter  # one SwiGLU expert: 176,160,768
    router = h * n_exp  # gate: hidden -> experts, no bias
    norms = 2 * h * n_layers + h
    c = counts("Mixtral-8x7B-v0.1")
    assert c.embedding == c.lm_head == embedding
    assert c.attention == n_layers * attention_layer
    assert c.dense_mlp == 0
    assert c.routed_experts == n_layers * n_exp * expert == 45_097_156_608
    assert c.routed_experts_active == n_layers * top_k * expert == 11_274_289_152
    assert c.router == n_layers * router == 1_048_576
    assert c.norms == norms
    shared = 2 * embedding + n_layers * (attention_layer + router) + norms
    assert c.total == shared + n_layers * n_exp * expert == 46_702_792_704
    assert c.active == shared + n_layers * top_k * expert == 12_879_925_248


def test_deepseek_mtp_module_by_hand() -> None:
    # One MoE decoder layer (MLA + 256 routed + 1 shared expert of width 2048) + enorm + hnorm +
    # eh_proj (2H -> H) + a head norm, with its own embedding and head copies.
    h, nh, q_lora, kv_lora, nope, rope, v = 7168, 128, 1536, 512, 128, 64, 128
    inter, n_exp, vocab = 2048, 256, 129_280
    mla = (
        h * q_lora
        + q_lora * nh * (nope + rope)
        + h * (kv_lora + rope)
        + kv_lora * nh * (nope + v)
        + nh * v * h
    )
    layer_norms = 2 * h + q_lora + kv_lora  # two RMSNorms + MLA's q_a / kv_a layernorms
    moe = n_exp * 3 * h * inter + 3 * h * inter + h * n_exp + n_exp  # + e_score_correction_bias
    mtp = mla + layer_norms + moe + 2 * h + 2 * h * h + h + 2 * vocab * h
    c = counts("DeepSeek-V3")
    assert c.mtp == mtp
    assert c.mtp == pytest.approx(13.46e9, rel=0.005)
    assert c.total_with_mtp == pytest.approx(684.49e9, rel=0.001)  # README: 671B + 14B MTP
    assert c.total == README_TOTALS["DeepSeek-V3"]  # the main model's total leaves MTP out
    assert counts("Kimi-K2-Instruct").mtp == 0  # num_nextn_predict_layers 0


def test_gemma3_vision_tower_is_reported_apart() -> None:
    c = counts("gemma-3-27b-it")
    assert 0.35e9 < c.vision_encoder < 0.45e9  # SigLIP ~0.4B
    assert c.total == README_TOTALS["gemma-3-27b-it"] + c.vision_encoder
    assert c.active == README_TOTALS["gemma-3-27b-it"]  # a text token never touches the tower
    assert c.lm_head == 0  # tied embeddings (HF Gemma3TextConfig default)


def test_as_dict_sums_to_total_with_mtp() -> None:
    for short in BUNDLED_MODELS:
        c = counts(short)
        assert sum(c.as_dict().values()) == c.total_with_mtp
