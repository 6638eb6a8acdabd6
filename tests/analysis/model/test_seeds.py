"""Every worked number in ../shared/seeds/, reproduced by analysis (exact where the seed is exact)."""

import pytest

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture
from analysis.model.kv import (
    ideal_capacity,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    mha_reduction,
)
from analysis.model.params import weight_bytes
from analysis.model.roofline import crossover_context, decode_step, ridge_point

GiB, GB, MB = 2**30, 1e9, 1e6


def dense(L, d, heads, kv_heads=None, window=None, dtype="float16"):
    """The seeds' idealised decoder: 12·d² parameters per layer, no embeddings, no norms."""
    kv_heads = kv_heads or heads
    return Architecture(
        name=f"L{L}-d{d}", num_layers=L, hidden_size=d, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=d // heads, vocab_size=0, intermediate_size=4 * d, mlp_gated=False,
        norms_per_layer=0, torch_dtype=dtype, sliding_window=window,
        layer_types=("sliding_attention",) * L if window else (),
    )


RUNNING = dense(12, 512, 8)  # seed 004's running model


# -- seed 000: bytes per token, layers, batch ceiling --------------------------------
def test_llama7b_shape_is_512_kib_per_token_and_2_gib_at_4096():
    m = dense(32, 4096, 32)
    assert kv_bytes_per_token(m) == 524_288
    assert kv_bytes_per_sequence(m, 4096) == 2 * GiB
    # "At 32 concurrent sequences of that length the cache alone needs 64 GiB."
    assert 32 * kv_bytes_per_sequence(m, 4096) == 64 * GiB


def test_cache_overtakes_13_gib_of_weights_near_27000_tokens():
    m = dense(32, 4096, 32)
    t = crossover_context(m, weight_bytes=13 * GiB)
    assert t == 26_624  # 13 GiB / 512 KiB; the seed rounds to "roughly 27,000"


# -- seed 001: the 70B table and the GQA decode bound ---------------------------------
@pytest.mark.parametrize(
    "context, mha_gb, gqa_gb",
    [(2048, 5.4, 0.67), (8192, 21.5, 2.7), (32768, 85.9, 10.7), (131072, 343.6, 42.9)],
)
def test_70b_table(context, mha_gb, gqa_gb):
    mha, gqa = dense(80, 8192, 64), dense(80, 8192, 64, kv_heads=8)
    assert round(kv_bytes_per_sequence(mha, context) / GB, 1) == mha_gb
    digits = 2 if gqa_gb < 1 else 1
    assert round(kv_bytes_per_sequence(gqa, context) / GB, digits) == gqa_gb
    assert kv_bytes_per_sequence(mha, context) == 8 * kv_bytes_per_sequence(gqa, context)


def test_gqa_70b_at_32k_on_3_tbs_is_about_50_ms_per_token():
    gqa = dense(80, 8192, 64, kv_heads=8)
    step = decode_step(gqa, batch=1, context=32768, bandwidth_Bps=3e12, peak_flops=989e12,
                       weight_bytes=140 * GB)
    assert step.kv_bytes / GB == pytest.approx(10.7, abs=0.05)
    assert step.time_s == pytest.approx(0.050, rel=0.01)
    assert step.bound == "memory"
    # The real Llama-2-70B config (embeddings, SwiGLU) lands in the same place.
    llama70, _ = resolve_model("llama-2-70b")
    real = decode_step(llama70, batch=1, context=32768, bandwidth_Bps=3e12, peak_flops=989e12)
    assert real.time_s == pytest.approx(0.050, rel=0.02)


# -- seed 004: the running model -------------------------------------------------------
def test_running_model_24_kib_per_token_96_mib_at_4096():
    assert kv_bytes_per_token(RUNNING) == 24_576
    assert kv_bytes_per_sequence(RUNNING, 4096) == 100_663_296  # "96 MB"
    assert kv_bytes_per_sequence(RUNNING, 512) == 12_582_912


def test_running_model_weights_and_crossover_at_6_d_model():
    assert weight_bytes(RUNNING) == 75_497_472  # 24·L·d²
    assert crossover_context(RUNNING) == 3072 == 6 * 512
    # KV/weights ratio at 4096 = t / (6·d) = 1.33
    assert kv_bytes_per_sequence(RUNNING, 4096) / weight_bytes(RUNNING) == pytest.approx(4096 / 3072)


