"""vLLM's start-up memory accounting, as vLLM computes it, per vLLM version.

vLLM sizes the KV pool once, at start-up (vllm/v1/worker/gpu_worker.py
``Worker.determine_available_memory`` in 0.32; vllm/worker/worker.py
``determine_num_available_blocks`` in the V0 engine)::

    requested = ceil(total × gpu_memory_utilization)          # v1/worker/utils.py request_memory
    available = requested − weights − activation peak − non-torch − CUDA graphs (where deducted)

* ``total`` is cudaMemGetInfo's total (``MemorySnapshot.measure``: ``torch.accelerator.get_memory_info``),
  a few hundred MiB under NVML's / nvidia-smi's total and the spec sheet's (catalog ``cuda_total_mib``).
* weights: what the model's tensors take (``model_memory_usage``; predicted by ``analysis.model.params``).
* activation peak: the torch allocator's peak during ``profile_run`` above what stays allocated
  (0.32: ``memory_profiling``'s ``transient_peak_headroom`` = torch_peak − torch_allocated; V0/V1
  before: ``torch_peak_increase``). ``profile_run`` pushes ``max_num_batched_tokens`` dummy tokens
  through the model (one layer's intermediates are live at a time), then runs the sampler on
  ``min(max_num_seqs, max_num_batched_tokens)`` rows of logits (``_dummy_sampler_run``); the
  peak is the larger of the two phases.
* non-torch: device memory outside torch's allocator that appeared since the engine's baseline
  snapshot (cuBLAS/cuBLASLt workspaces, NCCL buffers with tensor parallelism). Library- and
  driver-dependent: no source formula exists, so the figure is taken from published logs (cited).
* CUDA graphs: captured after the KV cache is allocated; vLLM deducts an *estimate*
  (``GPUModelRunner.profile_cudagraph_memory``) from 0.20 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
  default on; gpu_worker.py says "default since v0.21.0", but 0.20.0's start-ups deduct it already); before,
  graph memory came out of the
  ``1 − gpu_memory_utilization`` headroom and never out of the KV budget.

Each version range is one :class:`AccountingRules` object in :data:`RULE_SETS`; :func:`rules_for` picks
one by version, defaulting to the vLLM kvprof pins (``TESTED_VLLM_VERSIONS``):

=============  ===================================================  ===========  ==================
versions       sampler warm-up (bytes a logit beyond the logits)    non-torch    CUDA graphs
=============  ===================================================  ===========  ==================
< 0.8 (V0)     36: float32 copy + sort of top-k/top-p               0.15 / 0.5   not deducted
0.8–0.11.0     36: the same, V1 runner (8 with FlashInfer installed) 0.15 / 0.5   not deducted
0.11.1–0.17    36: the same (FlashInfer's sampler off by default)   0.15 / 0.5   not deducted
0.18–0.19      12: Triton top-k/top-p in place; MoE workspaces held 0.25 / 2.1   not deducted
0.20           as 0.18 (+16 B a logit warming the rejection sampler) 0.25 / 2.1   estimate deducted
0.21–0.24      as 0.18; Model Runner V2 (0) for Qwen3/Llama/Mistral 0.25 / 2.1   estimate deducted
0.25–0.31      as 0.21; Model Runner V2 for every dense model       0.25 / 2.1   estimate deducted
0.32 (pinned)  Model Runner V2 for every model: 0                   0.25 / 2.1   estimate deducted
=============  ===================================================  ===========  ==================

(non-torch: GiB on one GPU / with tensor parallelism.) Checked in tests/analysis/vllm/test_vllm_memory.py against
published logs, per record of the GPU corpus (tests/fixtures/gpu_corpus/).
"""

from __future__ import annotations

import math
from typing import Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

from analysis.model.architecture import Architecture
from analysis.model.params import model_loading_bytes
from analysis.model.vision import EncoderProfile
from analysis.model.vision import encoder_profile as tower_profile
from analysis.vllm.release import release

GiB = 2**30
MiB = 2**20

Entry = Literal["serve", "offline"]
ENTRIES: tuple[str, ...] = ("serve", "offline")
ENTRY_ALIASES = {"llm": "offline"}  # kvprof's old name for the offline LLM class

