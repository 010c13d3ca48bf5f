"""Reading Hugging Face config.json files: errors that name the field, layer kinds, quantization
defaults, and how ``--model`` resolves a name or a path."""

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from inferplan.errors import InferplanError
from inferplan.specs.catalog import load_model
from inferplan.specs.model import ModelSpec, QuantizationDefault, parse_config
from inferplan.specs.params import count_params
from tiny_configs import tiny_llama


def bundled(short: str) -> dict[str, Any]:
    text = resources.files("inferplan.specs").joinpath(f"data/models/{short}.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def parse(cfg: dict[str, Any]) -> ModelSpec:
    return parse_config(cfg, name="test", source="cfg.json")


def write_config(directory: Path, cfg: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(cfg))
    return path


# --- malformed and incomplete configs --------------------------------------------------------


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "intermediate_size"])
def test_missing_field_is_named(field: str) -> None:
    cfg = bundled("Llama-3.1-8B")
    del cfg[field]
    with pytest.raises(InferplanError, match=rf"cfg\.json: missing field '{field}'"):
        parse(cfg)


def test_missing_field_error_through_a_file_names_the_file(tmp_path: Path) -> None:
    cfg = bundled("Llama-3.1-8B")
    del cfg["num_hidden_layers"]
    path = write_config(tmp_path, cfg)
    with pytest.raises(InferplanError) as err:
        load_model(str(path))
    assert str(path) in str(err.value)
    assert "'num_hidden_layers'" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", "4096"),
        ("hidden_size", 4096.0),
        ("num_hidden_layers", 0),
        ("num_attention_heads", -32),
        ("vocab_size", True),
        ("intermediate_size", None),
    ],
)
def test_wrong_types_are_named(field: str, value: object) -> None:
    cfg = bundled("Llama-3.1-8B")
    cfg[field] = value
    with pytest.raises(InferplanError, match=f"'{field}'"):
        parse(cfg)


def test_non_boolean_flag_is_named() -> None:
    with pytest.raises(InferplanError, match="'tie_word_embeddings' must be true or false"):
        parse(tiny_llama(tie_word_embeddings="yes"))


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(InferplanError, match="JSON object"):
        parse_config([1, 2], name="x", source="cfg.json")  # type: ignore[arg-type]


def test_heads_not_a_multiple_of_kv_heads() -> None:
    with pytest.raises(InferplanError, match=r"num_attention_heads=8 is not a multiple of .*=3"):
        parse(tiny_llama(num_key_value_heads=3))


def test_unsupported_quant_method_is_named() -> None:
    cfg = tiny_llama(quantization_config={"quant_method": "bitsandbytes"})
    with pytest.raises(InferplanError, match="quant_method 'bitsandbytes' is not supported"):
        parse(cfg)


def test_layer_types_of_the_wrong_length() -> None:
    cfg = bundled("gpt-oss-20b")
    cfg["layer_types"] = cfg["layer_types"][:-1]
    with pytest.raises(InferplanError, match=r"'layer_types' has 23 entries, not .*=24"):
        parse(cfg)


def test_unknown_layer_type_lists_the_valid_ones() -> None:
    cfg = tiny_llama(layer_types=["full_attention"] * 3 + ["chunked_attention"])
    with pytest.raises(InferplanError, match="'chunked_attention' is not supported; valid"):
        parse(cfg)


def test_more_active_experts_than_experts() -> None:
    cfg = tiny_llama(num_local_experts=4, num_experts_per_tok=8)
    with pytest.raises(InferplanError, match="num_experts_per_tok=8 exceeds the 4"):
        parse(cfg)


def test_null_kv_heads_means_multi_head_attention() -> None:
    model = parse(tiny_llama(num_key_value_heads=None))
    assert model.layers[0].attention.num_kv_heads == 8


# --- unknown families and layer kinds ---------------------------------------------------------


def test_unknown_model_type_with_standard_fields_reads_as_dense() -> None:
    cfg = bundled("Llama-3.1-8B")
    cfg["model_type"] = "my_new_family"
    model = parse(cfg)
    assert model.model_type == "my_new_family"
    assert not model.is_moe
    assert {g.attention.kind for g in model.layers} == {"gqa"}
    assert {g.ffn.kind for g in model.layers} == {"dense"}
    assert count_params(model).total == 8_030_261_248  # same shapes as Llama-3.1-8B


def test_tiny_llama_shapes() -> None:
    model = parse(tiny_llama())
    att = model.layers[0].attention
    assert (att.num_heads, att.num_kv_heads, att.head_dim) == (8, 2, 256 // 8)
    assert model.num_layers == 4
    assert model.dtype == "bf16"
    assert model.quantization is None


def test_gpt_oss_alternates_sliding_and_full() -> None:
    model = load_model("gpt-oss-120b")
    windows = [g.attention.window_tokens for g in model.layers]
    assert windows == [128, None] * 18
    att = model.layers[0].attention
    assert att.has_sinks and att.has_qkv_bias and att.has_o_bias


def test_gemma3_five_local_to_one_global() -> None:
    model = load_model("gemma-3-27b-it")
    assert model.num_layers == 62
    globals_ = [i for i, g in enumerate(model.layers) if g.attention.window_tokens is None]
    assert globals_ == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]  # every 6th layer
    assert all(
        g.attention.window_tokens == 1024 for i, g in enumerate(model.layers) if i not in globals_
    )
    assert model.tie_word_embeddings  # HF default the multimodal config omits
    assert model.vocab_size == 262_208
    assert model.norms_per_layer == 4
    assert model.vision is not None


