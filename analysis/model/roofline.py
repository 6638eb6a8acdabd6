"""Decode and prefill rooflines (ARCHITECTURE.md §5).

    T_step ≥ max(bytes / bandwidth, FLOPs / peak)
    bytes  = weight bytes read (active experts only) + Σ_sequences KV bytes at their context
    FLOPs  ≈ 2 · active params · batch + attention FLOPs

Batching amortises the weight read across the batch, never the KV read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_sequence, kv_bytes_read, kv_dtype_bytes
from analysis.model.params import count_params, decode_weight_bytes


@dataclass(frozen=True)
class Step:
    weight_bytes: float
    kv_bytes: float
    flops: float
    memory_s: float
    compute_s: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def time_s(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def _matmul_params(a: Architecture) -> float:
    """Parameters multiplied per token (embedding lookup excluded; routed experts: top-k)."""
    p = count_params(a)
    lookup = 0 if a.tie_word_embeddings else p.embedding
    return p.active - lookup


def attention_flops_per_token(a: Architecture, context: int) -> float:
    """FLOPs of one query attending to `context` cached tokens, over all layers (each as far as its kind
    keeps them: analysis.model.layers)."""
    return sum(n * layer.attention_flops(context) for layer, n in a.attention_kinds)


def decode_step(
    a: Architecture,
    *,
    batch: int,
    context: int,
    bandwidth_Bps: float,
    peak_flops: float,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    weight_bytes: float | None = None,
) -> Step:
    """One decode iteration of `batch` sequences that each hold `context` tokens (per GPU).

    `weight_bytes` overrides the architecture's read weight bytes (the seeds round
    them, e.g. 72 MB for the 12-layer running model).
    """
    if batch < 1 or context < 0:
        raise ValueError("batch must be >= 1 and context >= 0")
    w = decode_weight_bytes(a, batch, tp) if weight_bytes is None else weight_bytes
    kv = batch * kv_bytes_read(a, context, kv_cache_dtype, tp)
    flops = (2 * _matmul_params(a) * batch + batch * attention_flops_per_token(a, context)) / tp
    return Step(weight_bytes=w, kv_bytes=kv, flops=flops,
                memory_s=(w + kv) / bandwidth_Bps, compute_s=flops / peak_flops)


def prefill(
    a: Architecture,
    *,
    prompt_len: int,
    bandwidth_Bps: float,
    peak_flops: float,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
) -> Step:
    """Prefill of one prompt: matmuls over every prompt token plus causal attention (per GPU)."""
    if prompt_len < 1:
        raise ValueError("prompt_len must be >= 1")
    w = decode_weight_bytes(a, prompt_len, tp)
    kv_written = kv_bytes_per_sequence(a, prompt_len, kv_cache_dtype, tp)
    # Causal attention: token i attends to i tokens, Σ i ≈ n²/2.
    attn = sum(attention_flops_per_token(a, c) for c in _sample_contexts(prompt_len))
    attn *= prompt_len / len(_sample_contexts(prompt_len))
    flops = (2 * _matmul_params(a) * prompt_len + attn) / tp
    return Step(weight_bytes=w, kv_bytes=kv_written, flops=flops,
                memory_s=(w + kv_written) / bandwidth_Bps, compute_s=flops / peak_flops)


def _sample_contexts(n: int, samples: int = 64) -> list[int]:
    """Evenly spaced contexts 1..n (the attention cost is piecewise linear in context)."""
    if n <= samples:
        return list(range(1, n + 1))
    return [1 + round(i * (n - 1) / (samples - 1)) for i in range(samples)]


def crossover_context(a: Architecture, *, batch: int = 1, kv_cache_dtype: str = "auto",
                      tp: int = 1, weight_bytes: float | None = None) -> float | None:
    """Context t* at which the batch's KV read equals the weight read, or None if it never does.

    Dense MHA at batch 1 with 12·d² parameters per layer and no embeddings: t* = 6·d_model.
    """
    w = decode_weight_bytes(a, batch, tp) if weight_bytes is None else weight_bytes
    # The batch's KV read grows by `rate` bytes per token of context while no window is full, then only by the
    # layers without one: piecewise linear, solved segment by segment between the windows.
    s = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    kinds = [(n * rate * batch, cap) for layer, n in a.attention_kinds for rate, cap in layer.read_rates(tp, s)]
    start, read = 0.0, 0.0
    for end in [*sorted({w_ for _, w_ in kinds if w_}), math.inf]:
        rate = sum(b for b, window in kinds if not window or window >= end)
        if rate == 0:
            return None
        t = start + (w - read) / rate
        if t <= end:
            return t
        start, read = end, read + rate * (end - start)
    return None  # not reached: the last segment is unbounded


def ridge_point(peak_flops: float, bandwidth_Bps: float) -> float:
    """FLOP/byte at which a kernel turns compute-bound (A100: 312e12 / 2e12 = 156)."""
    return peak_flops / bandwidth_Bps
