"""Jamba (jamba): Mamba (v1) mixers with one attention layer in eight and experts on every other layer, read as vLLM's
models/jamba.py builds it (issue #47)."""

import json

import pytest
import torch
import transformers

from analysis.catalog import model_dir
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, rotary_cache_bytes


def _tiny() -> dict:
    return json.loads((model_dir("tiny-jamba") / "config.json").read_text())


def _transformers_count(config: transformers.JambaConfig) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(t.numel() for t in model.parameters())


def test_the_tiny_model_counts_what_transformers_builds():
    cfg = _tiny()
    plain = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    assert count_params(Architecture.from_config(cfg, "tiny-jamba")).total == _transformers_count(
        transformers.JambaConfig(**plain))


def test_jamba_v0_1_is_its_published_size():
    # ai21labs/Jamba-v0.1's config is transformers' JambaConfig defaults; AI21: 52B parameters, 12B active
    defaults = transformers.JambaConfig()
    cfg = {"model_type": "jamba"}  # every other key at its default, as kvprof's reader takes them
    p = count_params(Architecture.from_config(cfg, "Jamba-v0.1"))
    assert p.total == _transformers_count(defaults) == 51_570_323_328
    assert (p.total / 1e9, p.active / 1e9) == (pytest.approx(52, rel=0.01), pytest.approx(12, rel=0.01))


def test_its_mamba_layers_keep_a_mamba1_state_and_attention_no_rope():
    a = Architecture.from_config(_tiny(), "tiny-jamba")
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("mamba1", 7), ("full", 1)]
    assert [i for i in range(8) if a.is_moe_layer(i)] == [1, 3, 5, 7]
    assert rotary_cache_bytes(a) == 0
    # vLLM's MambaStateShapeCalculator.mamba1_state_shape: conv (3, 1024) (or its transpose), SSM (1024, 16)
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    conv, ssm = MambaStateShapeCalculator.mamba1_state_shape(tp_world_size=2, intermediate_size=1024, state_size=16,
                                                             conv_kernel=4)
    state = a.recurrent.state(2)
    assert state.state_bytes(tp=2) == (conv[0] * conv[1] + ssm[0] * ssm[1]) * 2 == (3 * 512 + 512 * 16) * 2


@pytest.mark.parametrize("change, message", [
    ({"attn_layer_offset": 9}, "attn_layer_offset must be an integer"),
    ({"attn_layer_period": 10, "attn_layer_offset": 9}, "both mamba and attention"),
    ({"sliding_window": 4096}, "sliding window"),
    ({"mamba_dt_rank": [32]}, "mamba_dt_rank is a list"),
])
def test_what_the_jamba_reader_does_not_model_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_tiny() | change, "tiny-jamba")
