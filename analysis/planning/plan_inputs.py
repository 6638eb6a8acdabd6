"""What ``kvprof plan`` is asked: :class:`PlanInputs` (the workload, the engine settings, the bounds every field is
held to) and :class:`PlanError`, the refusal every planning step raises."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from analysis.model.kv import (
    KV_DTYPES,
)
from analysis.model.vision import Modality
from analysis.results.settings import EngineSettings
from analysis.vllm.budget import (
    async_scheduling_default,
)
from analysis.vllm.lora import DEFAULT_MAX_LORA_RANK
from analysis.vllm.memory import ENTRY_ALIASES, rules_for
from analysis.vllm.speculative import (
    MAX_SPECULATIVE_TOKENS,
    SpeculativeConfig,
)


class PlanError(ValueError):
    """Inputs that cannot produce a plan (the message says which and why)."""


# Integers that are integers: no True for 1, no "16" or 16.0 (pydantic's lax mode turns them into ints).
StrictCount = Annotated[int, Field(strict=True)]
# Bounds past any real deployment: a larger value is a typo, and past 2**63 numpy cannot hold it
MAX_SEQUENCES = 10**9
MAX_TOKENS = 2**31
MAX_BYTES = 2**50  # a pebibyte


class PlanInputs(BaseModel):
    """What the user asks about. Byte counts are per GPU."""

    model_config = ConfigDict(extra="forbid")

    kv_cache_dtype: str = "auto"
    block_size: StrictCount | None = Field(None, gt=0)  # None: vLLM's default on the device (`default_block_size`)
    max_model_len: StrictCount | None = Field(None, gt=0)
    tensor_parallel_size: StrictCount = Field(1, ge=1)
    pipeline_parallel_size: StrictCount = Field(1, ge=1)
    pp_layer_partition: str | None = None  # VLLM_PP_LAYER_PARTITION's value (None: vLLM's even split)
    max_loras: StrictCount | None = Field(None, gt=0)  # --enable-lora's adapter slots (None: LoRA off)
    max_lora_rank: StrictCount = Field(DEFAULT_MAX_LORA_RANK, gt=0)
    # GiB of CPU memory, all ranks together (bounded at a pebibyte: a larger host buffer is a typo)
    kv_offloading_size: float | None = Field(None, gt=0, le=2**20, allow_inf_nan=False)
    kv_offloading_backend: Literal["native", "lmcache"] = "native"
    # None: vLLM's default for the version (0.92 from 0.20, 0.9 before: AccountingRules.default_gpu_memory_utilization)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, strict=True, allow_inf_nan=False)
    kv_cache_memory_bytes: StrictCount | None = Field(None, ge=0, le=MAX_BYTES)
    max_num_batched_tokens: StrictCount | None = Field(None, gt=0, le=MAX_TOKENS)
    max_num_seqs: StrictCount | None = Field(None, gt=0)
    async_scheduling: bool | None = None
    # The prefix cache (None: vLLM's default, on). The plan's sequences share no prefix, so it changes nothing but a
    # hybrid Mamba model's blocks a request: three a Mamba group with it (vLLM's align mode), one without.
    enable_prefix_caching: bool | None = None
    # FlashInfer installed (vLLM's Docker images ship it; its pip wheels before 0.11.1 do not): vLLM 0.9-0.11.0's
    # sampler warm-up then takes 8 B a logit, not the sort's 36 (analysis.vllm.memory).
    flashinfer: bool = False
    # Whose scheduler defaults: vllm serve (the OpenAI server) or the offline LLM class ("llm" is read as offline).
    entry: Literal["serve", "offline"] = "serve"
    vllm_version: str | None = None  # whose memory accounting and defaults (None: the vLLM kvprof pins)
    enforce_eager: bool = False
    reserve_bytes: StrictCount | None = Field(None, ge=0, le=MAX_BYTES)
    batch: StrictCount | None = Field(None, gt=0, le=MAX_SEQUENCES)
    context: StrictCount | None = Field(None, gt=0, le=MAX_TOKENS)
    prompt_len: StrictCount | None = Field(None, gt=0, le=MAX_TOKENS)
    # Tokens each request generates (with prompt_len: the served TPOT and request latency, or under the offline entry
    # `vllm bench latency`'s average latency, of `batch` such requests).
    output_len: StrictCount | None = Field(None, gt=0, le=MAX_TOKENS)
    dtype: str = "auto"  # vLLM's --dtype: the weights' (and an auto KV cache's) dtype
    quantization: str | None = None  # vLLM's --quantization: overrides the checkpoint's quantization_config
    speculative_config: SpeculativeConfig | None = None  # vLLM's --speculative-config (analysis.vllm.speculative)
    # Tokens a request gains per step under speculative decoding, as vLLM logs it ("Mean acceptance length": 1 +
    # accepted ÷ drafts): a property of the text and the drafter, not of the hardware (None: 1, none accepted).
    acceptance_length: float | None = Field(None, ge=1, le=1 + MAX_SPECULATIVE_TOKENS, allow_inf_nan=False)
    # vLLM's --limit-mm-per-prompt: items a prompt may carry per modality (a modality not named: vLLM's 999); sizes
    # a vision tower's profile run (analysis.model.vision). Nothing multimodal allowed: no encoder profile.
    limit_mm_per_prompt: dict[Modality, Annotated[int, Field(strict=True, ge=0)]] | None = None
    # vLLM's --mm-encoder-tp-mode: "weights" splits a vision tower's layers over the tensor-parallel ranks like the
    # decoder's; "data" keeps the whole tower on every rank and splits the items between them.
    mm_encoder_tp_mode: Literal["weights", "data"] = "weights"

    @classmethod
    def for_engine(cls, engine: EngineSettings) -> PlanInputs:
        """What a sweep's engine asks (vLLM's ``LLM`` class: the offline entry), as the sweep's dry run and the
        pre-flight ask the plan about it: its swept settings, the pipeline its world size implies, and the
        ``engine_args`` that change memory or defaults (enforce_eager, a speculative config). A speculative config
        the plan does not take is a PlanError naming it."""
        args = engine.engine_args
        spec = args.get("speculative_config")
        if isinstance(spec, dict):
            try:
                spec = SpeculativeConfig.model_validate({k: v for k, v in spec.items() if k in (
                    "method", "model", "num_speculative_tokens", "draft_tensor_parallel_size")})
            except ValueError as exc:
                raise PlanError(f"engine_args.speculative_config: {' '.join(str(exc).split())[:300]}") from None
        return cls(kv_cache_dtype=engine.kv_cache_dtype, block_size=engine.block_size,
                   max_model_len=engine.max_model_len, tensor_parallel_size=engine.tensor_parallel_size,
                   pipeline_parallel_size=engine.world_size // engine.tensor_parallel_size,
                   gpu_memory_utilization=engine.gpu_memory_utilization,
                   kv_cache_memory_bytes=engine.kv_cache_memory_bytes,
                   max_num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs,
                   async_scheduling=engine.async_scheduling, enable_prefix_caching=engine.enable_prefix_caching,
                   entry="offline", enforce_eager=bool(args.get("enforce_eager")),
                   speculative_config=spec if isinstance(spec, SpeculativeConfig) else None)

    @field_validator("entry", mode="before")
    @classmethod
    def _entry_alias(cls, v: Any) -> Any:
        return ENTRY_ALIASES.get(v, v) if isinstance(v, str) else v

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, v: str | None) -> str | None:
        if v is not None:
            rules_for(v)  # refuses a string that is not a version number, by name
        return v

    @field_validator("output_len")
    @classmethod
    def _output_needs_prompt(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and info.data.get("prompt_len") is None:
            raise ValueError("goes with a prompt length (prompt_len, `kvprof plan --prompt-len`): a request's "
                             "latency needs its prompt")
        return v

    @model_validator(mode="after")
    def _check(self) -> PlanInputs:
        if self.kv_cache_dtype.lower() not in KV_DTYPES:
            raise ValueError(f"kv_cache_dtype {self.kv_cache_dtype!r} is not one of {', '.join(KV_DTYPES)}")
        if self.gpu_memory_utilization is None:
            self.gpu_memory_utilization = rules_for(self.vllm_version).default_gpu_memory_utilization
        if self.acceptance_length is not None:
            spec = self.speculative_config
            if spec is None:
                raise ValueError("acceptance_length (--acceptance-length) goes with a speculative config "
                                 "(--speculative-config): without one every step yields one token")
            if self.acceptance_length > 1 + spec.num_speculative_tokens:
                raise ValueError(f"acceptance_length {self.acceptance_length:g} is more than 1 + k = "
                                 f"{1 + spec.num_speculative_tokens} (num_speculative_tokens "
                                 f"{spec.num_speculative_tokens}; vLLM's mean acceptance length counts the bonus "
                                 "token: 1 when no draft is accepted, 1 + k when all are)")
        return self


def async_scheduling(inputs: PlanInputs, on_gpu: bool) -> bool:
    """Whether the engine schedules a step ahead (``--async-scheduling``): as asked, else vLLM's default for the
    version, device, pipeline and speculator (analysis.vllm.budget.async_scheduling_default)."""
    if inputs.async_scheduling is not None:
        return inputs.async_scheduling
    spec = inputs.speculative_config
    return async_scheduling_default(inputs.vllm_version, on_gpu=on_gpu,
                                    pipeline_parallel_size=inputs.pipeline_parallel_size,
                                    speculative_method=spec.method if spec else None)