# Bytes per logit element that vLLM's V0 and V1 samplers hold at their peak on top of the logits
# themselves (model dtype), when the dummy run asks for top-k and top-p (V0 profile_run: top_k =
# vocab − 1, top_p = 0.99; V1 _dummy_sampler_run: top_k = vocab − 1, top_p = 0.9).
#
# Sort-based top-k/top-p (V0, and V1 until the Triton kernel):
#   4   logits.to(torch.float32)                       (v1/sample/sampler.py Sampler.forward)
#   12  logits.sort(): float32 values + int64 indices   (v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p)
#   20  torch.sort's own transients on CUDA: an int64 index input and the radix sort's alternate
#       float32-key / int64-value buffers (ATen cuda/Sort.cu segmented sort), live while it sorts
# = 36 B, the peak inside the sort (later steps — softmax of the sorted values, the boolean mask,
# the scatter back, the probabilities and the exponential noise — free the sort's buffers first
# and stay under it).
SORTING_SAMPLER_EXTRA_BYTES = 36
# FlashInfer top-k/top-p (topk_topp_sampler.py forward_cuda → flashinfer top_k_top_p_sampling_from_logits):
#   4 float32 logits + 4 the probabilities FlashInfer's softmax writes; no sort.
# The V1 sampler takes it by default whenever FlashInfer is installed (vllm PR #11394, "in V1, None means
# True") — the vllm/vllm-openai images ship it — from 0.9 (API of FlashInfer 0.2.3 adopted, vllm PR #15777)
# until vllm PR #26859 "Disable FlashInfer sampler by default" (October 2025, 0.11.1).
FLASHINFER_SAMPLER_EXTRA_BYTES = 8
# Triton top-k/top-p (vllm PR #33538, v1/sample/ops/topk_topp_triton.py, in the v0.18.0 API docs):
# masks the float32 logits in place, so the peak is random_sample's:
#   4 float32 logits + 4 softmax probabilities + 4 exponential noise q   (topk_topp_sampler.py forward_native)
# beside a per-program float32 buffer [min(rows, SMs), vocab] the kernel caches.
TRITON_SAMPLER_EXTRA_BYTES = 12
TRITON_BUFFER_PROGRAMS = 132  # num_compute_units: SMs of an H100 SXM (the corpus' GPU); ≤ 0.1 GiB elsewhere


