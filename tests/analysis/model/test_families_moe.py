"""K-EXAONE (``exaone_moe``), Arcee Trinity (``afmoe``) and Cohere's MoE (``cohere2_moe``)
(analysis.model.families.moe, issue #47), read as vLLM 0.32's model files build them from transformers' config
objects. Expected values: transformers' own model's parameters (plus, for K-EXAONE, the float32 score bias vLLM loads a
MoE layer, ``e_score_correction_bias``, which transformers keeps as a buffer) and that config object's layer types and
MLP kinds."""

import dataclasses
import json
from pathlib import Path

import pytest
import transformers
from helpers import ODD_CONFIG_VALUES, read_or_refuse, transformers_build

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.families.moe import AFMOE_DEFAULTS, COHERE2_MOE_DEFAULTS, EXAONE_MOE_DEFAULTS
from analysis.model.params import count_params

SMALL = dict(hidden_size=512, num_attention_heads=8, num_key_value_heads=4, intermediate_size=1024,
             moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2, num_hidden_layers=4, vocab_size=1000,
             sliding_window=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _config(**change) -> dict:
    d = transformers.AutoConfig.for_model("exaone_moe").to_dict()
    d.pop("layer_types")
    d.pop("mlp_layer_types")
    return d | SMALL | change


def _check(d: dict) -> Architecture:
    cfg, count = transformers_build(d)
    a = Architecture.from_config(d, "exaone_moe")
    moe_layers = [i for i in range(a.num_layers) if a.is_moe_layer(i)]
    assert moe_layers == [i for i, t in enumerate(cfg.mlp_layer_types) if t == "sparse"]
    assert list(a.layer_types) == list(cfg.layer_types)
    assert count_params(a).total == count + len(moe_layers) * cfg.num_experts
    return a


@pytest.mark.parametrize("config_class, ours", [(transformers.ExaoneMoeConfig, EXAONE_MOE_DEFAULTS),
                                                (transformers.AfmoeConfig, AFMOE_DEFAULTS),
                                                (transformers.Cohere2MoeConfig, COHERE2_MOE_DEFAULTS)])
def test_the_defaults_are_transformers_config_classs(config_class, ours):
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    assert {k: defaults[k] for k in ours} == ours


@pytest.mark.parametrize("change", [
    {},  # layer and MLP kinds derived: sliding_window_pattern 4, first_k_dense_replace 1
    {"num_hidden_layers": 6, "first_k_dense_replace": 2, "sliding_window_pattern": 3},
    {"num_hidden_layers": 8, "mlp_layer_types": ["dense"] * 2 + ["sparse"] * 6,
     "layer_types": ["sliding_attention", "full_attention"] * 4, "sliding_window_pattern": "LGLG"},
    {"num_shared_experts": 0},
])
def test_parameters_layers_and_experts_are_what_transformers_builds(change):
    _check(_config(**change))


def test_a_config_that_leaves_keys_to_the_defaults():
    a = _check({"model_type": "exaone_moe", "hidden_size": 512, "num_attention_heads": 32, "intermediate_size": 1024,
                "num_hidden_layers": 8, "vocab_size": 1000})
    assert (a.num_kv_heads, a.head_dim, a.moe.num_experts, a.moe.shared_experts) == (32, 16, 64, 1)
    assert {layer.window for layer, _ in a.attention_kinds} == {4096, None}


def _afmoe(**change) -> dict:
    d = transformers.AutoConfig.for_model("afmoe").to_dict()
    d.pop("layer_types")
    return d | SMALL | {"head_dim": 64} | change


@pytest.mark.parametrize("change", [
    {},  # every fourth layer full (global_attn_every_n_layers 4), the first dense (num_dense_layers 1)
    {"num_hidden_layers": 6, "num_dense_layers": 2, "global_attn_every_n_layers": 3},
    {"layer_types": ["full_attention", "sliding_attention"] * 2, "num_shared_experts": 0},
])
def test_afmoe_parameters_and_layers_are_what_transformers_builds(change):
    d = _afmoe(**change)
    cfg, count = transformers_build(d)
    a = Architecture.from_config(d, "afmoe")
    assert count_params(a).total == count
    assert list(a.layer_types) == list(cfg.layer_types)
    assert [i for i in range(a.num_layers) if not a.is_moe_layer(i)] == list(range(cfg.num_dense_layers))
    assert (a.attention_output_gate, a.moe.router_fp32, a.norms_per_layer) == (True, True, 4)


def _cohere2_moe(**change) -> dict:
    d = transformers.AutoConfig.for_model("cohere2_moe").to_dict()
    d.pop("layer_types")
    d.pop("mlp_layer_types")
    small = {k: v for k, v in SMALL.items() if k != "moe_intermediate_size"}  # its experts are intermediate_size wide
    return d | small | {"head_dim": 64, "intermediate_size": 256} | change


@pytest.mark.parametrize("change", [
    {},  # every MoE layer, every fourth full
    {"num_hidden_layers": 6, "first_k_dense_replace": 2, "prefix_dense_intermediate_size": 2048},
    {"num_hidden_layers": 6, "first_k_dense_replace": 2, "prefix_dense_intermediate_size": 2048,
     "prefix_dense_sliding_window_pattern": 2, "sliding_window_pattern": 2},
    {"num_shared_experts": 2, "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
])
def test_cohere2_moe_parameters_and_layers_are_what_transformers_builds(change):
    d = _cohere2_moe(**change)
    cfg, count = transformers_build(d)
    a = Architecture.from_config(d, "cohere2_moe")
    assert count_params(a).total == count
    assert list(a.layer_types) == list(cfg.layer_types)
    assert [i for i in range(a.num_layers) if a.is_moe_layer(i)] == [
        i for i, t in enumerate(cfg.mlp_layer_types) if t == "sparse"]
    # vLLM's cohere2_moe.py: a sliding layer attends over sliding_window + 1 tokens
    assert {layer.window for layer, _ in a.attention_kinds} == {129, None}


def _configs() -> dict:
    return {"exaone_moe": _config, "afmoe": _afmoe, "cohere2_moe": _cohere2_moe}


@pytest.mark.parametrize("model_type, change, message", [
    ("exaone_moe", {"sliding_window_pattern": "LLLG"}, "cannot derive them"),  # a string pattern, no layer_types
    ("exaone_moe", {"sliding_window": None}, "cannot derive them"),
    ("exaone_moe", {"mlp_layer_types": ["moe"] * 4}, "mlp_layer_types must list"),
    ("exaone_moe", {"layer_types": ["full_attention"] * 3}, "layer_types must list"),
    ("exaone_moe", {"sliding_windows": [64, 128, 64, 128]}, "sliding_windows"),  # per-layer windows: not read
    ("exaone_moe", {"num_nextn_predict_layers": 1}, "num_nextn_predict_layers"),
    ("afmoe", {"attention_bias": True}, "attention_bias true"),
    ("afmoe", {"num_dense_layers": 9}, "num_dense_layers must be a layer count"),
    ("afmoe", {"global_attn_every_n_layers": 0}, "global_attn_every_n_layers must be a positive integer"),
    ("cohere2_moe", {"attention_bias": True}, "attention_bias true"),
    ("cohere2_moe", {"first_k_dense_replace": 1}, "no prefix_dense_intermediate_size"),
    ("cohere2_moe", {"first_k_dense_replace": 9}, "first_k_dense_replace must be a layer count"),
])
def test_what_kvprof_does_not_read_is_refused_by_name(model_type, change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_configs()[model_type](**change), model_type)


@pytest.mark.parametrize("model_type, change", [
    ("exaone_moe", {}), ("afmoe", {}),
    ("cohere2_moe", {"first_k_dense_replace": 1, "prefix_dense_intermediate_size": 512}),
])
def test_no_value_however_odd_gives_a_traceback(model_type, change):
    d = _configs()[model_type](**change)
    read_or_refuse(d | {k: v} for k in d for v in ODD_CONFIG_VALUES)


@pytest.mark.parametrize("model, layers, beyond_transformers", [
    ("tiny-exaone-moe", [("sliding", 64, 3), ("full", None, 1)], 3 * 8),  # a score bias an expert of 3 MoE layers
    ("tiny-afmoe", [("sliding", 64, 2), ("full", None, 2)], 0),
    ("tiny-cohere2-moe", [("full", None, 1), ("sliding", 65, 3)], 0),
])
def test_the_tiny_engine_models_are_their_families(model, layers, beyond_transformers):
    a, _ = resolve_model(model)
    assert [(layer.kind, layer.window, n) for layer, n in a.attention_kinds] == layers
    raw = json.loads((Path(__file__).resolve().parents[3] / "analysis" / "catalog" / "models" / model /
                      "config.json").read_text())
    assert count_params(a).total == transformers_build(raw)[1] + beyond_transformers
