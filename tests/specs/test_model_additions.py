"""The models issue 11 added (GLM-4.5-Air, GLM-4.6, Llama-4-Maverick), checked against the
totals their makers publish and, for GLM-4-MoE's attention, against a hand count of its module
shapes."""

import pytest

from inferplan.plan.published import bundled_model_name
from inferplan.specs.catalog import load_model
from inferplan.specs.params import attention_params, count_params

# Published totals and active counts (GLM-4.5 technical report, arXiv 2508.06471, Table 1;
# zai-org/GLM-4.6 model card; Meta's Llama 4 card: 400B total, 17B active). GLM's active figures
# leave out the embedding and the LM head (both untied 151,552 x hidden matrices).
PUBLISHED = {
    "GLM-4.5-Air": (106e9, 12e9),
    "GLM-4.6": (355e9, 32e9),
    "Llama-4-Maverick-17B-128E-Instruct": (400e9, 17e9),
}


@pytest.mark.parametrize("short", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_totals(short: str) -> None:
    total, active = PUBLISHED[short]
    counts = count_params(load_model(short))
    assert counts.total == pytest.approx(total, rel=0.01)
    if short.startswith("GLM"):
        assert counts.active - counts.embedding - counts.lm_head == pytest.approx(active, rel=0.02)
    else:
        assert counts.active == pytest.approx(active, rel=0.02)


def test_glm_layer_stacks_follow_first_k_dense_replace() -> None:
    air, full = load_model("GLM-4.5-Air"), load_model("GLM-4.6")
    assert [layer.ffn.kind for layer in air.layers[:2]] == ["dense", "moe"]
    assert [layer.ffn.kind for layer in full.layers[:4]] == ["dense"] * 3 + ["moe"]
    assert sum(layer.ffn.kind == "moe" for layer in full.layers) == 89
    moe = full.moe_ffn
    assert moe is not None
    assert (moe.num_experts, moe.num_experts_per_tok, moe.intermediate_size) == (160, 8, 1536)
    assert moe.shared_intermediate_size == 1536  # n_shared_experts 1 x moe_intermediate_size
    assert moe.router_bias_size == 160  # the router's e_score_correction_bias
    assert full.num_mtp_layers == 1


def test_glm_attention_has_qkv_bias_no_o_bias_and_qk_norm_only_where_configured() -> None:
    """HF Glm4MoeAttention: q/k/v biased (attention_bias), o_proj without bias, per-head q/k
    RMSNorm when use_qk_norm (GLM-4.6 yes, GLM-4.5-Air no)."""
    h, nh, nkv, hd = 5120, 96, 8, 128
    att = load_model("GLM-4.6").layers[0].attention
    weights = h * nh * hd + 2 * h * nkv * hd + nh * hd * h
    assert attention_params(att, h) == weights + (nh * hd + 2 * nkv * hd) + 2 * hd
    air = load_model("GLM-4.5-Air").layers[0].attention
    assert not air.has_qk_norm and air.has_qkv_bias and not air.has_o_bias


def test_maverick_interleaves_moe_and_dense_layers() -> None:
    spec = load_model("Llama-4-Maverick-17B-128E-Instruct")
    kinds = [layer.ffn.kind for layer in spec.layers]
    assert kinds[:4] == ["dense", "moe", "dense", "moe"]  # interleave_moe_layer_step 2
    assert spec.layers[0].ffn.intermediate_size == 16384  # intermediate_size_mlp
    moe = spec.moe_ffn
    assert moe is not None and (moe.num_experts, moe.num_experts_per_tok) == (128, 1)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("zai-org/GLM-4.5-Air", "zai-org/GLM-4.5-Air"),
        ("zai-org/GLM-4.6-FP8", "zai-org/GLM-4.6"),
        (
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        ),
    ],
)
def test_published_model_names_resolve(name: str, model: str) -> None:
    assert bundled_model_name(name) == model
