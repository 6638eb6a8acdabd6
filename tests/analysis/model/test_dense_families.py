"""Granite 3.x, Granite MoE, OLMoE, EXAONE 4.0, Command R / R7B, GLM-4-0414, Gemma (v1), ERNIE 4.5 (dense and MoE) and
Ministral 3,
read as vLLM 0.32's model
files build them (issue #47). Each family's config is transformers' own (its config class's defaults at small sizes,
as a checkpoint's config.json has them), and its parameters are the ones transformers' model class builds."""

import pytest
import transformers
from helpers import transformers_build

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params

SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1024, head_dim=64, num_experts=8, num_local_experts=8, num_experts_per_tok=2,
             shared_intermediate_size=256, max_position_embeddings=4096, sliding_window=128, pad_token_id=0,
             bos_token_id=1, eos_token_id=2)
# what a config.json of the family leaves out that transformers' to_dict writes
ABSENT = {"gemma": ("use_bidirectional_attention",), "exaone4": ("layer_types",), "cohere2": ("layer_types",)}


def _config(model_type: str, **change) -> dict:
    d = transformers.AutoConfig.for_model(model_type).to_dict()
    d.update({k: v for k, v in SMALL.items() if k in d})
    for k in ABSENT.get(model_type, ()):
        d.pop(k, None)
    return d | change


def _transformers(d: dict) -> tuple[int, transformers.PretrainedConfig]:
    cfg, count = transformers_build(d)
    return count, cfg


@pytest.mark.parametrize("model_type, change", [
    ("granite", {}),
    ("granitemoe", {}),
    ("granitemoeshared", {}),
    ("olmoe", {}),
    ("exaone4", {}),
    ("cohere", {}),
    ("cohere", {"use_qk_norm": True}),
    ("cohere2", {}),
    ("glm4", {}),
    ("gemma", {}),
    ("ernie4_5", {}),
    ("ministral3", {}),
    ("ministral3", {"tie_word_embeddings": True}),
    ("ernie4_5_moe", {"moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": 64}),
    ("ernie4_5_moe", {"moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": 64, "moe_layer_interval": 2,
                      "moe_layer_start_index": 0}),
])
def test_parameters_are_what_transformers_builds(model_type, change):
    d = _config(model_type, **change)
    expected, _ = _transformers(d)
    assert count_params(Architecture.from_config(d, model_type)).total == expected


@pytest.mark.parametrize("model_type, pattern", [("exaone4", None), ("exaone4", 2), ("cohere2", None), ("cohere2", 3)])
def test_sliding_layers_are_the_ones_transformers_derives(model_type, pattern):
    d = _config(model_type, **({} if pattern is None else {"sliding_window_pattern": pattern}))
    _, cfg = _transformers(d)
    a = Architecture.from_config(d, model_type)
    assert list(a.layer_types) == list(cfg.layer_types)
    assert "sliding_attention" in a.layer_types and "full_attention" in a.layer_types


def test_ernie_moe_layers_are_where_vllm_builds_them():
    # ernie45_moe.py: MoE where (i + 1) % moe_layer_interval == 0 and start <= i <= end
    d = _config("ernie4_5_moe", moe_num_experts=8, moe_k=2, moe_intermediate_size=64, num_hidden_layers=6,
                moe_layer_start_index=1, moe_layer_end_index=4, moe_layer_interval=2)
    a = Architecture.from_config(d, "ernie4_5_moe")
    assert [i for i in range(6) if a.is_moe_layer(i)] == [1, 3]
    assert (a.moe.shared_experts, a.moe.router_bias, a.moe.router_fp32) == (2, True, True)


def test_command_r7b_attends_one_token_past_its_window():
    # vLLM's commandr.py: "cohere swa layer sees [pos - sliding_window, pos], i.e. sliding_window + 1" tokens
    a = Architecture.from_config(_config("cohere2"), "cohere2")
    assert {layer.window for layer, _ in a.attention_kinds} == {129, None}
    e = Architecture.from_config(_config("exaone4"), "exaone4")
    assert {layer.window for layer, _ in e.attention_kinds} == {128, None}


def test_the_tiny_engine_models_are_their_families():
    cohere2, _ = resolve_model("tiny-cohere2")
    assert [(layer.kind, layer.window, n) for layer, n in cohere2.attention_kinds] == [("sliding", 66, 3),
                                                                                         ("full", None, 1)]
    exaone4, _ = resolve_model("tiny-exaone4")
    assert [(layer.kind, layer.window, n) for layer, n in exaone4.attention_kinds] == [("sliding", 64, 3),
                                                                                         ("full", None, 1)]


@pytest.mark.parametrize("model_type, change, message", [
    ("granite", {"layer_types": ["sliding_attention"] * 4}, "no sliding_window"),  # GraniteConfig has no default
    ("gemma", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("cohere2", {"sliding_window_pattern": 0}, "sliding_window_pattern must be a positive integer"),
    ("glm4", {"partial_rotary_factor": 2}, r"partial_rotary_factor must be in \(0, 1\]"),
    ("ernie4_5", {"use_bias": True}, "use_bias true"),
    ("ernie4_5_moe", {"moe_num_experts": [64, 64]}, "moe_num_experts must be an expert count"),
    ("ernie4_5_moe", {"use_bias": True}, "use_bias true"),
    ("ernie4_5_moe", {"moe_layer_interval": 0}, "moe_layer_interval must be"),
])
def test_what_kvprof_does_not_read_is_refused_by_name(model_type, change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_config(model_type) | change, model_type)


@pytest.mark.parametrize("model_type, change", [
    ("granite", {}), ("granitemoe", {}), ("granitemoeshared", {}), ("olmoe", {}), ("exaone4", {}), ("cohere", {}),
    ("cohere2", {}), ("glm4", {}), ("gemma", {}), ("ernie4_5", {}), ("ministral3", {}),
    ("ernie4_5_moe", {"moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": 64}),
])
def test_no_value_however_odd_gives_a_traceback(model_type, change):
    """Every key of the family's config, set to each odd value in turn, is read or refused by name."""
    from helpers import ODD_CONFIG_VALUES, read_or_refuse

    d = _config(model_type, **change)
    read_or_refuse(d | {k: v} for k in d for v in ODD_CONFIG_VALUES)
