"""What one vLLM engine step does on one GPU of its tensor-parallel group (:class:`StepWork`): the sequences it
decodes and the prompt tokens it carries, the weight bytes it streams (dense and expert), the KV it reads, its FLOPs,
its all-reduces and how its kernels launch (a speculative drafter's passes within it are
:func:`analysis.latency.step.drafter_passes`). :mod:`analysis.latency.step` prices it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from analysis.catalog import GPU
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_sequence, kv_bytes_read, state_bytes_per_sequence
from analysis.model.layers import MultiHeadLatentAttention
from analysis.model.params import count_params, expected_experts_touched, weight_breakdown
from analysis.model.quantization import Awq, BitsAndBytes, CompressedTensors, Fp8, Gptq, ModelOpt, Mxfp4
from analysis.model.roofline import attention_flops_per_token
from analysis.vllm.release import (
    allreduce_hops,
    allreduce_kind,
    attention_kernel,
    era,
    graph_mode,
)

ACTIVATION_BYTES = 2  # bf16/fp16 activations in every all-reduce

Kernel = Literal["bf16", "fp8", "int8", "int4", "fp4", "mxfp4", "nf4"]


def kernel_family(a: Architecture) -> Kernel:
    """Which kind of weight kernel vLLM runs the model's linear layers with (its efficiency is fitted)."""
    q = a.quantization
    if q is None:
        return "bf16"
    if isinstance(q, Fp8):
        return "fp8"
    if isinstance(q, Mxfp4):
        return "mxfp4"
    if isinstance(q, BitsAndBytes):
        return "nf4"
    if isinstance(q, Awq | Gptq):
        return "int4" if getattr(q, "bits", 4) <= 4 else "int8"
    if isinstance(q, CompressedTensors):
        w = q.groups[0][1]
        if w.num_bits >= 8:
            return "fp8" if w.type == "float" else "int8"
        return "fp4" if w.type == "float" else "int4"
    if isinstance(q, ModelOpt):  # NVFP4 (mixed precision: NVFP4 where it matters, the experts) or an FP8 variant
        return "fp8" if q.algo.startswith(("FP8", "MXFP8")) else "fp4"
    return "bf16"


@dataclass(frozen=True)
class StepWork:
    """What one engine step does on one GPU of the tensor-parallel group, and what it runs on."""

    decode_seqs: float
    prefill_tokens: float
    dense_bytes: float  # weights streamed outside the routed experts
    expert_bytes: float  # routed experts the step's tokens touch
    experts_touched: float | None
    kv_bytes: float  # KV read by decode attention + KV written by the prompt tokens
    gemm_flops: float  # dense GEMMs (attention projections, dense MLPs, shared experts, the LM head)
    expert_gemm_flops: float  # routed experts' grouped GEMMs
    attention_flops: float
    layers: int
    gemms: float  # GEMM kernels a step launches on a rank (linear layers, fused as vLLM fuses them; the LM head)
    moe_layers: int
    expert_calls: float  # routed experts the step's tokens touch, summed over the MoE layers: each a GEMM of its own
    mla_layers: int  # latent-attention layers: absorbed up-projections and more kernels a layer
    allreduces: float
    allreduce_hops: float  # how the all-reduce latency grows with tp (allreduce_hops())
    allreduce_bytes: float  # bytes each GPU sends and receives in them (ring: 2(tp−1)/tp of the tensor)
    graphs: Literal["eager", "piecewise", "full"]  # how its kernels launch (graph_mode())
    overlap: bool  # async scheduling: the host's work for the next step runs while this one is on the GPU
    generation: str
    kernel: str
    era: str
    attention: str  # decode-attention kernel family (attention_kernel())
    link: str
    bandwidth_Bps: float
    gemm_peak_flops: float  # the tensor rate the GEMMs run at (fp8/int8 where the kernel and part have it)
    peak_flops: float  # bf16 tensor rate (attention)
    link_Bps: float
    decode_query: float = 1.0  # tokens each decoding sequence carries: 1, or 1 + k verifying k draft tokens
    host: bool = True  # whether it is a scheduler iteration of its own (a drafter's pass is not: no host cost)
    drafter: tuple[StepWork, ...] = ()  # a speculative drafter's forward passes in the same step (latency.speculative)
    speculative_host_s: float = 0.0  # host work speculation adds to the step, outside any overlap (before vLLM 0.11)

    @property
    def tokens(self) -> float:
        return self.decode_seqs * self.decode_query + self.prefill_tokens


@lru_cache(maxsize=256)
def _weights(a: Architecture, tp: int) -> tuple[Any, Any]:
    """A model's weight breakdown per rank and parameter counts: the same for every step of a schedule (a burst's
    thousands of chunks), so worked out once per model and tensor-parallel size."""
    return weight_breakdown(a, tp), count_params(a)


