"""Llama 4 read as vLLM 0.32 builds it (issue #47): chunked local attention on its RoPE layers, full attention on the
NoPE layers, MoE every interleave_moe_layer_step-th layer with a shared expert, the dense layers' MLP of
intermediate_size_mlp. Expected values: arithmetic from vLLM's llama4.py and kv_cache_interface.py written out, and
the model cards."""

import json

import pytest
from published_configs import CONFIGS

from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params
from analysis.vllm.allocator import paged_capacity

SCOUT = CONFIGS / "meta-llama--Llama-4-Scout-17B-16E-Instruct"
MAVERICK = CONFIGS / "meta-llama--Llama-4-Maverick-17B-128E-Instruct"


def test_scout_and_maverick_are_their_published_sizes():
    scout, maverick = Architecture.from_config(SCOUT), Architecture.from_config(MAVERICK)
    # transformers' default no_rope_layers: every fourth layer NoPE (full attention), the rest chunked (8,192)
    assert [(layer.kind, n) for layer, n in scout.attention_kinds] == [("chunked", 36), ("full", 12)]
    assert sum(scout.is_moe_layer(i) for i in range(48)) == 48  # interleave_moe_layer_step 1
    assert [maverick.is_moe_layer(i) for i in range(4)] == [False, True, False, True]  # step 2: layers 1, 3, …
    h = 5120
    p = count_params(maverick)
    # a Maverick MoE layer: the router (128 × h), the shared expert and 128 gated experts of 8,192; a dense layer's MLP
    # of intermediate_size_mlp 16,384
    assert p.experts_total == 24 * 128 * 3 * h * 8192
    assert p.router_and_shared == 24 * (128 * h + 3 * h * 8192)
    assert p.dense_mlp == 24 * 3 * h * 16384
    # the cards: Maverick 400B, Scout 109B with its vision tower (0.87B, not in this vendored config: the
    # architecture says so) and 17B active each
    assert p.total / 400e9 == pytest.approx(1, abs=0.01)
    assert (count_params(scout).total + 0.87e9) / 109e9 == pytest.approx(1, abs=0.01)
    assert scout.encoder_note.startswith("Llama 4's vision tower")
    assert count_params(scout).active / 17e9 == pytest.approx(1, abs=0.02)


def test_a_chunked_layer_holds_one_chunk_and_the_tokens_in_flight():
    a = Architecture.from_config(SCOUT)
    # tp 8: 1 KV head of 128 a rank, 512 B a token in bf16; 12 full and 36 chunked layers: four groups of twelve
    cap = paged_capacity(a, 12 * 16 * 512 * 1000, block_size=16, max_model_len=131_072,
                         max_num_batched_tokens=8192, tp=8)
    assert [len(g.layers) for g in cap.groups] == [12, 12, 12, 12] and cap.num_blocks == 1000
    # full: cdiv(131,072, 16) = 8,192 blocks; chunked: cdiv(8,192 + 8,192, 16) = 1,024 each
    assert cap.blocks_per_request == 8192 + 3 * 1024
    # with the hybrid KV-cache manager off every layer allocates like full attention: one group of 48
    off = paged_capacity(a, 12 * 16 * 512 * 1000, block_size=16, max_model_len=131_072,
                         max_num_batched_tokens=8192, tp=8, hybrid_manager=False)
    assert (len(off.groups), off.blocks_per_request, off.num_blocks) == (1, 8192, 250)


@pytest.mark.parametrize("change, message", [
    ({"moe_layers": [0, 1]}, "vLLM's Llama 4 places its MoE layers"),
    ({"no_rope_layers": [1, 0]}, "no_rope_layers must be 48"),
    ({"attention_chunk_size": -1}, "attention_chunk_size must be a positive integer"),
    ({"intermediate_size_mlp": None}, "intermediate_size_mlp must be a positive integer"),
])
def test_what_the_llama4_reader_does_not_model_is_refused_by_name(change, message):
    cfg = json.loads((SCOUT / "config.json").read_text())
    cfg["text_config"] |= change
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(cfg)