def test_running_model_decode_step_on_2_tbs():
    # The seed rounds the weights to 72 MB (72e6 B): 86.3 µs at 4,096, 1.61 ms at 128,000.
    s1 = decode_step(RUNNING, batch=1, context=4096, bandwidth_Bps=2e12, peak_flops=312e12,
                     weight_bytes=72e6)
    assert s1.bytes == 172_663_296
    assert round(s1.time_s * 1e6, 1) == 86.3
    s2 = decode_step(RUNNING, batch=1, context=128_000, bandwidth_Bps=2e12, peak_flops=312e12,
                     weight_bytes=72e6)
    assert round(s2.time_s * 1e3, 2) == 1.61
    # With the exact 75,497,472 weight bytes the step is 88.08 µs.
    exact = decode_step(RUNNING, batch=1, context=4096, bandwidth_Bps=2e12, peak_flops=312e12)
    assert exact.time_s == pytest.approx(176_160_768 / 2e12)
    # KV read alone: 48 µs at 4,096 and ~1.5 ms at 128,000.
    assert s1.kv_bytes / 2e12 == pytest.approx(50.3e-6, rel=0.01)  # 100.66 MB / 2 TB/s
    assert s2.kv_bytes / 2e12 == pytest.approx(1.57e-3, rel=0.01)


def test_ridge_point_and_unit_intensity():
    assert ridge_point(312e12, 2e12) == 156
    # A batch-1 decode step is a stack of matrix-vector products: ≈ 1 FLOP per byte.
    s = decode_step(RUNNING, batch=1, context=1, bandwidth_Bps=2e12, peak_flops=312e12)
    assert s.arithmetic_intensity == pytest.approx(1.0, rel=0.01)
    assert s.bound == "memory"
    # The memory/compute time ratio equals the ridge point / intensity (~150).
    assert s.memory_s / s.compute_s == pytest.approx(156, rel=0.02)


def test_batching_amortises_weights_not_kv():
    one = decode_step(RUNNING, batch=1, context=4096, bandwidth_Bps=2e12, peak_flops=312e12)
    many = decode_step(RUNNING, batch=8, context=4096, bandwidth_Bps=2e12, peak_flops=312e12)
    assert many.weight_bytes == one.weight_bytes
    assert many.kv_bytes == 8 * one.kv_bytes
    assert crossover_context(RUNNING, batch=8) == 3072 / 8


def test_memory_wall_625_requests_at_4k_and_20_at_128k():
    budget = 60_000 * 2**20  # "~60 GB available for KV caches" (MB = MiB in the seed)
    assert ideal_capacity(RUNNING, budget, 4096).max_concurrency == 625
    assert ideal_capacity(RUNNING, budget, 128_000).max_concurrency == 20


def test_156_sequences_of_4k_need_15_gb():
    assert 156 * kv_bytes_per_sequence(RUNNING, 4096) / 2**20 == 14_976  # "≈ 15 GB"


@pytest.mark.parametrize("g, per_token, factor", [(1, 3072, 8), (2, 6144, 4), (8, 24_576, 1)])
def test_mqa_gqa_reduction_is_h_over_g(g, per_token, factor):
    m = dense(12, 512, 8, kv_heads=g)
    assert kv_bytes_per_token(m) == per_token
    assert mha_reduction(m) == factor == 8 / g


def test_gqa_plus_window_composes_to_1000x():
    windowed = dense(12, 512, 8, kv_heads=2, window=512)
    assert kv_bytes_per_sequence(windowed, 128_000) == 3_145_728  # fixed 3 MB
    assert kv_bytes_per_sequence(RUNNING, 128_000) / kv_bytes_per_sequence(windowed, 128_000) == 1000


@pytest.mark.parametrize(
    "L, d, per_token",
    [(36, 1280, 184_320), (32, 4096, 524_288), (80, 8192, 2_621_440), (96, 12_288, 4_718_592)],
)
def test_4_L_d_bytes_per_token_for_the_seed_table(L, d, per_token):
    """GPT-2 Large, LLaMA-7B, LLaMA-65B, GPT-3 175B: 4·L·d bytes per token."""
    assert kv_bytes_per_token(dense(L, d, d // 128 if d % 128 == 0 else 20)) == per_token == 4 * L * d
