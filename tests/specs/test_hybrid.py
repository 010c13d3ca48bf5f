"""Nemotron-H (hybrid Mamba-2 + attention + MoE): layers, parameters and per-sequence state,
hand-computed from NVIDIA-Nemotron-3-Nano-30B-A3B's config fields."""

import copy
import json
from importlib import resources

import pytest

from inferplan.errors import InferplanError
from inferplan.specs.catalog import load_model
from inferplan.specs.dtypes import KV_FORMATS
from inferplan.specs.kv import linear_state_bytes, sequence_kv_bytes
from inferplan.specs.model import parse_config
from inferplan.specs.params import count_params

NAME = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
# hidden 2688, vocab 131072 (untied); Mamba-2: 64 heads x 64, 8 groups x state 128, conv 4;
# attention: 32 heads x 128, 2 KV heads; MoE: 128 relu2 experts of 1856, top 6, shared 3712.
H, VOCAB = 2688, 131_072
INNER, GROUPS_STATE, HEADS, STATE = 64 * 64, 8 * 128, 64, 128
MAMBA_LAYER = (
    H * (2 * INNER + 2 * GROUPS_STATE + HEADS)  # in_proj: z, x, B, C, dt
    + (INNER + 2 * GROUPS_STATE) * (4 + 1)  # depthwise conv weights + bias
    + 3 * HEADS  # dt_bias, A_log, D
    + INNER  # gated RMSNorm
    + INNER * H  # out_proj
)
ATTENTION_LAYER = H * 32 * 128 + 2 * H * 2 * 128 + 32 * 128 * H
EXPERT = 2 * H * 1856  # up and down, no gate (relu2)
MOE_LAYER = 128 * EXPERT + 2 * H * 3712 + H * 128 + 128  # experts, shared, router + bias


def _config() -> dict[str, object]:
    text = resources.files("inferplan.specs").joinpath(f"data/models/{NAME}.json").read_text()
    loaded: dict[str, object] = json.loads(text)
    return loaded


def test_the_pattern_gives_one_block_per_layer() -> None:
    spec = load_model(NAME)
    kinds = [(g.attention.kind, g.ffn.kind) for g in spec.layers]
    assert kinds.count(("linear", "none")) == 23  # M
    assert kinds.count(("gqa", "none")) == 6  # *
    assert kinds.count(("none", "moe")) == 23  # E
    assert kinds[:6] == [("linear", "none"), ("none", "moe")] * 2 + [("linear", "none")] + [
        ("gqa", "none")
    ]
    moe = spec.moe_ffn
    assert moe is not None and not moe.is_gated and moe.shared_intermediate_size == 3712


def test_parameters_layer_by_layer() -> None:
    c = count_params(load_model(NAME))
    assert c.attention == 23 * MAMBA_LAYER + 6 * ATTENTION_LAYER
    assert c.routed_experts == 23 * 128 * EXPERT
    assert c.shared_experts == 23 * 2 * H * 3712
    assert c.router == 23 * (H * 128 + 128)
    assert c.norms == 52 * H + H  # one pre-norm per block, plus the final norm
    assert c.total == 2 * VOCAB * H + c.attention + 23 * MOE_LAYER + c.norms
    assert c.active == c.total - 23 * (128 - 6) * EXPERT


def test_the_state_is_fixed_per_sequence_with_an_fp32_ssm_state() -> None:
    spec = load_model(NAME)
    mamba = next(g.attention for g in spec.layers if g.attention.kind == "linear")
    conv = (INNER + 2 * GROUPS_STATE) * 3  # kernel - 1 past inputs of x, B, C
    ssm = HEADS * 64 * STATE
    assert linear_state_bytes(mamba, 1, 2.0) == conv * 2 + ssm * 4
    assert linear_state_bytes(mamba, 2, 2.0) == (conv // 2) * 2 + (ssm // 2) * 4
    layers = tuple((g.attention, g.num_layers) for g in spec.layer_groups)
    state = 23 * (conv * 2 + ssm * 4)
    kv_per_token = 6 * 2 * 2 * 128 * 2  # bf16 K and V of the 6 attention layers
    for context in (1, 1000, 100_000):
        expected = state + kv_per_token * context
        assert sequence_kv_bytes(layers, context, KV_FORMATS["bf16"], 2.0, tp=1) == expected


def test_a_bf16_state_config_halves_the_ssm_state() -> None:
    cfg = copy.deepcopy(_config())
    cfg["mamba_ssm_cache_dtype"] = "bfloat16"
    spec = parse_config(cfg, name="x", source="x.json")
    mamba = next(g.attention for g in spec.layers if g.attention.kind == "linear")
    assert (
        linear_state_bytes(mamba, 1, 2.0) == ((INNER + 2 * GROUPS_STATE) * 3 + HEADS * 64 * 128) * 2
    )


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("MEM", "must be num_hidden_layers=52 characters"), ("X" * 52, "with 'X'")],
)
def test_a_bad_pattern_is_one_error_naming_the_field(pattern: str, message: str) -> None:
    cfg = copy.deepcopy(_config())
    cfg["hybrid_override_pattern"] = pattern
    with pytest.raises(InferplanError, match="hybrid_override_pattern") as err:
        parse_config(cfg, name="x", source="x.json")
    assert message in str(err.value)
