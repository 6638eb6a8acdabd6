"""A config.json kvprof does not fully understand is refused by name, never planned as something else, and no
config.json, however odd, gives a traceback (issue #47)."""

import json

import pytest

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.config_keys import FAMILIES


def _catalog_config(name: str) -> dict:
    return json.loads((resolve_model(name)[1] / "config.json").read_text())


@pytest.mark.parametrize("model, key, value", [
    # Llama 4 Maverick interleaves dense and MoE layers: read as a Llama, every layer would be planned as MoE
    ("llama-3.1-8b", "interleave_moe_layer_step", 2),
    # Llama 4's chunked local attention: each layer's KV would be planned as full attention
    ("llama-3.1-8b", "attention_chunk_size", 8192),
    # DeepSeek-V3.2's sparse-attention indexer keeps a cache of its own
    ("deepseek-v3", "index_topk", 2048),
    ("deepseek-v3", "index_head_dim", 128),
    # Nemotron-H's layer pattern of Mamba2, attention and MLP layers
    ("mistral-7b-v0.1", "hybrid_override_pattern", "M-M*"),
])
def test_a_key_that_changes_the_model_and_is_not_read_is_refused_by_name(model, key, value):
    cfg = _catalog_config(model) | {key: value}
    with pytest.raises(UnsupportedArchitecture, match=f"key {key} is not read by kvprof's .* reader"):
        Architecture.from_config(cfg, model)


@pytest.mark.parametrize("model_type", ["gemma3n", "kimi_k3", "minimax_m3", "bamba", "plamo3", "t5gemma", ""])
def test_a_family_without_a_reader_is_refused_by_name(model_type):
    cfg = _catalog_config("llama-3.1-8b") | {"model_type": model_type}
    with pytest.raises(UnsupportedArchitecture, match=f"model_type '{model_type or 'custom'}' has no reader"):
        Architecture.from_config(cfg)


def test_a_value_of_another_type_than_published_is_refused_naming_the_key():
    # MiMo-V2-Flash writes moe_layer_freq as one 0/1 a layer, where DeepSeek's configs have an integer: the reading
    # compared the list with 1 (TypeError: '>' not supported between instances of 'list' and 'int')
    cfg = _catalog_config("deepseek-v3") | {"moe_layer_freq": [0] + [1] * 60}
    with pytest.raises(UnsupportedArchitecture, match="moe_layer_freq is a list, not an integer"):
        Architecture.from_config(cfg)
    cfg = _catalog_config("qwen3-30b-a3b") | {"decoder_sparse_step": 1.5}
    with pytest.raises(UnsupportedArchitecture, match="decoder_sparse_step is a number, not an integer"):
        Architecture.from_config(cfg)


def test_every_catalog_family_has_a_reader():
    for name in ("llama-3.1-8b", "gemma-3-27b", "qwen3-vl-30b-a3b", "dbrx", "gpt-oss-120b", "deepseek-v3"):
        raw = _catalog_config(name)
        assert raw["model_type"] in FAMILIES
        Architecture.from_config(raw, name)


ODD_VALUES = [None, -1, 0, 0.5, 1e30, True, "x", [], [1, "a"], {}, {"a": [None]}]


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma-3-27b", "gpt-oss-20b",
                                   "dbrx", "qwen2.5-vl-7b", "nemotron-3-nano-30b-a3b", "qwen3-next-80b-a3b-thinking",
                                   "qwen3.5-35b-a3b", "tiny-granite-4-h", "tiny-falcon-h1", "tiny-jamba",
                                   "tiny-lfm2", "minimax-m2.5", "glm-5", "kimi-k2.5", "tiny-nemotron-nas",
                                   "gemma-4-26b-a4b", "tiny-gemma4", "tiny-mimo-v2", "tiny-lfm2-moe",
                                   "tiny-glm4-moe", "tiny-mamba2", "falcon-mamba-7b",
                                   "tiny-cohere2", "tiny-exaone4", "tiny-olmo-hybrid",
                                   "tiny-zamba2", "tiny-falcon-mamba"])
def test_no_config_value_however_odd_gives_a_traceback(model):
    """Every key of a published config, set to each odd value in turn: the config is read or refused with an
    UnsupportedArchitecture; any other exception is a traceback for the user."""
    base = _catalog_config(model)
    text = base.get("text_config") or {}
    variants = [(key, value, base | {key: value}) for key in base for value in ODD_VALUES]
    variants += [(f"text_config.{key}", value, base | {"text_config": text | {key: value}})
                 for key in text for value in ODD_VALUES]
    for key, value, cfg in variants:
        try:
            Architecture.from_config(cfg, model)
        except UnsupportedArchitecture:
            pass
        except Exception as exc:  # the assertion: nothing else escapes
            pytest.fail(f"{model}: {key}={value!r} raised {type(exc).__name__}: {exc}")


def test_each_family_counts_its_moe_layers_as_its_vllm_model_file_does():
    # deepseek_v2.py: a MoE layer where i >= first_k_dense_replace and i % moe_layer_freq == 0;
    # qwen3_moe.py: where (i + 1) % decoder_sparse_step == 0. Six layers, every second one MoE.
    deepseek = _catalog_config("deepseek-v2-lite") | {"num_hidden_layers": 6, "first_k_dense_replace": 1,
                                                      "moe_layer_freq": 2}
    assert Architecture.from_config(deepseek).moe.dense_layers == (0, 1, 3, 5)
    qwen = _catalog_config("qwen3-30b-a3b") | {"num_hidden_layers": 6, "decoder_sparse_step": 2}
    assert Architecture.from_config(qwen).moe.dense_layers == (0, 2, 4)
