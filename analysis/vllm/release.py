"""What differs between vLLM releases in how a step runs, and the one parser of a vLLM version string.

:func:`release` reads a version (``0.6.3.post1``, ``0.11.0rc2`` and ``v0.14.0`` are 0.6.3, 0.11.0 and 0.14.0;
absent: the vLLM kvprof pins) and refuses what is not one; :func:`known_release` is the same for a record's version
that may be absent or unreadable (None: kvprof then assumes the newest behaviour). Both parse with
:mod:`analysis.versions`. Every "what does release X do" question of the latency model asks
a function here: the engine (V0 or V1), the host-cost era, how an all-reduce runs and grows with the ranks, which
attention kernel reads the KV cache, how a step's kernels launch (graph mode), and the defaults a user does not set:
whether prompts are chunked, async scheduling, the prefix cache. The plan, the sweep's pre-flight and dry run, the
allocator and the latency model ask these. The memory accounting's rule sets per release are one table,
:mod:`analysis.vllm.memory`'s ``RULE_SETS`` (whose ``engine`` a test holds to :func:`v1_engine`); the MoE and
speculative kernels a release picks are :mod:`analysis.model.quantization`'s and :mod:`analysis.latency.speculative`'s;
all of them parse versions with :mod:`analysis.versions`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import numpy as np
from packaging.version import Version

from analysis.results.schema import TESTED_VLLM_VERSIONS
from analysis.versions import known_release, parse_release

if TYPE_CHECKING:
    from analysis.catalog import GPU

# vLLM eras whose host cost per step differs: before 0.6 (no async output processing), 0.6 to 0.8
# (V0's async output processing, V1 arriving), 0.9 on (V1 with its persistent batch, async scheduling later).
ERAS = ("0.5", "0.6", "0.9")
# Eras whose fused-MoE kernels pay a cost per expert GEMM on top of the expert's bytes. From vLLM 0.9 on the corpus
# shows none: fitted, it came to 1.1 µs an expert call and held out it made the decode step worse (13.1 % against
# 12.3 % by figure) by predicting gpt-oss and Qwen3-30B-A3B at concurrency 10–64 up to twice too slow.
EXPERT_CALL_ERAS = ("0.5", "0.6")
DEFAULT_VERSION = TESTED_VLLM_VERSIONS[0]
V1_ENGINE_FROM = Version("0.8.0")


def release(version: str | None = None) -> Version:
    """The vLLM release a version string names (default: the version kvprof pins; analysis.versions parses it):
    0.6.3.post1, 0.11.0rc2 and v0.14.0 are 0.6.3, 0.11.0 and 0.14.0; anything that is not a version number is
    refused by name (UnknownVLLMVersion)."""
    return parse_release(version or DEFAULT_VERSION)


def era(vllm_version: str | None) -> str:
    """The host-cost era of a vLLM version (None or unreadable: the newest)."""
    v = known_release(vllm_version)
    if v is None:
        return ERAS[-1]
    return "0.5" if v < Version("0.6") else "0.6" if v < Version("0.9") else "0.9"


def allreduce_kind(gpu: GPU, vllm_version: str | None) -> str:
    """How a tensor-parallel all-reduce runs: vLLM's custom all-reduce over NVLink (since 0.3.0, vLLM PR 2192),
    or NCCL: before it on NVLink, and over PCIe (``pcie``)."""
    if (gpu.interconnect or "pcie") == "pcie":
        return "pcie"
    v = known_release(vllm_version)
    return "nccl" if v is not None and v < Version("0.3") else "nvlink"


def allreduce_hops(tp: int, vllm_version: str | None) -> float:
    """How an all-reduce's latency grows with the ranks it synchronises, as the corpus shows it: as log2(tp)
    before vLLM 0.9 (its A100 runs at tp 2, 4 and 8 of one model grow so), flat from 0.9 on (V1 with CUDA graphs
    over the whole step: gpt-oss-120b at tp 8 on H100 and H200 decodes 72 all-reduces a step in ~4 ms in all)."""
    if tp <= 1:
        return 0.0
    return 1.0 if era(vllm_version) == ERAS[-1] else float(np.log2(tp))


def attention_kernel(gpu: GPU, vllm_version: str | None) -> str:
    """Which decode-attention kernel family reads the KV cache: FlashAttention 3 on Hopper from vLLM 0.7.0 on
    (vLLM PR 12093; "On Hopper, Flash Attention 3 is enabled by default (since the v0.7.0 release)", PR 15231),
    which streams the paged KV at a larger share of HBM bandwidth than the FlashAttention 2 and paged-attention
    kernels before it (``fa3``); ``fa2`` otherwise (every other part, and Hopper before 0.7)."""
    v = known_release(vllm_version)
    return "fa3" if gpu.generation == "hopper" and (v is None or v >= Version("0.7")) else "fa2"


def graph_mode(vllm_version: str | None, *, enforce_eager: bool = False,
               prompt_tokens: bool = False) -> Literal["eager", "piecewise", "full"]:
    """How a step's kernels launch: one by one (``--enforce-eager``); from one whole CUDA graph, for a pure decode
    step from vLLM 0.11.0 on, whose default cudagraph mode is FULL_AND_PIECEWISE (its start-up logs print
    ``"cudagraph_mode":[2,1]`` and "Capturing CUDA graphs (decode, FULL)": the corpus's
    sipeed_qwen3_vl_30b_a3b_tp4_rtx3090); or from graphs broken around every attention layer (PIECEWISE), before
    0.11 and for a step that carries prompt tokens."""
    if enforce_eager:
        return "eager"
    v = known_release(vllm_version)
    return "full" if not prompt_tokens and (v is None or v >= Version("0.11")) else "piecewise"


def v1_engine(vllm_version: str | None) -> bool:
    """Whether the release runs the V1 engine (its scheduler, KV-cache manager and persistent batch): vLLM's default
    from 0.8.0 (V0 was removed in 0.11). None or unreadable: the newest, V1."""
    v = known_release(vllm_version)
    return v is None or v >= V1_ENGINE_FROM


def chunked_prefill_default(vllm_version: str | None) -> bool:
    """Whether prompts are chunked and mixed into decode steps by default: V1 always does."""
    return v1_engine(vllm_version)


# vLLM 0.14.0's release notes: "Async scheduling is now enabled by default ... Excludes some not-yet-supported
# configurations: pipeline parallel, CPU backend, non-MTP/Eagle spec decoding" (PR 27614); before it off unless
# --async-scheduling. vLLM 0.32 decides it in VllmConfig.__post_init__ (config/vllm.py: off for pooling models,
# speculative methods other than EAGLE/MTP/n-gram GPU/draft model, and pipeline parallelism on the V1 runner).
ASYNC_SCHEDULING_DEFAULT_FROM = Version("0.14.0")
# speculative_config.method values it stays on with (config/speculative.py EagleModelTypes, NgramGPUTypes, MTP's
# *_mtp names, draft_model, dflash, dspark)
ASYNC_SPECULATORS = ("eagle", "eagle3", "extract_hidden_states", "ngram_gpu", "draft_model", "dflash", "dspark")


@lru_cache(maxsize=64)
def async_scheduling_default(vllm_version: str | None = None, *, on_gpu: bool = True, pipeline_parallel_size: int = 1,
                             speculative_method: str | None = None) -> bool:
    """Whether vLLM schedules step N + 1 while step N runs (async scheduling) when the user does not say: from 0.14
    on, on a GPU, without pipeline parallelism and without an n-gram-on-CPU or other unsupported speculator."""
    method = speculative_method or ""
    supported = not method or method.endswith("mtp") or method in ASYNC_SPECULATORS
    if not (on_gpu and pipeline_parallel_size == 1 and supported):
        return False
    return release(vllm_version) >= ASYNC_SCHEDULING_DEFAULT_FROM


def prefix_caching_default(vllm_version: str | None = None, *, attention_free: bool = False) -> bool:
    """Whether vLLM caches full KV blocks of earlier prompts for reuse when the user does not say: the V1 engine
    (:func:`v1_engine`) does (CacheConfig.enable_prefix_caching None -> True for generative models in 0.32's
    VllmConfig), except for an attention-free model (Mamba, Mamba2: vLLM turns it off, and MambaModelConfig then
    makes a block max_model_len tokens); V0 did not. The one definition kvprof asks (the allocator too)."""
    return v1_engine(vllm_version) and not attention_free