class AccountingRules(BaseModel):
    """How one range of vLLM versions sizes the KV pool (the numbers and where they come from)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="what the plan prints, e.g. 'vLLM 0.32'")
    since: str | None = Field(description="first version these rules describe (None: the oldest)")
    until: str | None = Field(description="first version they no longer describe (None: open-ended)")
    engine: Literal["v0", "v1"]
    # Which model runner builds the profile run: V0's, the V1 GPUModelRunner, or Model Runner V2
    # (vllm/v1/worker/gpu/model_runner.py), by model family where vLLM picks per model.
    v2_runner: Literal["none", "qwen3", "qwen3_llama_mistral", "dense", "all"] = "none"
    sampler_extra_bytes_v1: int = Field(description="bytes per logit beyond the logits under the V0/V1 runner")
    triton_top_k_top_p: bool = False  # the V1 runner's sampler uses the Triton kernel (its buffer is counted)
    # Bytes a logit where FlashInfer is installed and this version's V1 sampler then uses it (None: it does not).
    sampler_extra_bytes_flashinfer: int | None = None
    moe_workspace_held: bool = False  # fused-MoE workspaces stay allocated through the sampler warm-up
    sampler_extra_bytes_v2: int = 0
    non_torch_bytes_tp1: int
    non_torch_bytes_tp: int
    cuda_graphs_deducted: bool
    cuda_graph_estimate_bytes: int = 0
    batching: Literal["v0", "v1", "v1_a100", "v1_160g"]
    # vLLM's --gpu-memory-utilization where none is given: 0.9, and 0.92 from 0.20 (vllm PR #38284, merged 2026-04-21,
    # "correspondingly increases the default `--gpu-memory-utilization` to 0.92" as it turned the CUDA-graph estimate
    # on; config/cache.py "If unspecified, will use the default value of 0.92"; 0.20.0 start-ups without the flag
    # print "The current --gpu-memory-utilization=0.9200": tests/analysis/vllm/test_speculative.py's H100 records).
    default_gpu_memory_utilization: float = 0.9
    # Bytes a logit of max_num_seqs × vocabulary the V1 runner's profile run adds beside its peak when a speculative
    # config is set: after the sampler's warm-up, _dummy_sampler_run warms the rejection sampler on 2 × max_num_seqs
    # rows of random logits (gpu_model_runner.py; the bonus rows sampled, the target rows in float32 and cloned).
    # Taken from the published vLLM 0.20 H100 start-ups beside their own baselines: 2.30-2.33 GiB more in four
    # setups (two heads, bf16 and FP8) with 1,024 × 151,936 logits, 16 B each (2.32 GiB); not derived from the
    # source. Model Runner V2 (0.32's for speculation) has no such warm-up; 0.18 showed none (an n-gram start-up
    # logs its baseline's pool).
    spec_rejection_warmup_bytes: int = 0
    # What "GPU KV cache size: N tokens" counts. Before 0.20 the pool split evenly over the KV-cache groups,
    # num_blocks // groups × the block (kv_cache_utils: "num_blocks // len(kv_cache_config.kv_cache_groups) *
    # min_block_size"); from 0.20 int(max concurrency × max_model_len) (vLLM issue 40691, "The KV cache size log is
    # wrong for Qwen3.5", and its fix). Within a block of each other for one group; a hybrid's differ several-fold:
    # published Nemotron-3 start-ups log 4,819,104 = 5,773 // 5 groups × 4,176 on 0.19.1 and
    # 1,206,303 = int(311 / 66 × 256,000) on 0.20.1 (tests/fixtures/hybrid_startups).
    kv_tokens_logged: Literal["pool_over_groups", "concurrency"] = "concurrency"
    notes: str = ""

    def covers(self, version: Version) -> bool:
        lo = Version(self.since) if self.since else None
        hi = Version(self.until) if self.until else None
        return (lo is None or version >= lo) and (hi is None or version < hi)

    def uses_v2_runner(self, a: Architecture) -> bool:
        """Model Runner V2 runs this model (its sampler warm-up allocates no float32 copies)."""
        if self.v2_runner == "none":
            return False
        if self.v2_runner == "all":
            return True
        if a.moe is not None or a.mla is not None:
            return False
        if self.v2_runner == "dense":
            return True
        families = ("qwen3",) if self.v2_runner == "qwen3" else ("qwen3", "llama", "mistral")
        return a.model_type in families

    def sampler_extra_bytes(self, a: Architecture, flashinfer: bool = False) -> int:
        if self.uses_v2_runner(a):
            return self.sampler_extra_bytes_v2
        if flashinfer and self.sampler_extra_bytes_flashinfer is not None:
            return self.sampler_extra_bytes_flashinfer
        return self.sampler_extra_bytes_v1


# Non-torch memory. vLLM's baseline snapshot is taken after the CUDA context exists
# (0.32 gpu_worker.py init_device: MemorySnapshot after init_worker_distributed_environment), so what
# is left is cuBLAS/cuBLASLt workspaces and, with tensor parallelism, NCCL's lazily allocated
# channel buffers and the all-reduce workspaces (first all-reduce, in the profile run).
# Library-dependent, so the figures are the logs':
# before 0.18: one GPU 0.16 GiB (llama2_7b_k8s_boxed.log; pr13109 in the GPU corpus), 0.07 GiB (vllm
# PR #21489, B200), 0.03–0.35 GiB elsewhere; tensor parallel about 0.55 GiB at TP2 (issue #14),
# 0.34–0.43 GiB at TP4 (v0.8.3_qwen25vl72b_4xa100_ranks_differ.log).
_NON_TORCH_TP1 = round(0.15 * GiB)
_NON_TORCH_TP = round(0.5 * GiB)
# 0.19.0 (llm-d-planner's H100 sweep, GPU corpus llmdplanner_*): 0.24–0.27 GiB on one GPU, 2.06–2.21 GiB
# at TP2 and TP4 (NCCL plus the custom/symmetric all-reduce workspaces), every model alike.
_NON_TORCH_TP1_019 = round(0.25 * GiB)
_NON_TORCH_TP_019 = round(2.1 * GiB)

# The CUDA-graph estimate vLLM deducts from 0.21 on (GPUModelRunner.profile_cudagraph_memory captures two
# graphs per mode and extrapolates; 0.19 already prints it without deducting it). Its size depends on
# the capture sizes, the model and the parallelism; not modelled from shapes. The median of the 37
# estimates in llm-d-planner's vLLM 0.19.0 H100 sweep (GPU corpus llmdplanner_*, serve defaults):
# 0.84 GiB, range 0.49–1.92 GiB (TP1 dense 0.61–1.05, MoE 1.24–1.39, 70B-class at TP2 1.6–1.9).
# Elsewhere: 0.44 GiB (vllm PR #48214, docker_timestamps_cuda_graph_estimate.log), 0.36 GiB at TP2 with
# 16 capture sizes (gpustack/runner PR #251); vllm issue #50780: it grows with max_num_batched_tokens
# for hybrid models.
_CUDA_GRAPH_ESTIMATE = round(0.84 * GiB)

RULE_SETS: tuple[AccountingRules, ...] = (
    AccountingRules(
        name="vLLM 0.6-0.7 (V0 engine)", since=None, until="0.8.0", engine="v0",
        kv_tokens_logged="pool_over_groups",
        # vllm/worker/worker.py determine_num_available_blocks (0.6.4+: memory_profiling):
        # available = total × util − (weights + torch peak increase + non-torch increase);
        # CUDA graphs are captured afterwards (worker.py capture_model) and not deducted.
        sampler_extra_bytes_v1=SORTING_SAMPLER_EXTRA_BYTES,
        non_torch_bytes_tp1=_NON_TORCH_TP1, non_torch_bytes_tp=_NON_TORCH_TP,
        cuda_graphs_deducted=False, batching="v0",
        notes="V0 profile_run: max_num_seqs sequences sharing max_num_batched_tokens, sampled with "
              "top_k = vocab − 1 and top_p = 0.99 (vllm/worker/model_runner.py profile_run)",
    ),
    AccountingRules(
        name="vLLM 0.8-0.11.0 (V1 engine)", since="0.8.0", until="0.11.1", engine="v1",
        kv_tokens_logged="pool_over_groups",
        # vllm/v1/worker/gpu_worker.py determine_available_memory: requested − non_kv_cache_memory;
        # CUDA graphs captured in compile_or_warm_up_model after the KV cache, not deducted.
        # gpu_model_runner.py _dummy_sampler_run warms the sampler with top_k = vocab − 1, top_p = 0.9:
        # the sort-based top-k/top-p, or FlashInfer's kernel where FlashInfer is installed (0.9-0.11.0).
        sampler_extra_bytes_v1=SORTING_SAMPLER_EXTRA_BYTES,
        sampler_extra_bytes_flashinfer=FLASHINFER_SAMPLER_EXTRA_BYTES,
        non_torch_bytes_tp1=_NON_TORCH_TP1, non_torch_bytes_tp=_NON_TORCH_TP,
        cuda_graphs_deducted=False, batching="v1",
    ),
    AccountingRules(
        name="vLLM 0.11.1-0.17 (V1 engine)", since="0.11.1", until="0.18.0", engine="v1",
        kv_tokens_logged="pool_over_groups",
        # As 0.8-0.11.0 with FlashInfer's sampler off by default (vllm PR #26859): the sort-based path.
        # The CUDA-graph estimate of vllm PR #30515 exists from about 0.14 but is off by default.
        sampler_extra_bytes_v1=SORTING_SAMPLER_EXTRA_BYTES,
        non_torch_bytes_tp1=_NON_TORCH_TP1, non_torch_bytes_tp=_NON_TORCH_TP,
        cuda_graphs_deducted=False, batching="v1",
    ),
    AccountingRules(
        name="vLLM 0.18-0.19 (V1 engine)", since="0.18.0", until="0.20.0", engine="v1",
        kv_tokens_logged="pool_over_groups",
        # As 0.8-0.17, with the Triton top-k/top-p kernel (vllm PR #33538; in the v0.18.0 API docs — the
        # release it first shipped in is not pinned here). 0.19 logs "In v0.19, CUDA graph memory
        # profiling will be enabled by default": the estimate is printed, not deducted.
        sampler_extra_bytes_v1=TRITON_SAMPLER_EXTRA_BYTES, triton_top_k_top_p=True, moe_workspace_held=True,
        non_torch_bytes_tp1=_NON_TORCH_TP1_019, non_torch_bytes_tp=_NON_TORCH_TP_019,
        cuda_graphs_deducted=False, batching="v1_160g",
    ),
    AccountingRules(
        name="vLLM 0.20 (V1 engine)", since="0.20.0", until="0.21.0", engine="v1",
        # As 0.18, but deducting the CUDA-graph estimate: vllm PR #38284 (merged 2026-04-21, first in 0.20.0) turned
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on, with a log line written for the 0.21 it was slated for: 0.20.0
        # start-ups log "Estimated CUDA graph memory: 0.50 GiB total" and "CUDA graph memory profiling is enabled
        # (default since v0.21.0)", and their pools are the budget less it (tests/analysis/vllm/test_speculative.py).
        sampler_extra_bytes_v1=TRITON_SAMPLER_EXTRA_BYTES, triton_top_k_top_p=True, moe_workspace_held=True,
        non_torch_bytes_tp1=_NON_TORCH_TP1_019, non_torch_bytes_tp=_NON_TORCH_TP_019,
        cuda_graphs_deducted=True, cuda_graph_estimate_bytes=_CUDA_GRAPH_ESTIMATE, batching="v1_160g",
        default_gpu_memory_utilization=0.92, spec_rejection_warmup_bytes=16,
    ),
    AccountingRules(
        name="vLLM 0.21-0.24", since="0.21.0", until="0.25.0", engine="v1",
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 ("default since v0.21.0"):
        # available = requested − non_kv_cache_memory − cudagraph_memory_estimate.
        # Model Runner V2 default for Qwen3 dense models from 0.22 (release notes, vllm PR #39337),
        # Llama and Mistral dense models from 0.23 (#43458); the 0.22 step is folded into 0.23's.
        v2_runner="qwen3_llama_mistral",
        sampler_extra_bytes_v1=TRITON_SAMPLER_EXTRA_BYTES, triton_top_k_top_p=True, moe_workspace_held=True,
        non_torch_bytes_tp1=_NON_TORCH_TP1_019, non_torch_bytes_tp=_NON_TORCH_TP_019,
        cuda_graphs_deducted=True, cuda_graph_estimate_bytes=_CUDA_GRAPH_ESTIMATE, batching="v1_160g",
        default_gpu_memory_utilization=0.92,
    ),
    AccountingRules(
        name="vLLM 0.25-0.31", since="0.25.0", until="0.32.0", engine="v1",
        # Model Runner V2 default for every dense model from 0.25 (release notes, vllm PR #44443);
        # MoE and hybrid models moved later (vllm PR #53183; the exact release is not pinned here).
        v2_runner="dense",
        sampler_extra_bytes_v1=TRITON_SAMPLER_EXTRA_BYTES, triton_top_k_top_p=True, moe_workspace_held=True,
        non_torch_bytes_tp1=_NON_TORCH_TP1_019, non_torch_bytes_tp=_NON_TORCH_TP_019,
        cuda_graphs_deducted=True, cuda_graph_estimate_bytes=_CUDA_GRAPH_ESTIMATE, batching="v1_160g",
        default_gpu_memory_utilization=0.92,
    ),
    AccountingRules(
        name="vLLM 0.32", since="0.32.0", until=None, engine="v1",
        # 0.32 config/vllm.py use_v2_model_runner: V2 unless a feature it lacks is asked for.
        # V2 profile_run (v1/worker/gpu/model_runner.py) runs attention-free dummy tokens
        # (skip_attn=True) and _dummy_sampler_run on a dummy batch whose requests need no logits
        # processing: Sampler.apply_sampling_params returns the logits as they are (no float32 copy,
        # no top-k/top-p sort: "the sampler may skip top_k, top_p, and logprobs"), and gumbel_sample
        # allocates [rows, vocab blocks] scratch only. The peak is the model-dtype logits.
        v2_runner="all",
        sampler_extra_bytes_v1=TRITON_SAMPLER_EXTRA_BYTES, triton_top_k_top_p=True, moe_workspace_held=True,
        sampler_extra_bytes_v2=0,
        non_torch_bytes_tp1=_NON_TORCH_TP1_019, non_torch_bytes_tp=_NON_TORCH_TP_019,
        cuda_graphs_deducted=True, cuda_graph_estimate_bytes=_CUDA_GRAPH_ESTIMATE, batching="v1_160g",
        default_gpu_memory_utilization=0.92,
    ),
)

def rules_for(version: str | None = None) -> AccountingRules:
    """The accounting rules of a vLLM version (default: the version kvprof pins)."""
    v = release(version)
    for rules in RULE_SETS:
        if rules.covers(v):
            return rules
    raise AssertionError(f"no rule set covers {v}")  # RULE_SETS covers every version


def normalize_entry(entry: str) -> Entry:
    """'serve' or 'offline' ('llm' is accepted for offline); anything else is refused by name."""
    e = ENTRY_ALIASES.get(entry, entry)
    if e not in ENTRIES:
        raise ValueError(f"entry {entry!r}: use serve (vllm serve / the OpenAI server) or offline "
                         "(the LLM class)")
    return e  # type: ignore[return-value]


def default_batching(rules: AccountingRules, memory_bytes: int | None, device_name: str = "",
                     entry: str = "serve", world_size: int = 1,
                     max_model_len: int | None = None) -> tuple[int, int]:
    """vLLM's (max_num_batched_tokens, max_num_seqs) for an entry point on a device.

    V1 (0.8+): ``EngineArgs.get_batch_defaults`` by usage context (OPENAI_API_SERVER = serve,
    LLM_CLASS = offline) and device memory (vllm/engine/arg_utils.py): ≥ 160 GiB (B200 class,
    the tier is in 0.32; kvprof applies it from 0.21) 16,384 / 1,024 either way; ≥ 70 GiB and not an
    A100 (the A100 exception is vllm PR #17885) serve 8,192 / 1,024, offline 16,384 / 1,024;
    otherwise serve 2,048 / 256, offline 8,192 / 256. ``memory_bytes`` None is the CPU backend
    (0.32: per world size, serve 2,048 / 128, offline 4,096 / 256). V0 (before 0.8): 256 sequences,
    and max(max_model_len, 2,048) tokens unless max_model_len > 32K turns chunked prefill on
    (2,048 tokens) — vllm/engine/arg_utils.py create_engine_config and config.py SchedulerConfig.
    """
    serve = normalize_entry(entry) == "serve"
    if memory_bytes is None:
        return (2048 if serve else 4096) * world_size, (128 if serve else 256) * world_size
    if rules.batching == "v0":
        mml = max_model_len or 2048
        return (2048 if mml > 32768 else max(mml, 2048)), 256
    if rules.batching == "v1_160g" and memory_bytes >= 160 * GiB:
        return 16384, 1024
    # vLLM's own rule matches the device name (arg_utils.py: `"a100" not in device_name`), so this one does too.
    if memory_bytes >= 70 * GiB and "a100" not in device_name.lower():
        return (8192 if serve else 16384), 1024
    return (2048 if serve else 8192), 256


class MemoryPrediction(BaseModel):
    """vLLM's start-up account on one GPU (bytes), as the rules predict it."""

    model_config = ConfigDict(frozen=True)

    rules: str
    total_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weights_bytes: int
    forward_peak_bytes: int
    sampler_peak_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_budget_bytes: int


def moe_workspace_bytes(a: Architecture, tokens: int, tp: int = 1) -> int:
    """The fused-MoE workspaces of one MoE layer over ``tokens`` tokens (0 for a dense model).

    vllm/model_executor/layers/fused_moe/experts/triton_moe.py ``TritonExperts.workspace_shapes`` (0.32):
    workspace1 [M, top_k, max(N / 2, K)], workspace2 [M, top_k, max(N, K)] and the output [M, K], with
    N = 2 · expert intermediate / tp (gate and up) and K = hidden, in the activation dtype. vLLM's
    workspace manager keeps them allocated after the forward pass ("Workspaces (e.g. the MoE workspace)
    grow in steps during this pass", gpu_worker.py determine_available_memory), so they are still held
    while the sampler warms up.
    """
    if not a.moe:
        return 0
    m = a.moe
    inter = m.expert_intermediate_size // tp
    h = m.latent_size or a.hidden_size  # K: the width the experts run on
    per_token = m.experts_per_token * (max(inter, h) + max(2 * inter, h)) + h
    return tokens * a.weight_dtype_bytes * per_token


def forward_peak_bytes(a: Architecture, tokens: int, tp: int = 1) -> int:
    """Activation bytes live at the peak of one decoder layer over ``tokens`` dummy tokens.

    Model dtype throughout (the residual stream, q/k/v, attention output, MLP) per tensor-parallel
    rank: the residual and the normed hidden state [T, hidden] stay live across the layer; the
    attention half adds qkv_proj's output [T, (q + 2 kv) heads · head_dim / tp] and the attention
    output [T, q heads · head_dim / tp]; a dense MLP adds gate_up_proj's output [T, 2 · inter / tp]
    and the activation's [T, inter / tp]. A MoE layer adds its fused-MoE workspaces
    (:func:`moe_workspace_bytes`), the router logits [T, experts] (float32) and a shared expert's MLP.
    """
    b = a.weight_dtype_bytes
    h = a.hidden_size
    if a.mla:
        m = a.mla
        q_out = a.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) // tp
        kv_out = (m.kv_lora_rank + m.qk_rope_head_dim) + a.num_heads * (m.qk_nope_head_dim + m.v_head_dim) // tp
        attn_out = a.num_heads * m.v_head_dim // tp
        attention = q_out + kv_out + attn_out
    else:
        q_out = a.num_heads * a.head_dim // tp
        kv_out = 2 * a.num_kv_heads * a.head_dim // max(1, min(tp, a.num_kv_heads))
        attention = q_out + kv_out + q_out
    mlp = 3 * a.intermediate_size // tp if a.intermediate_size else 0
    dense = tokens * b * (2 * h + max(attention, mlp))
    if not a.moe:
        return dense
    m = a.moe
    extra = 2 * m.num_experts + (3 * m.shared_expert_intermediate_size // tp if m.shared_experts else 0)
    moe = tokens * b * (2 * h + extra) + moe_workspace_bytes(a, tokens, tp)
    return max(dense, moe)


def sampler_peak_bytes(a: Architecture, rules: AccountingRules, rows: int, flashinfer: bool = False) -> int:
    """Bytes the sampler warm-up holds at its peak: the logits [rows, vocab] in the model dtype
    (all-gathered to the full vocabulary on every rank in V1: LogitsProcessor._gather_logits) plus
    what the runner's sampler adds per logit (float32 copy and the top-k/top-p sort under V0/V1)."""
    peak = rows * a.vocab_size * (a.weight_dtype_bytes + rules.sampler_extra_bytes(a, flashinfer))
    if rules.triton_top_k_top_p and not rules.uses_v2_runner(a):
        peak += min(rows, TRITON_BUFFER_PROGRAMS) * a.vocab_size * 4
    return peak


def activation_bytes(a: Architecture, rules: AccountingRules, *, max_num_batched_tokens: int,
                     max_num_seqs: int, tp: int = 1, flashinfer: bool = False,
                     encoder: EncoderProfile | None = None) -> tuple[int, int, int]:
    """(activation peak, forward peak, sampler peak) of the profile run.

    The sampler runs after the forward pass while its output hidden states [T, hidden], the
    sampled rows [rows, hidden] (profile_run keeps ``hidden_states`` until the sampler returns) and
    a MoE model's fused-MoE workspaces (the V1 engine's workspace manager) are still held, so the
    peak is max(forward, held + sampler). A multimodal model's ``encoder`` profile (:func:`encoder_profile`) runs
    first; its outputs stay in the encoder cache until the sampler returns, so the peak is the larger of the
    tower's own and the decoder's on top of those outputs.
    """
    rows = min(max_num_seqs, max_num_batched_tokens)
    forward = forward_peak_bytes(a, max_num_batched_tokens, tp)
    sampler = sampler_peak_bytes(a, rules, rows, flashinfer)
    held = (max_num_batched_tokens + rows) * a.hidden_size * a.weight_dtype_bytes
    if rules.moe_workspace_held:
        held += moe_workspace_bytes(a, max_num_batched_tokens, tp)
    decoder = max(forward, held + sampler)
    return (decoder if encoder is None else encoder.peak_with(decoder)), forward, sampler


def encoder_profile(a: Architecture, rules: AccountingRules, *, max_model_len: int | None,
                    max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1,
                    mm_limits: dict[str, int] | None = None, encoder_data_parallel: bool = False
                    ) -> EncoderProfile | None:
    """The vision tower's part of the V1 profile run (analysis.model.vision), None for a model without a tower
    kvprof plans, under V0 (whose profile fed multimodal dummies through the decoder's own token budget) or where
    ``max_model_len`` is unknown. ``encoder_data_parallel`` (``--mm-encoder-tp-mode data``): every rank holds the
    whole tower and runs whole items (``run_dp_sharded_mrope_vision_model``), so the rank that runs the profile's
    item peaks as a single GPU would."""
    if a.vision is None or rules.engine != "v1" or not max_model_len:
        return None
    return tower_profile(a.vision, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                         max_num_seqs=max_num_seqs, dtype_bytes=a.weight_dtype_bytes,
                         tp=1 if encoder_data_parallel else tp, limits=mm_limits)


def predict(a: Architecture, *, total_bytes: int, gpu_memory_utilization: float | None = None,
            max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1, enforce_eager: bool = False,
            rules: AccountingRules | None = None, weights: int | None = None,
            flashinfer: bool = False, max_model_len: int | None = None,
            mm_limits: dict[str, int] | None = None) -> MemoryPrediction:
    """vLLM's KV budget on one GPU from the model's shapes and cudaMemGetInfo's total.

    ``weights`` defaults to :func:`analysis.model.params.model_loading_bytes` (pass the logged figure where known);
    ``flashinfer``: FlashInfer is installed (matters only where that version's sampler then uses it);
    ``max_model_len`` and ``mm_limits`` size a vision tower's profile (:func:`encoder_profile`);
    ``gpu_memory_utilization`` None: that version's default.
    """
    rules = rules or rules_for()
    if gpu_memory_utilization is None:
        gpu_memory_utilization = rules.default_gpu_memory_utilization
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    w = model_loading_bytes(a, tp) if weights is None else weights
    # 0.32 v1/worker/utils.py request_memory: math.ceil(total × utilization); V0 and early V1 multiply
    # without rounding (a byte at most).
    requested = math.ceil(total_bytes * gpu_memory_utilization)
    encoder = encoder_profile(a, rules, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                              max_num_seqs=max_num_seqs, tp=tp, mm_limits=mm_limits)
    act, fwd, smp = activation_bytes(a, rules, max_num_batched_tokens=max_num_batched_tokens,
                                     max_num_seqs=max_num_seqs, tp=tp, flashinfer=flashinfer, encoder=encoder)
    non_torch = rules.non_torch_bytes_tp1 if tp == 1 else rules.non_torch_bytes_tp
    graphs = rules.cuda_graph_estimate_bytes if rules.cuda_graphs_deducted and not enforce_eager else 0
    return MemoryPrediction(
        rules=rules.name, total_bytes=total_bytes, gpu_memory_utilization=gpu_memory_utilization,
        requested_bytes=requested, weights_bytes=w, forward_peak_bytes=fwd, sampler_peak_bytes=smp,
        activation_bytes=act, non_torch_bytes=non_torch, cuda_graph_bytes=graphs,
        kv_budget_bytes=requested - w - act - non_torch - graphs,
    )
