"""Falcon-H1 (falcon_h1): attention and a Mamba2 mixer side by side in every layer, read as vLLM's
models/falcon_h1.py builds it (issue #47)."""

import json

import pytest
import torch
import transformers

from analysis.catalog import model_dir
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, weight_matrices


def _tiny() -> dict:
    return json.loads((model_dir("tiny-falcon-h1") / "config.json").read_text())


def test_the_tiny_model_counts_what_transformers_builds():
    cfg = _tiny()
    plain = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.FalconH1Config(**plain))
    assert count_params(Architecture.from_config(cfg, "tiny-falcon-h1")).total == sum(
        t.numel() for t in model.parameters()) == 29_169_952


def test_falcon_h1_tiny_90m_is_its_published_size():
    # the tiny model is Falcon-H1-Tiny-90M's sizes on 4 of its 24 layers; all 24: its name's 90M
    p = count_params(Architecture.from_config(_tiny() | {"num_hidden_layers": 24}, "Falcon-H1-Tiny-90M"))
    assert p.total / 1e6 == pytest.approx(90, rel=0.015)


def test_every_layer_keeps_a_kv_cache_and_a_mamba2_state():
    a = Architecture.from_config(_tiny(), "tiny-falcon-h1")
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("full", 4), ("mamba2", 4)]
    assert a.sublayers == 4 * 3  # attention's o_proj, the mixer's out_proj and the MLP's down_proj: an all-reduce each
    # vLLM's MambaStateShapeCalculator.mamba2_state_shape for its mixer: conv (3, 768 + 2·64), SSM (24, 32, 64)
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    conv, ssm = MambaStateShapeCalculator.mamba2_state_shape(
        tp_world_size=1, intermediate_size=768, n_groups=1, num_heads=24, head_dim=32, state_size=64, conv_kernel=4)
    state = a.recurrent.state(2)
    assert state.state_bytes() == (conv[0] * conv[1] + ssm[0] * ssm[1] * ssm[2]) * 2 == 3 * 896 * 2 + 49152 * 2
    names = {m.name for m in weight_matrices(a)}
    assert {"model.layers.0.mixer.in_proj", "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"} <= names


@pytest.mark.parametrize("change, message", [
    ({"mamba_d_head": 64}, "differs from the mixer's inner width"),
    ({"attn_layer_indices": [0, 2]}, "attention on every layer"),
    ({"attention_bias": True}, "attention_bias true"),
    ({"attn_rotary_emb": 128}, "attn_rotary_emb"),
])
def test_what_vllms_falcon_h1_does_not_build_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_tiny() | change, "tiny-falcon-h1")
