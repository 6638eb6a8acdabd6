"""LFM2 (lfm2): gated short convolutions beside GQA attention, read as vLLM's models/lfm2.py builds it (issue #47)."""

import json
import re

import pytest
import torch
import transformers

from analysis.catalog import model_dir, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params


def _tiny() -> dict:
    return json.loads((model_dir("tiny-lfm2") / "config.json").read_text())


def test_the_tiny_model_counts_what_transformers_builds():
    cfg = _tiny()
    plain = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "block_dim", "conv_dim",
                                                       "conv_dim_out")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.Lfm2Config(**plain))
    assert count_params(Architecture.from_config(cfg, "tiny-lfm2")).total == sum(
        t.numel() for t in model.parameters()) == 57_946_880


def test_the_mlp_is_narrowed_as_vllm_does_and_a_conv_layer_keeps_its_last_taps():
    a = Architecture.from_config(_tiny(), "tiny-lfm2")
    assert a.intermediate_size == 256 * -(-int(2 * 3072 / 3) // 256) == 2048  # Lfm2MLP's auto_adjust_ff_dim
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("short_conv", 4), ("full", 2)]
    # vLLM's MambaStateShapeCalculator.short_conv_state_shape: (conv_L_cache - 1) rows of the width, model dtype
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    (conv,) = MambaStateShapeCalculator.short_conv_state_shape(tp_world_size=2, intermediate_size=512, conv_kernel=3)
    assert a.recurrent.state(2).state_bytes(tp=2) == conv[0] * conv[1] * 2 == 2 * 256 * 2


@pytest.mark.parametrize("change, message", [
    ({"block_dim": 1024}, "block_dim 1024 differs"),
    ({"layer_types": ["conv"] * 6}, "both conv and attention"),
    ({"layer_types": ["conv", "mamba"] * 3}, "needs layer_types"),
])
def test_what_the_lfm2_reader_does_not_model_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_tiny() | change, "tiny-lfm2")


def test_lfm2_moe_parameters_are_transformers_count_plus_the_score_biases():
    """tiny-lfm2-moe: transformers' Lfm2MoeForCausalLM on the meta device counts 6,240,640 parameters; its routers'
    score biases (eight on each of the four MoE layers) are buffers there and parameters in vLLM's lfm2_moe.py."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.lfm2_moe.modeling_lfm2_moe")
    from transformers.models.lfm2_moe.configuration_lfm2_moe import Lfm2MoeConfig

    a, path = resolve_model("tiny-lfm2-moe")
    raw = {k: v for k, v in json.loads((path / "config.json").read_text()).items() if k != "model_type"}
    with torch.device("meta"):
        model = modeling.Lfm2MoeForCausalLM(Lfm2MoeConfig(**raw))
    assert sum(p.numel() for p in model.parameters()) == 6_240_640
    assert count_params(a).total == 6_240_640 + 4 * 8
    assert a.moe.dense_layers == (0, 1) and a.intermediate_size == 768  # no two-thirds narrowing, unlike LFM2's MLP


@pytest.mark.parametrize("changes, message", [
    ({"layer_types": None}, "lfm2_moe needs layer_types"),
    ({"num_dense_layers": 7}, "num_dense_layers must be 0 to 6"),
    ({"layer_types": ["conv"] * 6}, "with both conv and attention layers"),
])
def test_lfm2_moe_what_is_not_modelled_is_refused_by_name(changes, message):
    _, path = resolve_model("tiny-lfm2-moe")
    raw = json.loads((path / "config.json").read_text()) | changes
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        Architecture.from_config(raw, "lfm2-moe")
