"""MiniMax-M2 (minimax_m2): full attention with per-layer q/k norms and partial RoPE, 256 experts on every layer, read
as vLLM's models/minimax_m2.py builds it (issue #47)."""

import json
from pathlib import Path

import pytest
import torch
import transformers

from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, rotary_cache_bytes

CONFIG = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs" / "MiniMaxAI--MiniMax-M2.5"


def _config() -> dict:
    return json.loads((CONFIG / "config.json").read_text())


def test_minimax_m2_5_counts_what_transformers_builds_and_its_card_says():
    cfg = _config()
    p = count_params(Architecture.from_config(cfg, "MiniMax-M2.5"))
    plain = {k: v for k, v in cfg.items() if k not in ("quantization_config", "auto_map", "model_type")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.MiniMaxM2Config(**plain))
    # transformers keeps the router's score-correction bias (256 a layer) as a buffer, vLLM as a parameter
    assert p.total == sum(t.numel() for t in model.parameters()) + 62 * 256
    # MiniMax: "230B total parameters with 10B active"; active here counts the embedding and lm_head (2 × 0.61B)
    assert p.total / 1e9 == pytest.approx(230, rel=0.01)
    assert (p.active - p.embedding - p.lm_head) / 1e9 == pytest.approx(10, rel=0.03)


def test_its_attention_caches_every_token_and_ropes_half_a_head():
    a = Architecture.from_config(_config(), "MiniMax-M2.5")
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("full", 62)]
    assert a.num_kv_heads == 8 and a.head_dim == 128
    assert rotary_cache_bytes(a) == 196608 * 64 * 2  # rotary_dim 64 of 128


@pytest.mark.parametrize("change, message", [
    ({"shared_intermediate_size": 1536}, "no shared expert"),
    ({"sliding_window": 4096}, "full attention on every layer"),
    ({"attn_type_list": [0] + [1] * 61}, "attn_type_list"),
    ({"qk_norm_type": "per_head"}, "per_layer"),
])
def test_what_vllms_minimax_m2_does_not_build_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_config() | change, "MiniMax-M2.5")
