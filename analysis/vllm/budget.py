"""The KV budget on a GPU, and vLLM's scheduler defaults that shape capacity.

    kv_budget = ceil(total × gpu_memory_utilization) − weights − reserve
    reserve   = activation peak + non-torch memory + CUDA-graph memory (where vLLM deducts it)

vLLM measures the reserve at start-up (profile run) and logs each part. The prediction
follows vLLM's own accounting, per vLLM version (``analysis/vllm/memory.py``:
the rule sets, each with the vLLM source it comes from); a sweep's calibration
(``kvprof plan --calibration``) or ``--reserve-bytes`` replaces it.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from analysis.model.architecture import Architecture
from analysis.vllm.memory import ENTRIES, default_batching, rules_for
from analysis.vllm.memory import activation_bytes as _activation_bytes
from analysis.vllm.memory import encoder_profile as _encoder_profile

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
                    tp: int = 1, enforce_eager: bool = False, vllm_version: str | None = None,
                    samples: bool = True, flashinfer: bool = False, max_model_len: int | None = None,
                    mm_limits: dict[str, int] | None = None, encoder_data_parallel: bool = False) -> Reserve:
    """vLLM's non-KV reserve as the accounting rules of ``vllm_version`` (default: the pinned vLLM)
    predict it: the profile run's activation peak, non-torch memory by tensor-parallel size, and
    the CUDA-graph estimate where that version deducts it (none with enforce_eager). ``samples``: the GPU runs
    the sampler (every GPU but those of a pipeline's earlier stages, whose peak is the forward pass alone).
    ``flashinfer``: FlashInfer is installed (vLLM's Docker images ship it), which changes the sampler's warm-up where
    that version's sampler uses it (vLLM 0.9–0.11.0: 8 B a logit instead of the sort's 36). A model with a vision
    tower kvprof plans (analysis.model.vision) adds the encoder's profile, sized by ``max_model_len`` and
    ``mm_limits`` (``--limit-mm-per-prompt``), on every pipeline stage (0.32 builds the tower on each);
    ``encoder_data_parallel``: ``--mm-encoder-tp-mode data`` (the tower unsplit on every rank)."""
    rules = rules_for(vllm_version)
    encoder = _encoder_profile(a, rules, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                               max_num_seqs=max_num_seqs, tp=tp, mm_limits=mm_limits,
                               encoder_data_parallel=encoder_data_parallel)
    act, forward, _ = _activation_bytes(a, rules, max_num_batched_tokens=max_num_batched_tokens,
                                        max_num_seqs=max_num_seqs, tp=tp, flashinfer=flashinfer, encoder=encoder)
    if not samples:  # every rank runs the encoder's profile (vLLM builds the tower on each pipeline stage)
        act = forward if encoder is None else encoder.peak_with(forward)
    graphs = rules.cuda_graph_estimate_bytes if rules.cuda_graphs_deducted and not enforce_eager else 0
    return Reserve(
        activation_bytes=act,
        non_torch_bytes=rules.non_torch_bytes_tp1 if tp == 1 else rules.non_torch_bytes_tp,
        cuda_graph_bytes=graphs,
        source=f"{rules.name} accounting" + (", FlashInfer's sampler" if flashinfer and samples and
                                             rules.sampler_extra_bytes(a, True) != rules.sampler_extra_bytes(a)
                                             else "") + (f", {encoder.summary}" if encoder else ""),
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


ENTRY_POINTS = ENTRIES  # "serve" (vllm serve / the OpenAI server) and "offline" (the LLM class)


def vllm_default_batching(memory_bytes: int | None, device_name: str = "", entry: str = "serve",
                          world_size: int = 1, vllm_version: str | None = None,
                          max_model_len: int | None = None) -> tuple[int, int]:
    """vLLM's defaults (max_num_batched_tokens, max_num_seqs) per device class and entry point.

    ``entry`` "serve" is the OpenAI server (``vllm serve``), "offline" the ``LLM`` class kvprof
    drives ("llm" is accepted for it); ``memory_bytes`` is the device's total memory (None: the
    CPU backend, whose defaults scale with the world size); a device vLLM cannot query counts as
    0 bytes. The rules per vLLM version are ``analysis.vllm.memory.default_batching``'s.
    """
    return default_batching(rules_for(vllm_version), memory_bytes, device_name, entry,
                            world_size=world_size, max_model_len=max_model_len)


