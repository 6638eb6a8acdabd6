"""KV-cache bytes: the ideal arithmetic of the seed documents.

    per token, per full-cache layer = 2 · n_kv_heads · head_dim · s      (K and V)
    MLA layer                       = (kv_lora_rank + qk_rope_head_dim) · s
    sliding-window layer            holds at most `window` tokens per sequence

Tensor parallelism splits KV heads across ranks; a head is replicated when there
are fewer KV heads than ranks, and an MLA latent is replicated on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.model.architecture import Architecture, dtype_bytes

KV_DTYPES = ("auto", "bfloat16", "bf16", "float16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2")
# What vLLM 0.32's CacheDType accepts of these (exact, case-sensitive): a sweep passes one to vLLM.
VLLM_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
KV_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16"}
_FP8 = {"fp8", "fp8_e4m3", "fp8_e5m2"}


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str = "bfloat16") -> int:
    """Bytes per cached element; ``auto`` follows the model's dtype as vLLM does."""
    d = kv_cache_dtype.lower()
    if d not in KV_DTYPES:
        raise ValueError(f"kv cache dtype {kv_cache_dtype!r} is not one of {', '.join(KV_DTYPES)}")
    if d in _FP8:
        return 1
    if d == "auto":
        return dtype_bytes(model_dtype)
    return 2


def is_fp8(kv_cache_dtype: str) -> bool:
    return kv_cache_dtype.lower() in _FP8


def kv_heads_per_rank(a: Architecture, tp: int = 1) -> int:
    """KV heads one rank stores: vLLM 0.32's ``ModelConfig.get_num_kv_heads`` (vllm/config/model.py),
    max(1, n_kv // tp). Past n_kv ranks each head is replicated on tp // n_kv ranks, which must be whole
    (``QKVParallelLinear``: ``divide(tp, n_kv)``): 8 KV heads at tp 16 is one head per rank, on two ranks each."""
    if tp < 1:
        raise ValueError("tensor parallel size must be >= 1")
    if a.num_kv_heads >= tp and a.num_kv_heads % tp:
        raise ValueError(f"{a.num_kv_heads} KV heads cannot be split evenly over {tp} ranks")
    if a.num_kv_heads < tp and tp % a.num_kv_heads:
        raise ValueError(f"{tp} ranks cannot replicate {a.num_kv_heads} KV heads evenly")
    return max(1, a.num_kv_heads // tp)


def layer_kv_bytes_per_token(a: Architecture, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes one attention layer caches per token on one rank."""
    s = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    if a.mla:
        return (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim) * s
    return 2 * kv_heads_per_rank(a, tp) * a.head_dim * s


def kv_bytes_per_token(a: Architecture, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes per token summed over every layer (each layer caches every token until
    its window is full), per rank."""
    return a.num_layers * layer_kv_bytes_per_token(a, kv_cache_dtype, tp)


def kv_bytes_per_sequence(a: Architecture, context: int, kv_cache_dtype: str = "auto",
                          tp: int = 1) -> int:
    """Bytes one sequence of `context` tokens occupies, windows capping windowed layers."""
    per_layer = layer_kv_bytes_per_token(a, kv_cache_dtype, tp)
    window = a.sliding_window or context
    tokens = a.num_full_layers * context + a.num_sliding_layers * min(context, window)
    return tokens * per_layer


def mha_reduction(a: Architecture) -> float:
    """How much smaller the cache is than full multi-head attention (h / g; MLA vs MHA)."""
    mha = 2 * a.num_heads * a.head_dim
    if a.mla:
        return mha / (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim)
    return mha / (2 * a.num_kv_heads * a.head_dim)


@dataclass(frozen=True)
class IdealCapacity:
    """The seeds' contiguous arithmetic: no blocks, no rounding, no worst-case reservation."""

    kv_budget_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int
    tokens: float
    max_concurrency: float


def ideal_capacity(a: Architecture, kv_budget_bytes: int, length: int,
                   kv_cache_dtype: str = "auto", tp: int = 1) -> IdealCapacity:
    """The textbook answer: budget ÷ contiguous bytes per sequence of `length` tokens (no blocks)."""
    per_token = kv_bytes_per_token(a, kv_cache_dtype, tp)
    per_seq = kv_bytes_per_sequence(a, length, kv_cache_dtype, tp)
    return IdealCapacity(
        kv_budget_bytes=kv_budget_bytes,
        kv_bytes_per_token=per_token,
        kv_bytes_per_sequence=per_seq,
        tokens=kv_budget_bytes / per_token,
        max_concurrency=kv_budget_bytes / per_seq,
    )
