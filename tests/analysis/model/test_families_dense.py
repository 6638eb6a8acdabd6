"""OLMo 3, SmolLM3, Seed-OSS, GLM-4 (v1), CWM, Arcee, Jais 2, Hunyuan dense, VaultGemma, StarCoder2, Nemotron (v1),
Apertus, FlexOlmo, Mellum and Granite's sliding-window builds (analysis.model.families.dense, issue #47). All but
Apertus, Nemotron and Granite run through vLLM 0.32's Transformers modeling backend, which builds transformers' own
model from transformers' own config object: the expected values here are that model's parameters and that object's
heads, widths and layer types, for configs written in full and for configs that leave keys to the class's
defaults."""

import dataclasses
import json
from pathlib import Path

import pytest
import transformers
from helpers import ODD_CONFIG_VALUES, read_or_refuse, transformers_build

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.config_keys import FAMILIES
from analysis.model.families.dense import DEFAULTS
from analysis.model.params import count_params, rotary_cache_bytes
from analysis.model.vllm_models import transformers_backend_architectures

FAMILIES_HERE = sorted(DEFAULTS)
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1024, head_dim=64, max_position_embeddings=4096, sliding_window=128, pad_token_id=0,
             bos_token_id=1, eos_token_id=2)
# the least a config.json of the family writes: every other key is the config class's default
MINIMAL = dict(hidden_size=512, intermediate_size=512, num_hidden_layers=8, num_attention_heads=8, vocab_size=1024,
               pad_token_id=0, bos_token_id=1, eos_token_id=2)
# what transformers' model needs written (its attention reads head_dim, num_key_value_heads, with no fallback)
NEEDS = {"hunyuan_v1_dense": {"head_dim": 64}, "hunyuan_v1_moe": {"head_dim": 64},
         "nemotron": {"num_key_value_heads": 4},
         "opt": {"word_embed_proj_dim": None},  # OPTConfig's default: the hidden size
         # StableLmConfig's default of 32 KV heads exceeds MINIMAL's 8 query heads (neither builds such a model)
         "stablelm": {"num_key_value_heads": 4}}
# SMALL in the family's own key names (GPT-J's GPT-2 names; its to_dict() has no hidden_size to update)
SMALL_NAMED = {"gptj": {"n_embd": 256, "n_layer": 8, "n_head": 4, "n_positions": 4096, "rotary_dim": 16},
               "bloom": {"n_layer": 8, "n_head": 4},
               "falcon": {"ffn_hidden_size": None}}  # to_dict() writes 4 × the class's default width


def _config(model_type: str, **change) -> dict:
    d = transformers.AutoConfig.for_model(model_type).to_dict()
    d.update({k: v for k, v in SMALL.items() if k in d})
    d.pop("layer_types", None)  # derived again from the small layer count
    d.pop("mlp_layer_types", None)
    d.pop("layer_rope_theta", None)
    return d | NEEDS.get(model_type, {}) | SMALL_NAMED.get(model_type, {}) | change


def _vllm_layer_types(cfg: transformers.PretrainedConfig) -> list[str]:
    """The layer types vLLM attends with for transformers' config object: its layer_types, or where it has none,
    every layer sliding over its sliding_window if it has one (EngineArgs.create_engine_config then sets
    CacheConfig.sliding_window, which every Attention without a window of its own takes), else every layer full."""
    if getattr(cfg, "layer_types", None):
        return list(cfg.layer_types)
    return ["sliding_attention" if getattr(cfg, "sliding_window", None) else "full_attention"] * cfg.num_hidden_layers


def _kv_heads(cfg: transformers.PretrainedConfig) -> int:
    """The KV heads transformers' attention builds: num_key_value_heads, else every head (OPT); Falcon's
    fused query_key_value: num_kv_heads under the new decoder architecture, one under multi_query, else 3 × hidden
    (every head)."""
    if cfg.model_type == "falcon":
        return cfg.num_kv_heads if cfg.new_decoder_architecture else 1 if cfg.multi_query else cfg.num_attention_heads
    if cfg.model_type == "minicpm3":  # every head's K and V (vLLM's minicpm3.py: num_kv_heads = the local heads)
        return cfg.num_attention_heads
    return getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads


def _cache_head_dim(cfg: transformers.PretrainedConfig, default: int) -> int:
    """The width of a cached K head: head_dim (else hidden ÷ heads); MiniCPM3's qk_nope + qk_rope (its config's
    head_dim is the rope part)."""
    if cfg.model_type == "minicpm3":
        return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    return getattr(cfg, "head_dim", None) or default


