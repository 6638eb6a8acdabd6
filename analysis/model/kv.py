"""KV-cache bytes: the ideal arithmetic of the seed documents.

    per token, per full-cache layer = 2 · n_kv_heads · head_dim · s      (K and V)
    MLA layer                       = (kv_lora_rank + qk_rope_head_dim) · s
    sliding-window layer            holds at most `window` tokens per sequence

Tensor parallelism splits KV heads across ranks; a head is replicated when there
are fewer KV heads than ranks, and an MLA latent is replicated on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.model import layers
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


def is_fp8(kv_cache_dtype: object) -> bool:
    """Whether a KV dtype is fp8: vLLM's rule (``is_quantized_kv_cache``, utils/torch_utils.py: the ``fp8`` prefix,
    so fp8_e4m3, fp8_e5m2 and fp8_ds_mla too). The one definition kvprof asks."""
    return str(kv_cache_dtype).lower().startswith("fp8")


def kv_heads_per_rank(a: Architecture, tp: int = 1) -> int:
    """KV heads one rank of a tensor-parallel group stores (analysis.model.layers.kv_heads_per_rank)."""
    return layers.kv_heads_per_rank(a.num_kv_heads, tp)


def layer_kv_bytes_per_token(a: Architecture, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes one attention layer caches per token on one rank (every layer of a model caches the same: vLLM's
    one page size, which the allocator needs)."""
    s = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    return _first_attention(a).kv_bytes_per_token(tp, s)


def _first_attention(a: Architecture) -> layers.AttentionLayer:
    """The first layer that caches tokens (a hybrid's recurrent layers cache none)."""
    return next((k for k in a.attention_layers if k.kv_elements_per_token()), a.attention_layers[0])


def kv_bytes_per_token(a: Architecture, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes per token summed over every layer (each layer caches every token until
    its window is full), per rank."""
    s = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    return sum(n * layer.kv_bytes_per_token(tp, s) for layer, n in a.attention_kinds)


def kv_bytes_per_sequence(a: Architecture, context: int, kv_cache_dtype: str = "auto",
                          tp: int = 1) -> int:
    """Bytes one sequence of `context` tokens occupies, windows capping windowed layers, recurrent layers' state
    whatever the length."""
    s = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    return sum(n * (layer.tokens_held(context) * layer.kv_bytes_per_token(tp, s) + layer.state_bytes(tp))
               for layer, n in a.attention_kinds)


def kv_bytes_read(a: Architecture, context: int, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes of cache one decode token of a ``context``-token sequence reads, per rank: what each layer holds, or
    for a sparse layer its indexer's keys and the latent rows it picks (analysis.model.layers.SparseMLA)."""
    s = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    return sum(n * layer.kv_bytes_read(context, tp, s) for layer, n in a.attention_kinds)


def state_bytes_per_sequence(a: Architecture, tp: int = 1) -> int:
    """Bytes of recurrent state a sequence holds whatever its length (a hybrid's Mamba layers), per rank."""
    return sum(n * layer.state_bytes(tp) for layer, n in a.attention_kinds)


def mha_reduction(a: Architecture) -> float:
    """How much smaller the cache is than full multi-head attention (h / g; MLA vs MHA)."""
    return 2 * a.num_heads * a.head_dim / _first_attention(a).kv_elements_per_token()


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
    """The textbook answer: budget ÷ contiguous bytes per sequence of `length` tokens (no blocks). An
    attention-free model caches no token: its tokens are then the sequences that fit × ``length``, as vLLM counts
    them."""
    per_token = kv_bytes_per_token(a, kv_cache_dtype, tp)
    per_seq = kv_bytes_per_sequence(a, length, kv_cache_dtype, tp)
    return IdealCapacity(
        kv_budget_bytes=kv_budget_bytes,
        kv_bytes_per_token=per_token,
        kv_bytes_per_sequence=per_seq,
        tokens=kv_budget_bytes / per_token if per_token else kv_budget_bytes / per_seq * length,
        max_concurrency=kv_budget_bytes / per_seq,
    )
