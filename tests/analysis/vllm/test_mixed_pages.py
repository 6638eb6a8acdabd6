"""Attention layers whose pages differ (Gemma-4's sliding and global layers) get vLLM 0.32's unified page: the
smaller page's block holds more tokens (issue #47). Blocks and concurrency are held against vLLM's own allocator
(``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``, ``get_max_concurrency_for_kv_cache_config``) run on the
same layer specs on the CPU, and against the arithmetic written out for one case."""

import types

import pytest

from analysis.model.architecture import Architecture
from analysis.vllm.allocator import paged_capacity

GiB = 2**30


def _arch(layer_types: tuple[str, ...], kv: int, dim: int, full_kv: tuple[int, int], window: int) -> Architecture:
    return Architecture(name="mixed", num_layers=len(layer_types), hidden_size=2048, num_heads=16, num_kv_heads=kv,
                        head_dim=dim, vocab_size=1000, intermediate_size=4096, layer_types=layer_types,
                        sliding_window=window, full_attention_kv=full_kv)


def _vllm(a: Architecture, block: int, budget: int, max_model_len: int, batched: int) -> tuple[int, float]:
    import torch
    from vllm.config import CacheConfig
    from vllm.v1.attention.backends.utils import _DEFAULT_LAYOUT_PREFERENCE, resolve_kv_cache_layout
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(max_model_len=max_model_len), cache_config=CacheConfig(block_size=block),
        scheduler_config=types.SimpleNamespace(disable_hybrid_kv_cache_manager=False, max_model_len=max_model_len,
                                               max_num_batched_tokens=batched),
        attention_config=types.SimpleNamespace(hisparse_config=None), speculative_config=None,
        kv_transfer_config=None, max_in_flight_tokens=batched,  # one batch in flight: synchronous scheduling
        parallel_config=types.SimpleNamespace(
            decode_context_parallel_size=1, prefill_context_parallel_size=1, dcp_kv_cache_interleave_size=1,
            cp_kv_cache_interleave_size=1))
    specs = {}
    for i, t in enumerate(a.layer_types):
        if t == "sliding_attention":
            specs[f"layers.{i}"] = SlidingWindowSpec(block_size=block, num_kv_heads=a.num_kv_heads,
                                                     head_size=a.head_dim, dtype=torch.bfloat16,
                                                     sliding_window=a.sliding_window)
        else:
            kv, dim = a.full_attention_kv
            specs[f"layers.{i}"] = FullAttentionSpec(block_size=block, num_kv_heads=kv, head_size=dim,
                                                     dtype=torch.bfloat16)
    resolve_kv_cache_layout(config, [[layout.name for layout in _DEFAULT_LAYOUT_PREFERENCE]], specs.values())
    groups = kv_cache_utils.get_kv_cache_groups(config, specs)
    kv = kv_cache_utils.get_kv_cache_config_from_groups(config, groups, budget)
    return kv.num_blocks, kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, kv)


GEMMA4_26B = ("sliding_attention",) * 5 + ("full_attention",)  # 5:1, five times: 25 sliding and 5 global layers


@pytest.mark.parametrize("layer_types, kv, dim, full_kv, window, block, budget_gib, mml", [
    (GEMMA4_26B * 5, 8, 256, (2, 512), 1024, 16, 20, 262144),  # Gemma-4 26B-A4B: pages 2:1
    (GEMMA4_26B * 5, 8, 256, (2, 512), 1024, 32, 7.3, 100_000),
    (("sliding_attention", "full_attention") * 8, 4, 128, (2, 128), 512, 16, 3, 32768),  # pages 2:1, 1:1 layers
    (("full_attention",) + ("sliding_attention",) * 4, 8, 192, (4, 128), 128, 16, 5, 65536),  # 3:1, the global smaller
    (("sliding_attention",) * 3 + ("full_attention",), 4, 96, (2, 128), 256, 16, 2, 8192),  # 768 : 512, padded
    (("sliding_attention",) * 3 + ("full_attention",), 2, 128, (4, 128), 256, 16, 2, 8192),  # the global larger
])
def test_blocks_and_concurrency_are_vllms(layer_types, kv, dim, full_kv, window, block, budget_gib, mml):
    pytest.importorskip("vllm")
    a = _arch(layer_types, kv, dim, full_kv, window)
    budget = int(budget_gib * GiB)
    blocks, concurrency = _vllm(a, block, budget, mml, 8192)
    ours = paged_capacity(a, budget, block_size=block, max_model_len=mml, max_num_batched_tokens=8192)
    assert (ours.num_blocks, ours.max_concurrency) == (blocks, pytest.approx(concurrency, rel=1e-12))


def test_gemma4_26b_written_out():
    # Sliding layers: 2 × 8 × 256 × 2 B = 8,192 B a token; global: 2 × 2 × 512 × 2 B = 4,096 B. At block 16 the
    # sliding page is 131,072 B, the global 65,536 B: the global block doubles to 32 tokens. 25 sliding layers and 5
    # global make six groups of five; a block is 5 × 131,072 B. 20 GiB ÷ 655,360 = 32,768 blocks. A request holds
    # cdiv(1023 + 8192, 16) + 1 = 577 blocks of each sliding group and cdiv(262,144, 32) = 8,192 global ones.
    a = _arch(GEMMA4_26B * 5, 8, 256, (2, 512), 1024)
    cap = paged_capacity(a, 20 * GiB, block_size=16, max_model_len=262144, max_num_batched_tokens=8192)
    assert (cap.bytes_per_block, cap.num_blocks) == (655_360, 32_768)
    assert sorted((g.kind, g.block_size, g.blocks_per_request) for g in cap.groups) == \
        [("full", 32, 8192)] + [("sliding", 16, 577)] * 5
    assert cap.max_concurrency == 32_768 / (8192 + 5 * 577)
