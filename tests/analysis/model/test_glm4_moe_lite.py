"""GLM-4.7-Flash (glm4_moe_lite): DeepSeek-V2's latent attention with GLM-4.5's experts, read as vLLM's
models/glm4_moe_lite.py builds it (issue #47)."""

import pytest
import transformers
from helpers import transformers_build

from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params

SMALL = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=64, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=4, vocab_size=1024, n_routed_experts=8, num_experts_per_tok=2,
             q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
             pad_token_id=0, eos_token_id=1, bos_token_id=2)


def _config(**change) -> dict:
    d = transformers.AutoConfig.for_model("glm4_moe_lite").to_dict() | SMALL
    d["mlp_layer_types"] = ["dense"] + ["sparse"] * 3
    d["first_k_dense_replace"] = 1  # as GLM-4.7-Flash's config.json has it beside mlp_layer_types
    return d | change


def test_parameters_are_transformers_count_plus_the_score_biases():
    # transformers keeps each MoE layer's e_score_correction_bias as a buffer; vLLM's Glm4MoE as a float32 parameter:
    # 8 experts on each of the 3 MoE layers
    d = _config()
    _, expected = transformers_build(d)
    a = Architecture.from_config(d, "glm4_moe_lite")
    assert count_params(a).total == expected + 3 * 8
    assert [a.is_moe_layer(i) for i in range(4)] == [False, True, True, True]
    # MLA: one latent of 32 and a rope key of 16 a token a layer, in bf16
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("mla", 4)]
    assert a.attention_layers[0].kv_bytes_per_token(1, 2) == (32 + 16) * 2


@pytest.mark.parametrize("change, message", [
    ({"first_k_dense_replace": None}, "no first_k_dense_replace"),
    ({"first_k_dense_replace": 2}, "mlp_layer_types disagrees"),
    ({"moe_layer_freq": 2}, "moe_layer_freq 2"),
    ({"first_k_dense_replace": 9, "mlp_layer_types": None}, r"first_k_dense_replace must be a layer count in \[0, 4\]"),
])
def test_what_vllm_builds_otherwise_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_config(**change), "glm4_moe_lite")


def test_no_value_however_odd_gives_a_traceback():
    from helpers import ODD_CONFIG_VALUES, read_or_refuse

    d = _config()
    read_or_refuse(d | {k: v} for k in d for v in ODD_CONFIG_VALUES)


def test_heads_that_do_not_divide_the_hidden_size_read_as_latent_attention():
    """transformers' Glm4MoeLiteConfig defaults (GLM-4.7-Flash's sizes: 20 heads over a hidden size of 2,048, no
    head_dim) were refused ("hidden_size 2048 is not divisible by 20 heads"): an MLA model's head width is
    qk_nope_head_dim + qk_rope_head_dim (192 + 64), not hidden ÷ heads."""
    d = transformers.AutoConfig.for_model("glm4_moe_lite").to_dict() | {"first_k_dense_replace": 1}
    a = Architecture.from_config(d, "glm4_moe_lite")
    _, expected = transformers_build(d)
    assert (a.num_heads, a.head_dim) == (20, 192 + 64)
    assert count_params(a).total == expected + 46 * 64  # the 46 MoE layers' float32 score biases (buffers there)
