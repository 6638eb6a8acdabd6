"""DeepSeek-V4's caches of several page sizes, packed block-outermost as vLLM 0.32 packs them (issue #47). Blocks and
concurrency are held against vLLM's own allocator (``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``,
``get_max_concurrency_for_kv_cache_config``) run on the specs its DeepSeek-V4 layers build (``DeepseekV4SWACache``,
``DeepseekV4Attention``, ``CompressorStateCache``, ``DeepseekV4IndexerCache``: the constructors below are theirs, with
the fp8_ds_mla layout), on the published Flash and Pro layouts; and against the arithmetic written out for one
case. The real engine (tests/engines/test_vllm_capacity.py, tiny-deepseek-v4) gives the same."""

import types
from pathlib import Path

import pytest

from analysis.model.architecture import Architecture
from analysis.vllm.allocator import paged_capacity

GiB = 2**30
CONFIGS = Path(__file__).parents[2] / "fixtures" / "published_configs"


def _vllm_specs(a: Architecture, block: int) -> dict:
    """The specs vLLM 0.32's DeepSeek-V4 layers return under its fp8_ds_mla cache, in their registration order."""
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec

    c = a.compressed_attention
    specs = {}
    for i, r in enumerate(c.compress_ratios):
        p = f"model.layers.{i}.attn"
        if r == 4:  # DeepseekV4Indexer: its key cache and its compressor's state
            specs[f"{p}.indexer.k_cache"] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=c.index_head_dim + 4, dtype=torch.uint8,
                tokens_per_state=4, alignment=576)
            specs[f"{p}.indexer.compressor.state_cache"] = SlidingWindowMLASpec(
                block_size=4, num_kv_heads=1, max_tp_shards=1, head_size=2 * 2 * c.index_head_dim,
                dtype=torch.float32, sliding_window=8, alignment=576)
        specs[f"{p}.swa_cache"] = SlidingWindowMLASpec(
            block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=c.head_dim, dtype=torch.uint8,
            sliding_window=c.window, cache_dtype_str="fp8_ds_mla", state_content_bytes=584, alignment=576,
            model_version="deepseek_v4")
        if r > 1:
            specs[p] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=c.head_dim, dtype=torch.uint8,
                tokens_per_state=r, cache_dtype_str="fp8_ds_mla", alignment=576, model_version="deepseek_v4",
                state_content_bytes=584)
            coff = 2 if r == 4 else 1
            specs[f"{p}.compressor.state_cache"] = SlidingWindowMLASpec(
                block_size=4 if r == 4 else 8, num_kv_heads=1, max_tp_shards=1, head_size=2 * coff * c.head_dim,
                dtype=torch.float32, sliding_window=coff * r, alignment=576)
    return specs


def _vllm(a: Architecture, block: int, budget: int, max_model_len: int, in_flight: int) -> tuple[int, float]:
    from vllm.config import CacheConfig
    from vllm.v1.core import kv_cache_utils

    cache = CacheConfig(block_size=block)
    cache.kv_cache_layout = "BLHNC"  # what DeepSeek-V4's backends declare (the CPU engine logs it)
    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(max_model_len=max_model_len, hf_config=types.SimpleNamespace(
            model_type="deepseek_v4")), cache_config=cache,
        scheduler_config=types.SimpleNamespace(disable_hybrid_kv_cache_manager=False, max_model_len=max_model_len,
                                               max_num_batched_tokens=in_flight),
        attention_config=types.SimpleNamespace(hisparse_config=None), speculative_config=None,
        kv_transfer_config=None, max_in_flight_tokens=in_flight,
        parallel_config=types.SimpleNamespace(
            decode_context_parallel_size=1, prefill_context_parallel_size=1, dcp_kv_cache_interleave_size=1,
            cp_kv_cache_interleave_size=1))
    specs = _vllm_specs(a, block)
    groups = kv_cache_utils.get_kv_cache_groups(config, specs)
    kv = kv_cache_utils.get_kv_cache_config_from_groups(config, groups, budget)
    return kv.num_blocks, kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, kv)


@pytest.mark.parametrize("model", ["deepseek-ai--DeepSeek-V4-Flash", "deepseek-ai--DeepSeek-V4-Pro"])
@pytest.mark.parametrize("budget_gib, mml, in_flight", [
    (40, 1_048_576, 8192), (40, 1_048_576, 16384), (7.5, 131_072, 2048), (120, 262_144, 4096), (1, 8192, 8192),
])
def test_blocks_and_concurrency_are_vllms(model, budget_gib, mml, in_flight):
    pytest.importorskip("vllm")
    a = Architecture.from_config(CONFIGS / model)
    budget = int(budget_gib * GiB)
    blocks, concurrency = _vllm(a, 256, budget, mml, in_flight)
    ours = paged_capacity(a, budget, block_size=256, max_model_len=mml, max_num_batched_tokens=in_flight)
    assert (ours.num_blocks, ours.max_concurrency) == (blocks, pytest.approx(concurrency, rel=1e-12))


def test_flash_written_out():
    # DeepSeek-V4-Flash: 43 layers; 21 compress by 4 (layers 2, 4 … 42), 20 by 128, 2 keep the window alone.
    # Pages (each padded to a multiple of 576 B): the window's 64 rows × 584 B = 37,376 → 37,440; a ÷4 block of 256
    # tokens holds 64 rows → 37,440; a ÷128 block 2 rows = 1,168 → 1,728; indexer keys 64 × 132 = 8,448 → 8,640; the
    # ÷4 compressor's state 4 × 2,048 floats = 32,768 → 32,832, the indexer compressor's 4 × 512 floats → 8,640, the
    # ÷128 compressor's 8 × 1,024 floats → 32,832.
    # Buckets: 43 windows (one page, balanced); the every-token caches (21, 20 and 21 of three pages: unbalanced,
    # one group); the ÷4 states (21 and 21: balanced, two pages: 21 repeats at least); the ÷128 states (20).
    # vLLM's _approximate_gcd of 43, 21 and 20 from 21: 22 pads least (1 + 1 + 2), so the windows split in two
    # groups of 22 and 21. The widest group is the every-token one: 21 × 37,440 + 20 × 1,728 + 21 × 8,640 =
    # 1,002,240 B a block. 42,949,672,960 B (40 GiB) ÷ 1,002,240 = 42,853 blocks.
    # A 1,048,576-token request with 8,192 tokens in flight: each window group cdiv(127 + 8,192, 64) + 1 = 131,
    # the every-token group 1,048,576 ÷ 256 = 4,096, the ÷4 states cdiv(7 + 8,192, 4) + 1 = 2,051, the ÷128 states
    # cdiv(127 + 8,192, 8) + 1 = 1,041: 7,450 blocks. 42,853 ÷ 7,450 = 5.752.
    a = Architecture.from_config(CONFIGS / "deepseek-ai--DeepSeek-V4-Flash")
    cap = paged_capacity(a, 40 * GiB, block_size=256, max_model_len=1_048_576, max_num_batched_tokens=8192)
    assert cap.bytes_per_block == 1_002_240
    assert cap.num_blocks == 42_853
    assert sorted(g.blocks_per_request for g in cap.groups) == [131, 131, 1041, 2051, 4096]
    assert cap.max_concurrency == pytest.approx(42_853 / 7_450)
