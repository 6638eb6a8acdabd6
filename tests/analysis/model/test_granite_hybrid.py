"""Granite-4.0-H (granitemoehybrid): Mamba2 or attention mixers with experts and a shared MLP on every layer, read as
vLLM's models/granitemoehybrid.py builds it (issue #47)."""

import json

import pytest
import torch
import transformers

from analysis.catalog import model_dir
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, rotary_cache_bytes


def _tiny() -> dict:
    return json.loads((model_dir("tiny-granite-4-h") / "config.json").read_text())


def _transformers_count(cfg: dict) -> int:
    """transformers' own GraniteMoeHybridForCausalLM built from the config on the meta device: its parameters."""
    config = transformers.GraniteMoeHybridConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


# ibm-granite/granite-4.0-h-small's config.json as published (its fields that shape a weight; the rest are
# transformers' defaults): 36 Mamba2 and 4 attention layers, 72 experts (10 a token) and a shared MLP on each.
H_SMALL = {"model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 40, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_local_experts": 72, "num_experts_per_tok": 10,
           "shared_intermediate_size": 1536, "intermediate_size": 768, "mamba_d_state": 128, "mamba_d_conv": 4,
           "mamba_expand": 2, "tie_word_embeddings": True, "vocab_size": 100352, "torch_dtype": "bfloat16",
           "layer_types": ["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9
           + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4}


def test_the_tiny_model_counts_what_transformers_builds():
    cfg = _tiny()
    assert count_params(Architecture.from_config(cfg, "tiny-granite-4-h")).total == _transformers_count(cfg) \
        == 144_552_080


def test_granite_4_h_small_is_its_published_size():
    # IBM's card: "32B total parameters, 9B active"
    p = count_params(Architecture.from_config(H_SMALL, "granite-4.0-h-small"))
    assert p.total == _transformers_count(H_SMALL)
    assert p.total / 1e9 == pytest.approx(32, rel=0.01)
    assert round(p.active / 1e9) == 9


def test_its_layers_keep_a_mamba2_state_and_attention_without_rope():
    a = Architecture.from_config(H_SMALL, "granite-4.0-h-small")
    assert a.num_attention_layers == 4 and a.num_recurrent_layers == 36
    assert all(a.is_moe_layer(i) for i in range(40))  # experts on every layer, whichever its mixer
    assert rotary_cache_bytes(a) == 0  # position_embedding_type absent: vLLM builds no rotary embedding
    # vLLM's MambaStateShapeCalculator.mamba2_state_shape for the same mixer: conv (3, 8192 + 2·128) and
    # SSM (128 heads, 64, 128), the SSM state in the model dtype (no float32 override for this family)
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    conv, ssm = MambaStateShapeCalculator.mamba2_state_shape(
        tp_world_size=1, intermediate_size=8192, n_groups=1, num_heads=128, head_dim=64, state_size=128,
        conv_kernel=4)
    state = a.recurrent.state(a.weight_dtype_bytes)
    assert state.state_bytes() == (conv[0] * conv[1] + ssm[0] * ssm[1] * ssm[2]) * 2 == 2_147_840


@pytest.mark.parametrize("change, message", [
    ({"layer_types": None}, "needs layer_types"),
    ({"layer_types": ["mamba"] * 8}, "both mamba and attention"),
    ({"mamba_d_head": 64}, "mamba_expand × hidden_size"),
    ({"position_embedding_type": "alibi"}, "position_embedding_type 'alibi'"),
    ({"mamba_dt_rank": 16}, "key mamba_dt_rank is not read"),
])
def test_what_the_granite_reader_does_not_model_is_refused_by_name(change, message):
    cfg = {k: v for k, v in (_tiny() | change).items() if v is not None}
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(cfg, "tiny-granite-4-h")