def step_work(a: Architecture, gpu: GPU, *, tp: int = 1, decode_seqs: float = 0, decode_context: float = 0,
              prefill_tokens: float = 0, prefill_prefix: float = 0, prefill_seqs: float | None = None,
              kv_cache_dtype: str = "auto", enforce_eager: bool = False,
              vllm_version: str | None = None, async_scheduling: bool = False, decode_query: float = 1,
              sampled_per_seq: float | None = None) -> StepWork:
    """The work of one step: ``decode_seqs`` sequences each holding ``decode_context`` tokens generate one
    token each, and ``prefill_tokens`` prompt tokens (of ``prefill_seqs`` prompts, after ``prefill_prefix``
    tokens already cached) are processed. Byte and FLOP counts are per GPU.

    ``decode_query``: the tokens each decoding sequence carries, 1 + k where the target verifies k draft tokens
    (speculative decoding): every one runs through the GEMMs and the LM head (vLLM samples all 1 + k positions to
    accept or reject them) and attends over the context, whose KV the step still reads once a sequence.
    ``sampled_per_seq``: the LM head's rows a decoding sequence takes where fewer than its tokens (a drafter's
    first pass runs over the target's 1 + k tokens a sequence and samples one)."""
    if decode_seqs < 0 or prefill_tokens < 0 or decode_seqs + prefill_tokens <= 0:
        raise ValueError("a step processes at least one token")
    if decode_query < 1:
        raise ValueError("a decoding sequence carries at least one token a step")
    tokens = decode_seqs * decode_query + prefill_tokens
    w, p = _weights(a, tp)
    dense = w.non_expert - (0 if a.tie_word_embeddings else w.embedding)
    experts, touched = 0.0, None
    if a.moe:
        touched = expected_experts_touched(a.moe.num_experts, a.moe.experts_per_token, max(tokens, 1e-9))
        experts = w.experts * touched / a.moe.num_experts
    # the KV read once a sequence; a recurrent layer's state is read and written back (held bytes, then once more)
    kv = decode_seqs * (kv_bytes_read(a, round(decode_context), kv_cache_dtype, tp)
                        + state_bytes_per_sequence(a, tp))
    # A step's prompt tokens belong to prefill_seqs prompts of per_prompt tokens each: the KV they write and the
    # context their attention spans are each prompt's, not one sequence's of all the step's tokens.
    per_prompt = prefill_tokens / max(prefill_seqs or 1.0, 1.0)
    if prefill_tokens:
        whole = max(round(per_prompt), 1)
        kv += prefill_tokens / whole * kv_bytes_per_sequence(a, whole, kv_cache_dtype, tp)
    # GEMMs over every token, the LM head only over the rows sampled (one per sequence).
    lm_head = p.lm_head or (p.embedding if a.tie_word_embeddings else 0)
    lookup = 0 if a.tie_word_embeddings else p.embedding
    body = p.active - lookup - lm_head
    per_seq = decode_query if sampled_per_seq is None else sampled_per_seq
    sampled = decode_seqs * per_seq + (prefill_seqs if prefill_seqs is not None else (1 if prefill_tokens else 0))
    gemm = 2 * (body * tokens + lm_head * sampled) / tp
    expert_gemm = 2 * p.experts_active * tokens / tp  # the routed experts' share of it (grouped GEMMs)
    attn = decode_seqs * decode_query * attention_flops_per_token(a, round(decode_context))
    if prefill_tokens:
        attn += prefill_tokens * attention_flops_per_token(a, round(prefill_prefix + per_prompt / 2))
    kern = kernel_family(a)
    bf16 = gpu.peak_flops()
    gemm_peak = gpu.peak_flops(fp8=True) if kern in ("fp8", "int8", "fp4") else bf16
    moe_layers = sum(1 for i in range(a.num_layers) if a.is_moe_layer(i))
    gemms = gemm_kernels(a)
    allreduces = a.sublayers if tp > 1 else 0
    ar_bytes = allreduces * tokens * a.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp if tp > 1 else 0.0
    return StepWork(
        decode_seqs=decode_seqs, prefill_tokens=prefill_tokens, dense_bytes=w.per_rank(tp, dense),
        expert_bytes=experts / tp,
        experts_touched=touched, kv_bytes=kv, gemm_flops=gemm - expert_gemm, expert_gemm_flops=expert_gemm,
        attention_flops=attn / tp, layers=a.num_layers, gemms=gemms,
        moe_layers=moe_layers, expert_calls=(touched or 0.0) * moe_layers,
        mla_layers=sum(n for layer, n in a.attention_kinds if isinstance(layer, MultiHeadLatentAttention)),
        allreduces=allreduces,
        allreduce_hops=allreduce_hops(tp, vllm_version), allreduce_bytes=ar_bytes,
        graphs=graph_mode(vllm_version, enforce_eager=enforce_eager, prompt_tokens=prefill_tokens > 0),
        overlap=async_scheduling,
        generation=gpu.generation or "pooled", kernel=kern, era=era(vllm_version),
        attention=attention_kernel(gpu, vllm_version),
        link=allreduce_kind(gpu, vllm_version), bandwidth_Bps=gpu.bandwidth_Bps, gemm_peak_flops=gemm_peak,
        peak_flops=bf16, link_Bps=(gpu.interconnect_gbs or 32) * 1e9, decode_query=decode_query)


def gemm_kernels(a: Architecture) -> int:
    """The GEMM kernels one forward pass launches, as vLLM fuses its linear layers: per layer the fused QKV and
    O projections (latent attention, ``DeepseekV2MLAAttention``: two projections in (the fused q_a/kv_a
    down-projection and q_b, or q and kv_a), the absorbed K and V up-projections and O), the fused gate/up and
    down projections of a dense MLP, or an MoE layer's router, its two grouped expert GEMMs and its shared
    experts' two (and their gate); and the LM head. Each costs a fixed time besides its bytes (on a lent H200,
    5.6 µs + bytes / 4.48 TB/s from 0.5 to 512 MB: benchmarks/results/h200-2026-12-04)."""
    attention = 5 if a.mla else 2
    n = 1
    for i in range(a.num_layers):
        # a recurrent mixer's input and output projections, as attention's QKV and O
        n += {"mlp": 0, "parallel_hybrid": attention + 2}.get(a.layer_types[i], attention)
        if not a.has_mlp(i):
            continue
        if a.is_moe_layer(i):
            m = a.moe
            n += 3 + (2 + m.shared_expert_gate if m.shared_experts else 0)
        else:
            n += 2
    return n