def test_qwen3_next_three_linear_to_one_full() -> None:
    model = load_model("Qwen3-Next-80B-A3B-Thinking")
    kinds = [g.attention.kind for g in model.layers]
    assert kinds == ["linear", "linear", "linear", "gqa"] * 12
    full = model.layers[3].attention
    assert (full.num_kv_heads, full.head_dim, full.has_query_gate) == (2, 256, True)
    assert all(g.ffn.kind == "moe" for g in model.layers)


def test_deepseek_first_three_dense_then_moe() -> None:
    model = load_model("DeepSeek-V3")
    ffns = [g.ffn for g in model.layers]
    assert [f.kind for f in ffns] == ["dense"] * 3 + ["moe"] * 58
    assert ffns[0].intermediate_size == 18_432
    moe = ffns[3]
    assert (moe.intermediate_size, moe.num_experts, moe.num_experts_per_tok) == (2048, 256, 8)
    assert moe.shared_intermediate_size == 1 * 2048
    assert {g.attention.kind for g in model.layers} == {"mla"}
    assert model.num_mtp_layers == 1


def test_qwen3_moe_mlp_only_layers_and_sparse_step() -> None:
    cfg = bundled("Qwen3-30B-A3B")
    cfg["mlp_only_layers"] = [0, 5]
    model = parse(cfg)
    kinds = [g.ffn.kind for g in model.layers]
    assert kinds[0] == kinds[5] == "dense"
    assert kinds.count("dense") == 2
    assert model.layers[0].ffn.intermediate_size == 6144  # the dense width
    cfg["mlp_only_layers"] = []
    cfg["decoder_sparse_step"] = 2  # MoE on layers where (i + 1) % 2 == 0
    kinds = [g.ffn.kind for g in parse(cfg).layers]
    assert kinds == ["dense", "moe"] * 24


def test_layer_groups_collapse_shared_shapes() -> None:
    groups = load_model("gemma-3-27b-it").layer_groups
    assert sorted(g.num_layers for g in groups) == [10, 52]


# --- quantization defaults --------------------------------------------------------------------


def test_deepseek_checkpoint_is_fp8_on_all_linear_layers() -> None:
    assert load_model("DeepSeek-R1").quantization == QuantizationDefault("fp8", "linear")


def test_gpt_oss_checkpoint_is_mxfp4_on_experts_only() -> None:
    assert load_model("gpt-oss-20b").quantization == QuantizationDefault("mxfp4", "experts")


def test_awq_reads_as_int4_and_plain_checkpoints_have_none() -> None:
    cfg = tiny_llama(quantization_config={"quant_method": "awq", "bits": 4})
    assert parse(cfg).quantization == QuantizationDefault("int4", "linear")
    assert load_model("Llama-3.1-8B").quantization is None


def test_float16_checkpoint_keeps_fp16() -> None:
    assert load_model("Llama-2-7b-hf").dtype == "fp16"


# --- name resolution --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["meta-llama/Llama-3.1-70B", "Llama-3.1-70B", "llama-3.1-70b", " LLAMA-3.1-70B "]
)
def test_bundled_names_resolve(name: str) -> None:
    model = load_model(name)
    assert model.name == "meta-llama/Llama-3.1-70B"
    assert model.num_layers == 80


def test_config_file_path(tmp_path: Path) -> None:
    path = write_config(tmp_path / "tiny", tiny_llama())
    model = load_model(str(path))
    assert model.name == str(path)
    assert model.num_layers == 4


def test_directory_holding_a_config(tmp_path: Path) -> None:
    write_config(tmp_path / "tiny", tiny_llama())
    assert load_model(str(tmp_path / "tiny")).num_layers == 4


def test_existing_directory_wins_over_a_bundled_name(tmp_path: Path) -> None:
    write_config(tmp_path / "Llama-3.1-8B", tiny_llama())
    assert load_model(str(tmp_path / "Llama-3.1-8B")).num_layers == 4


def test_missing_file_and_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(InferplanError, match=r"absent\.json: no such model config file"):
        load_model(str(tmp_path / "absent.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InferplanError, match=r"config\.json: no such model config file"):
        load_model(str(tmp_path / "empty"))


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 4096,\n  oops\n}')
    with pytest.raises(InferplanError, match=re.escape(f"{path}:3: not valid JSON")):
        load_model(str(path))


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(InferplanError, match=r"did you mean .*Llama-3\.1-8B") as err:
        load_model("Llama-3.1-7B")
    assert "inferplan models" in str(err.value)


def test_suggestions_are_not_repeated() -> None:
    with pytest.raises(InferplanError) as err:
        load_model("Llama-3.1-7B")
    suggested = str(err.value).split("did you mean ")[1].split("?")[0].split(", ")
    assert len(suggested) == len(set(suggested))
