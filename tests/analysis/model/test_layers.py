"""Attention-layer kinds (analysis.model.layers): each kind's formulas against numbers written out from the
model configs and vLLM's allocator source, and the sums over a model's layers that use them."""

from __future__ import annotations

import pytest

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_sequence
from analysis.model.layers import FullAttention, MultiHeadLatentAttention, SlidingWindowAttention
from analysis.model.roofline import attention_flops_per_token, crossover_context
from analysis.vllm.allocator import paged_capacity


def test_full_attention_caches_k_and_v_of_each_kv_head_on_a_rank():
    llama8b = FullAttention(num_heads=32, num_kv_heads=8, head_dim=128)  # Llama-3.1-8B's config.json
    assert llama8b.kv_elements_per_token() == 2 * 8 * 128 == 2048
    assert llama8b.kv_elements_per_token(tp=8) == 2 * 1 * 128
    assert llama8b.kv_elements_per_token(tp=16) == 2 * 1 * 128  # one head per rank, replicated on two ranks
    with pytest.raises(ValueError, match="cannot be split evenly"):
        llama8b.kv_elements_per_token(tp=3)
    assert llama8b.tokens_held(100_000) == 100_000 and llama8b.window is None
    # FullAttentionManager: every token of the longest request, cdiv(8192, 16) = 512 blocks
    assert llama8b.blocks_per_request(16, 8192, 2048) == 512
    assert llama8b.attention_flops(1000) == 1000 * 4 * 32 * 128


def test_a_sliding_window_keeps_its_window_and_reserves_it_plus_the_tokens_in_flight():
    w = SlidingWindowAttention(num_heads=8, num_kv_heads=4, head_dim=256, window_size=4096)  # Gemma-2-9B's window
    assert w.tokens_held(1000) == 1000 and w.tokens_held(10_000) == 4096
    # SlidingWindowManager: cdiv(min(4096 - 1 + 2048, 8192), 16) + 1 = cdiv(6143, 16) + 1 = 384 + 1
    assert w.blocks_per_request(16, 8192, 2048) == 385
    # a window longer than the request: the request's own length bounds it, cdiv(1024, 16) + 1
    assert w.blocks_per_request(16, 1024, 2048) == 65
    assert w.attention_flops(10_000) == 4096 * 4 * 8 * 256
    assert w.as_full() == FullAttention(num_heads=8, num_kv_heads=4, head_dim=256)


def test_mla_caches_one_latent_and_the_rope_key_replicated_on_every_rank():
    v3 = MultiHeadLatentAttention(num_heads=128, kv_lora_rank=512, qk_rope_head_dim=64)  # DeepSeek-V3's config.json
    assert v3.kv_elements_per_token() == v3.kv_elements_per_token(tp=8) == 512 + 64
    assert v3.attention_flops(10) == 10 * 2 * 128 * (2 * 512 + 64)
    assert v3.as_full() is v3


def test_a_model_gives_each_layer_its_kind_and_the_sums_follow():
    a, _ = resolve_model("gemma-2-9b")  # 42 layers alternating sliding (4,096) and full, starting sliding
    kinds = dict((layer.kind, n) for layer, n in a.attention_kinds)
    assert kinds == {"sliding": 21, "full": 21}
    assert a.attention_layers[0].kind == "sliding" and a.attention_layers[1].kind == "full"
    per_token = 2 * 8 * 256 * 2  # 8 KV heads of 256, K and V, bf16 (its config.json says float32)
    assert kv_bytes_per_sequence(a, 10_000, "bfloat16") == (21 * 10_000 + 21 * 4096) * per_token
    assert attention_flops_per_token(a, 10_000) == (21 * 10_000 + 21 * 4096) * 4 * 16 * 256


def test_the_crossover_is_solved_past_the_window_on_the_layers_still_growing():
    # Two layers of one KV head of 64 in fp16 (256 B per token each), one with a window of 100 tokens.
    a = Architecture(num_layers=2, hidden_size=64, num_heads=1, num_kv_heads=1, head_dim=64, vocab_size=0,
                     intermediate_size=0, torch_dtype="float16", sliding_window=100,
                     layer_types=("sliding_attention", "full_attention"))
    # weights of 300 tokens' KV of one layer: 2 × 256 B a token until the window is full (100 tokens, 51,200 B),
    # then 256 B a token: 51,200 + 256 × (t − 100) = 76,800 → t = 200
    assert crossover_context(a, weight_bytes=300 * 256) == pytest.approx(200)
    assert crossover_context(a, weight_bytes=100 * 256) == pytest.approx(50)  # before the window fills: 2 × 256 B
    only_windows = a.model_copy(update={"layer_types": ("sliding_attention",) * 2})
    assert crossover_context(only_windows, weight_bytes=300 * 256) is None  # the read stops growing at 100 tokens


def test_the_allocator_groups_layers_by_kind_and_without_the_hybrid_manager_windows_allocate_like_full_ones():
    a, _ = resolve_model("gemma-2-9b")
    cap = paged_capacity(a, 2**30, block_size=16, max_model_len=8192, max_num_batched_tokens=2048)
    assert sorted(g.kind for g in cap.groups) == ["full", "sliding"]
    assert {g.kind: g.blocks_per_request for g in cap.groups} == {"full": 512, "sliding": 385}
    off = paged_capacity(a, 2**30, block_size=16, max_model_len=8192, max_num_batched_tokens=2048,
                         hybrid_manager=False)
    assert [(g.kind, len(g.layers), g.blocks_per_request) for g in off.groups] == [("full", 42, 512)]