def _cache_heads(a: Architecture) -> tuple[int, int]:
    """(KV heads, head width) of the first attention layer's cache, as kvprof plans it."""
    layer = a.attention_layers[0]
    return layer.num_kv_heads, layer.head_dim  # type: ignore[attr-defined]


def _architecture(d: dict) -> tuple[Architecture, transformers.PretrainedConfig, int]:
    cfg, count = transformers_build(d)
    return Architecture.from_config(d, d["model_type"]), cfg, count


@pytest.mark.parametrize("model_type", FAMILIES_HERE)
def test_the_defaults_are_transformers_config_classs(model_type):
    defaults = {f.name: f.default for f in dataclasses.fields(type(transformers.AutoConfig.for_model(model_type)))}
    assert DEFAULTS[model_type] == {k: defaults[k] for k in DEFAULTS[model_type]}


@pytest.mark.parametrize("model_type, change", [(m, {}) for m in FAMILIES_HERE] + [
    ("seed_oss", {"attention_bias": False, "attention_out_bias": True}),
    ("glm", {"attention_bias": False}),
    ("jais2", {"attention_bias": False, "mlp_bias": False}),
    ("arcee", {"attention_bias": True, "tie_word_embeddings": True}),
    ("smollm3", {"use_sliding_window": True}),
    ("mellum", {"layer_types": ["sliding_attention", "full_attention"] * 4,
                "mlp_layer_types": ["dense", "sparse", "sparse", "dense"] * 2}),
    ("mellum", {"num_local_experts": 16}),
    # Falcon-40B/180B's grouped KV heads with two LayerNorms a layer, Falcon-11B's one and untied head, Falcon-RW's
    # sequential block with biases and ALiBi
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1,
                "tie_word_embeddings": False}),
    ("falcon", {"multi_query": False, "parallel_attn": False, "bias": True, "alibi": True}),
    ("hyperclovax", {"use_post_norm": False, "attention_bias": True, "mlp_bias": True}),
    ("hunyuan_v1_moe", {"num_experts": 8, "moe_topk": 2, "attention_bias": True}),
])
def test_parameters_heads_and_layers_are_what_transformers_builds(model_type, change):
    a, cfg, count = _architecture(_config(model_type, **change))
    assert count_params(a).total == count
    kv_heads = _kv_heads(cfg)
    assert _cache_heads(a) == (kv_heads, _cache_head_dim(cfg, 256 // 4))
    kinds = _vllm_layer_types(cfg)
    assert list(a.layer_types) == list(kinds)


@pytest.mark.parametrize("model_type", FAMILIES_HERE)
def test_a_config_that_leaves_keys_to_the_defaults_is_read_as_transformers_fills_them(model_type):
    read = FAMILIES[model_type]  # OPT reads ffn_dim, not intermediate_size
    d = {"model_type": model_type} | {k: v for k, v in MINIMAL.items() if k in read or k.endswith("_token_id")} \
        | NEEDS.get(model_type, {})
    a, cfg, count = _architecture(d)
    assert count_params(a).total == count
    kv_heads = _kv_heads(cfg)
    assert _cache_heads(a) == (kv_heads, _cache_head_dim(cfg, 512 // 8))
    assert a.tie_word_embeddings == cfg.tie_word_embeddings
    kinds = _vllm_layer_types(cfg)
    assert list(a.layer_types) == list(kinds)
    windows = {layer.window for layer, _ in a.attention_kinds}
    assert windows == ({cfg.sliding_window, None} if "sliding_attention" in kinds else {None})


@pytest.mark.parametrize("model_type, change, expected", [
    # Olmo3Config: "sliding_attention" if (i + 1) % 4 != 0; CwmConfig: "full_attention" if i % 4 == 0
    ("olmo3", {}, ["sliding_attention"] * 3 + ["full_attention"]),
    ("cwm", {}, ["full_attention"] + ["sliding_attention"] * 3),
    # SmolLM3Config: no RoPE on every fourth layer, and with use_sliding_window those are the sliding ones
    ("smollm3", {"use_sliding_window": True}, ["full_attention"] * 3 + ["sliding_attention"]),
    ("smollm3", {"use_sliding_window": False}, ["full_attention"] * 4),
    ("mellum", {}, ["full_attention"] * 4),  # MellumConfig: all full where not written, whatever sliding_window says
    ("vaultgemma", {}, ["sliding_attention", "full_attention"] * 2),  # VaultGemmaConfig: (i + 1) % 2 slides
])
def test_the_derived_sliding_pattern(model_type, change, expected):
    a = Architecture.from_config(_config(model_type, num_hidden_layers=4, **change), model_type)
    assert list(a.layer_types) == expected


def test_the_transformers_backend_is_known_from_vllms_registry():
    """Every family kvprof reads whose transformers causal-LM class vLLM 0.32 maps to its Transformers backend is
    marked so, and keeps no RoPE cos/sin cache; Apertus, which vLLM builds natively, keeps one (positions × head)."""
    names = transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    backend = sorted(m for m in FAMILIES if names.get(m) in transformers_backend_architectures())
    assert {"olmo3", "smollm3", "seed_oss", "glm", "cwm", "arcee", "jais2", "hunyuan_v1_dense", "olmo2"} <= set(backend)
    for model_type in backend:
        d = _config(model_type) | {"architectures": [names[model_type]]}
        if model_type in ("olmo2", "gpt_bigcode"):
            d = transformers.AutoConfig.for_model(model_type).to_dict() | {"architectures": [names[model_type]]}
        a = Architecture.from_config(d, model_type)
        assert a.transformers_backend and rotary_cache_bytes(a) == 0, model_type
    apertus = Architecture.from_config(_config("apertus") | {"architectures": ["ApertusForCausalLM"]}, "apertus")
    assert not apertus.transformers_backend and rotary_cache_bytes(apertus) == 4096 * 64 * 2


@pytest.mark.parametrize("model_type, change, message", [
    ("arcee", {"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ("apertus", {"hidden_act": "silu"}, "hidden_act 'silu'"),
    ("hunyuan_v1_dense", {"head_dim": None}, "no head_dim"),
    ("smollm3", {"use_sliding_window": True, "no_rope_layers": [1, 0]}, "no_rope_layers must list"),
    ("apertus", {"mlp_bias": True}, "mlp_bias"),  # transformers' Apertus has none; vLLM's would build one
    ("glm", {"sliding_window": 128}, "sliding_window"),
    ("olmo3", {"sliding_window": -3}, "sliding_window must be a positive integer"),  # derived layer types too
    ("opt", {"word_embed_proj_dim": 128}, "word_embed_proj_dim 128"),  # OPT-350m's project_in / project_out
    ("opt", {"do_layer_norm_before": False}, "do_layer_norm_before False"),
    ("opt", {"num_key_value_heads": 2}, "num_key_value_heads"),  # vLLM's OPT is multi-head: not read
    ("mellum", {"mlp_layer_types": ["moe"] * 8}, "mlp_layer_types must list"),
    # Hunyuan-A13B's per-layer expert counts: transformers' experts take one count (and its other keys are unknown)
    ("hunyuan_v1_moe", {"num_experts": [8] * 8}, "num_experts is a list, not an integer"),
    ("hunyuan_v1_moe", {"num_experts": 4, "moe_topk": 8}, "moe_topk 8 is more than num_experts 4"),
    ("falcon", {"ffn_hidden_size": 4096}, "ffn_hidden_size 4096"),
    ("stablelm", {"qk_layernorm": True}, "qk_layernorm True"),
    ("stablelm", {"use_parallel_residual": True}, "use_parallel_residual True"),
    ("phi", {"qk_layernorm": True}, "qk_layernorm True"),
    ("phi", {"partial_rotary_factor": 1.5}, "partial_rotary_factor 1.5"),
    ("gptj", {"rotary_dim": 65}, "rotary_dim 65 must be even"),
    ("minicpm3", {"v_head_dim": 128}, "v_head_dim 128 is wider"),
])
def test_what_kvprof_does_not_read_is_refused_by_name(model_type, change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_config(model_type) | change, model_type)


@pytest.mark.parametrize("model_type", FAMILIES_HERE)
def test_no_value_however_odd_gives_a_traceback(model_type):
    d = _config(model_type)
    read_or_refuse(d | {k: v} for k in d for v in ODD_CONFIG_VALUES)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu"


@pytest.mark.parametrize("model, layers", [
    ("tiny-olmo3", [("sliding", 64, 3), ("full", None, 1)]),
    ("tiny-smollm3", [("full", None, 3), ("sliding", 64, 1)]),
    ("tiny-apertus", [("full", None, 4)]),
    ("tiny-mellum", [("sliding", 64, 3), ("full", None, 1)]),
    ("tiny-granite-swa", [("full", None, 1), ("sliding", 64, 3)]),
    ("tiny-opt", [("full", None, 4)]),
    ("tiny-phi", [("full", None, 4)]),
    ("tiny-stablelm", [("full", None, 4)]),
    ("tiny-gptj", [("full", None, 4)]),
    ("tiny-bloom", [("full", None, 4)]),
    ("tiny-falcon", [("full", None, 4)]),
    ("tiny-minicpm3", [("full", None, 4)]),  # MLA's projections, a full cache of every head
    ("tiny-hyperclovax", [("full", None, 4)]),
    ("tiny-hunyuan-moe", [("full", None, 4)]),
])
def test_the_tiny_engine_models_are_their_families(model, layers):
    a, _ = resolve_model(model)
    assert [(layer.kind, layer.window, n) for layer, n in a.attention_kinds] == layers
    raw = json.loads((Path(__file__).resolve().parents[3] / "analysis" / "catalog" / "models" / model /
                      "config.json").read_text())
    assert count_params(a).total == transformers_build(raw)[1]


@pytest.mark.parametrize("model_type, change, sinks, beyond_transformers", [
    # GraniteSWAConfig: every fourth layer full from the first; transformers and vLLM both build a sink a head
    ("granite_swa", {}, True, 0),
    ("granitemoe_swa", {"shared_intermediate_size": 256}, True, 0),
    ("granite_swa", {"layer_types": ["full_attention", "sliding_attention"] * 4}, True, 0),
    # plain Granite with layer_types: transformers' Granite builds no sinks, vLLM's granite_layer_attn_params assumes
    # them (8 layers × 4 heads) unless attention_sinks says no
    ("granite", {"layer_types": ["full_attention", "sliding_attention"] * 4, "sliding_window": 128}, True, 32),
    ("granite", {"layer_types": ["full_attention", "sliding_attention"] * 4, "sliding_window": 128,
                 "attention_sinks": False}, False, 0),
    ("granite", {}, False, 0),
])
def test_granite_sliding_layers_and_sinks(model_type, change, sinks, beyond_transformers):
    a, cfg, count = _architecture(_config(model_type, **change))
    assert a.attention_sinks is sinks
    kinds = _vllm_layer_types(cfg)
    assert list(a.layer_types) == list(kinds)
    assert count_params(a).total == count + beyond_transformers


def test_granite_layer_rope_theta():
    layers = ["full_attention", "sliding_attention"] * 4
    nope_full = Architecture.from_config(_config("granite_swa", layer_types=layers,
                                                 layer_rope_theta=[0, 10000.0] * 4), "granite_swa")
    assert nope_full.rotary_fraction == 1.0
    no_rope = Architecture.from_config(_config("granite_swa", layer_rope_theta=[0] * 8), "granite_swa")
    assert no_rope.rotary_fraction == 0
    with pytest.raises(UnsupportedArchitecture, match="2 RoPE bases"):
        Architecture.from_config(_config("granite_swa", layer_rope_theta=[10000.0, 50000.0] * 4), "granite_swa")
    with pytest.raises(UnsupportedArchitecture, match="layer_rope_theta must list"):
        Architecture.from_config(_config("granite_swa", layer_rope_theta=[10000.0] * 3), "granite_swa")


@pytest.mark.parametrize("model, cache_bytes", [
    # vLLM's own model files keep a cos/sin cache of max_position_embeddings × the rotary width × 2 bytes (bf16):
    # StableLM's RoPE covers partial_rotary_factor 0.25 of a 64-wide head (16), GPT-J's rotary_dim 16
    ("tiny-stablelm", 2048 * 16 * 2),
    ("tiny-gptj", 2048 * 16 * 2),
    ("tiny-phi", 0),  # the Transformers backend: transformers' rotary embedding keeps no cache
    ("tiny-bloom", 0),  # ALiBi: no rotation
])
def test_partial_rotary_caches_are_as_wide_as_the_rotation(model, cache_bytes):
    assert rotary_cache_bytes(resolve_model(model)[0]) == cache_bytes


def test_gpt_sw3_is_gpt2s_model_under_its_own_name():
    """GPT-SW3's config.json says model_type gpt-sw3 and architectures GPT2LMHeadModel: vLLM builds models/gpt2.py and
    transformers GPT2Config's model, learned positions and all."""
    d = dict(model_type="gpt-sw3", architectures=["GPT2LMHeadModel"], n_embd=256, n_layer=4, n_head=4,
             vocab_size=1024, n_positions=2048, bos_token_id=1, eos_token_id=2)
    a, _, count = _architecture(d)
    assert count_params(a).total == count == count_params(Architecture.from_config(d | {"model_type": "gpt2"})).total
    assert (a.num_kv_heads, a.head_dim, a.learned_position_embeddings) == (4, 64, 2048)
