"""The KV budget on a GPU, and vLLM's scheduler defaults that shape capacity.

    kv_budget = memory × gpu_memory_utilization − weights − reserve
    reserve   = peak activation + non-torch memory + CUDA-graph memory

vLLM measures the reserve at start-up (profile run) and logs each part; the
defaults here are documented first guesses, replaced by measured values once a
sweep has calibrated them (``kvprof plan --calibration``), and overridable:

* activation: the profile run pushes ``max_num_batched_tokens`` tokens through one
  layer at a time (residual + q/k/v + gate/up/act outputs, model dtype) and samples
  logits for ``max_num_seqs`` sequences (fp32 logits and probabilities);
* non-torch: CUDA context and allocator slack, 0.25 GiB, plus 0.5 GiB of NCCL
  buffers with tensor parallelism;
* CUDA graphs: 0.5 GiB unless ``enforce_eager``.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from analysis.architecture import Architecture

GiB = 2**30


class Reserve(BaseModel):
    """Device memory vLLM keeps outside weights and the KV pool (per GPU)."""

    model_config = ConfigDict(frozen=True)

    activation_bytes: int = Field(ge=0)
    non_torch_bytes: int = Field(ge=0)
    cuda_graph_bytes: int = Field(ge=0)
    source: str = "heuristic"

    @property
    def total(self) -> int:
        return self.activation_bytes + self.non_torch_bytes + self.cuda_graph_bytes


def default_reserve(a: Architecture, *, max_num_batched_tokens: int, max_num_seqs: int,
                    tp: int = 1, enforce_eager: bool = False) -> Reserve:
    """A heuristic of vLLM's non-KV reserve: activations of one max_num_batched_tokens step plus
    the sampler's fp32 logits, non-torch memory, CUDA graphs (none with enforce_eager)."""
    s = a.weight_dtype_bytes
    q_kv = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim // tp
    inter = (a.moe.expert_intermediate_size * a.moe.experts_per_token if a.moe
             else a.intermediate_size) // tp
    per_token = s * (2 * a.hidden_size + q_kv + 3 * inter)
    logits = max_num_seqs * (a.vocab_size // tp) * 4 * 2
    return Reserve(
        activation_bytes=max_num_batched_tokens * per_token + logits,
        non_torch_bytes=GiB // 4 + (GiB // 2 if tp > 1 else 0),
        cuda_graph_bytes=0 if enforce_eager else GiB // 2,
    )


def kv_budget(memory_bytes: int, gpu_memory_utilization: float, weights_bytes: int,
              reserve: Reserve) -> int:
    """KV bytes per GPU; negative means the model does not fit at all.

    vLLM requests ``ceil(total × gpu_memory_utilization)`` (vllm/v1/worker/utils.py ``request_memory``),
    where total is cudaMemGetInfo's total after device set-up — an engine record's
    ``device_memory_bytes`` — not the spec sheet's or NVML's.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    return math.ceil(memory_bytes * gpu_memory_utilization) - weights_bytes - reserve.total


ENTRY_POINTS = ("llm", "serve")


def vllm_default_batching(memory_bytes: int | None, device_name: str = "", entry_point: str = "llm",
                          world_size: int = 1) -> tuple[int, int]:
    """vLLM's defaults (max_num_batched_tokens, max_num_seqs) per device class and entry point.

    From ``EngineArgs.get_batch_defaults`` in vLLM 0.32: ``entry_point`` "llm" is the offline
    ``LLM`` class kvprof drives, "serve" the OpenAI server (``vllm serve``); ``memory_bytes``
    is the device's total memory (None: the CPU backend, whose defaults scale with the
    world size); a device vLLM cannot query counts as 0 bytes.
    """
    if entry_point not in ENTRY_POINTS:
        raise ValueError(f"entry_point {entry_point!r}: use one of {', '.join(ENTRY_POINTS)}")
    serve = entry_point == "serve"
    if memory_bytes is None:
        return (2048 if serve else 4096) * world_size, (128 if serve else 256) * world_size
    if memory_bytes >= 160 * GiB:
        return 16384, 1024
    if memory_bytes >= 70 * GiB and "a100" not in device_name.lower():
        return (8192 if serve else 16384), 1024
    return (2048 if serve else 8192), 256
