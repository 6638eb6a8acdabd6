"""What ``kvprof plan`` is asked: :class:`PlanInputs` (the workload, the engine settings, the bounds every field is
held to) and :class:`PlanError`, the refusal every planning step raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from analysis.model.kv import (
    KV_DTYPES,
)
from analysis.model.vision import Modality, parse_mm_limits
from analysis.results.settings import EngineSettings
from analysis.units import parse_bytes
from analysis.vllm.lora import DEFAULT_MAX_LORA_RANK
from analysis.vllm.memory import ENTRY_ALIASES, rules_for
from analysis.vllm.release import async_scheduling_default
from analysis.vllm.speculative import (
    MAX_SPECULATIVE_TOKENS,
    SpeculativeConfig,
    parse_speculative_config,
)


class PlanError(ValueError):
    """Inputs that cannot produce a plan (the message says which and why)."""


# Integers that are integers: no True for 1, no "16" or 16.0 (pydantic's lax mode turns them into ints).
StrictCount = Annotated[int, Field(strict=True)]
# Bounds past any real deployment: a larger value is a typo, and past 2**63 numpy cannot hold it
MAX_SEQUENCES = 10**9
MAX_TOKENS = 2**31
MAX_BYTES = 2**50  # a pebibyte


@dataclass(frozen=True)
class Option:
    """How a PlanInputs field is given to `kvprof plan`: its help, its flag where that is not --field-name (a
    boolean's whole declaration where it has an off switch), and the parser of a value the command line gives as
    text (a size with its unit, JSON). The command's options are generated from these (profiler/cli/plan.py)."""

    help: str
    flag: str | None = None
    parse: Callable[[str], Any] | None = None


class PlanInputs(BaseModel):
    """What the user asks about. Byte counts are per GPU."""

    model_config = ConfigDict(extra="forbid")

    # Each field's `kvprof plan` option is declared here, on the field, once (``Option``); the command's options
    # are generated from them (profiler/cli/plan.py). The tensor- and pipeline-parallel sizes are --tp and --pp,
    # which also take lists for the procurement table.
    kv_cache_dtype: Annotated[str, Option("auto, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2.", flag="--kv-dtype")] = "auto"
    block_size: Annotated[StrictCount | None, Option(
        "Tokens per KV block (default: vLLM's: 16 on a GPU, 128 on a CPU).")] = Field(None, gt=0)
    max_model_len: Annotated[StrictCount | None, Option("Longest request (default: the model's).")] = Field(None, gt=0)
    tensor_parallel_size: StrictCount = Field(1, ge=1)
    pipeline_parallel_size: StrictCount = Field(1, ge=1)
    pp_layer_partition: Annotated[str | None, Option(
        "Layers per stage as VLLM_PP_LAYER_PARTITION gives them (a comma list; default: vLLM's split).")] = None
    max_loras: Annotated[StrictCount | None, Option(
        "LoRA adapter slots on the GPU (vLLM's --enable-lora --max-loras): their buffers count with the weights."
    )] = Field(None, gt=0)
    max_lora_rank: Annotated[StrictCount, Option(
        f"vLLM's --max-lora-rank (its default {DEFAULT_MAX_LORA_RANK}).")] = Field(DEFAULT_MAX_LORA_RANK, gt=0)
    # GiB of CPU memory, all ranks together (bounded at a pebibyte: a larger host buffer is a typo)
    kv_offloading_size: Annotated[float | None, Option(
        "GiB of CPU memory for KV offloading (vLLM's --kv-offloading-size, all ranks together): the offloaded "
        "prefix cache's reach beside the GPU-resident capacity, which it does not raise.")] = Field(
        None, gt=0, le=2**20, allow_inf_nan=False)
    kv_offloading_backend: Annotated[Literal["native", "lmcache"], Option("native or lmcache (vLLM's).")] = "native"
    # None: vLLM's default for the version (0.92 from 0.20, 0.9 before: AccountingRules.default_gpu_memory_utilization)
    gpu_memory_utilization: Annotated[float | None, Option(
        "Fraction of GPU memory vLLM may use (default: vLLM's for the version, 0.92 from 0.20 and 0.9 before)."
    )] = Field(None, gt=0, le=1, strict=True, allow_inf_nan=False)
    kv_cache_memory_bytes: Annotated[StrictCount | None, Option(
        "Fix the KV budget per GPU exactly (e.g. 8GiB), as vLLM's kv_cache_memory_bytes.", parse=parse_bytes
    )] = Field(None, ge=0, le=MAX_BYTES)
    max_num_batched_tokens: Annotated[StrictCount | None, Option(
        "vLLM scheduler token budget per step (default: vLLM's for the device).")] = Field(None, gt=0, le=MAX_TOKENS)
    max_num_seqs: Annotated[StrictCount | None, Option("vLLM max_num_seqs (default: vLLM's).")] = Field(None, gt=0)
    async_scheduling: Annotated[bool | None, Option(
        "Default: vLLM's: on for GPUs from vLLM 0.14 (not with pipeline parallelism or an n-gram speculator), off "
        "for CPU.", flag="--async-scheduling/--no-async-scheduling")] = None
    # The prefix cache (None: vLLM's default, on). The plan's sequences share no prefix, so it changes nothing but a
    # hybrid Mamba model's blocks a request: three a Mamba group with it (vLLM's align mode), one without.
    enable_prefix_caching: Annotated[bool | None, Option(
        "Default: vLLM's, on. Changes only a hybrid Mamba model's capacity: each Mamba group then holds three blocks "
        "a request, not one.", flag="--enable-prefix-caching/--no-enable-prefix-caching")] = None
    # FlashInfer installed (vLLM's Docker images ship it; its pip wheels before 0.11.1 do not): vLLM 0.9-0.11.0's
    # sampler warm-up then takes 8 B a logit, not the sort's 36 (analysis.vllm.memory).
    flashinfer: Annotated[bool, Option(
        "FlashInfer is installed (vLLM's Docker images ship it; its pip wheels before 0.11.1 do not): vLLM "
        "0.9-0.11.0's sampler then warms up in 8 B a logit, not 36.", flag="--flashinfer")] = False
    mamba_ssm_cache_dtype: Annotated[Literal["auto", "float32", "float16", "bfloat16"], Option(
        "vLLM's --mamba-ssm-cache-dtype: the dtype a hybrid model's recurrent (SSM) state is cached in (auto: the "
        "model's, or what its config names: Nemotron-H's float32). A hybrid's state bytes, and so its capacity, "
        "follow it.")] = "auto"
    # Whose scheduler defaults: vllm serve (the OpenAI server) or the offline LLM class ("llm" is read as offline).
    entry: Annotated[Literal["serve", "offline"], Option(
        "Whose scheduler defaults: serve (vllm serve, the OpenAI server) or offline (the LLM class, as kvprof "
        "sweeps).")] = "serve"
    vllm_version: Annotated[str | None, Option(
        "Whose memory accounting and defaults (default: the vLLM kvprof is tested with).")] = None
    enforce_eager: Annotated[bool, Option("No CUDA graphs (no graph memory reserved).",
                                          flag="--enforce-eager/--no-enforce-eager")] = False
    reserve_bytes: Annotated[StrictCount | None, Option(
        "Override vLLM's non-KV reserve (activations + non-torch + CUDA graphs).", parse=parse_bytes
    )] = Field(None, ge=0, le=MAX_BYTES)
    batch: Annotated[StrictCount | None, Option("Concurrent sequences in a decode step.")] = Field(
        None, gt=0, le=MAX_SEQUENCES)
    context: Annotated[StrictCount | None, Option("Tokens each sequence holds at that step.")] = Field(
        None, gt=0, le=MAX_TOKENS)
    prompt_len: Annotated[StrictCount | None, Option("Prompt length for a prefill estimate.")] = Field(
        None, gt=0, le=MAX_TOKENS)
    # Tokens each request generates (with prompt_len: the served TPOT and request latency, or under the offline entry
    # `vllm bench latency`'s average latency, of `batch` such requests).
    output_len: Annotated[StrictCount | None, Option(
        "Tokens each request generates (with --prompt-len; --context defaults to the two together): the served TPOT "
        "and request latency at --batch requests in flight, or under --entry offline `vllm bench latency`'s average "
        "latency of a --batch batch.")] = Field(None, gt=0, le=MAX_TOKENS)
    # A `vllm bench serve` load to replay through vLLM's scheduler (analysis.serving), with prompt_len and output_len.
    serve_max_concurrency: Annotated[StrictCount | None, Option(
        "With --prompt-len and --output-len: replay `vllm bench serve --max-concurrency N` through vLLM's scheduler "
        "(every request sent at once, at most N in flight): TTFT, TPOT, ITL and end-to-end latency percentiles, "
        "throughput, preemptions, queueing.", flag="--max-concurrency")] = Field(None, gt=0, le=1_000_000)
    serve_request_rate: Annotated[float | None, Option(
        "With --prompt-len and --output-len: replay requests arriving at R a second (Poisson; --burstiness for "
        "gamma), at most --max-concurrency in flight where given.", flag="--request-rate")] = Field(
        None, gt=0, le=1e6, allow_inf_nan=False)
    serve_num_prompts: Annotated[StrictCount | None, Option(
        "Requests the replay sends (`vllm bench serve --num-prompts`; default 1,000).", flag="--num-prompts")] = Field(
        None, gt=0, le=100_000)
    serve_trace: Annotated[str | None, Option(
        "Replay a request trace instead (an Azure LLM inference CSV or a Mooncake JSONL: analysis/serving/trace.py) "
        "at its timestamps; --num-prompts takes its first N, --max-concurrency caps those in flight.",
        flag="--trace")] = None
    serve_trace_speed: Annotated[float, Option(
        "With --trace: send its requests this many times faster.", flag="--trace-speed")] = Field(
        1.0, gt=0, le=1000, allow_inf_nan=False)
    serve_burstiness: Annotated[float, Option(
        "Gamma shape of the replay's arrival gaps (1: Poisson; below 1 burstier).", flag="--burstiness")] = Field(
        1.0, gt=0, le=100, allow_inf_nan=False)
    dtype: Annotated[str, Option(  # vLLM's --dtype: the weights' (and an auto KV cache's) dtype
        "Weight dtype vLLM runs (its --dtype): auto (the config's torch_dtype), bfloat16, float16, float32.")] = "auto"
    quantization: Annotated[str | None, Option(  # vLLM's --quantization: overrides the checkpoint's
        "vLLM's --quantization for a checkpoint whose config.json has no quantization_config (fp8_per_tensor, "
        "fp8_per_channel, fp8_per_block, bitsandbytes; none drops the checkpoint's); default: the checkpoint's own "
        "quantization_config.")] = None
    speculative_config: Annotated[SpeculativeConfig | None, Option(  # analysis.vllm.speculative
        "vLLM's --speculative-config JSON: method ngram, eagle, eagle3, mtp or draft_model, the draft's model (a "
        "catalog name, directory or config.json) and num_speculative_tokens; the drafter's weights, its KV layers in "
        "every block and each request's lookahead slots are planned, and each step's verify and draft work.",
        parse=parse_speculative_config)] = None
    # Tokens a request gains per step under speculative decoding, as vLLM logs it ("Mean acceptance length": 1 +
    # accepted ÷ drafts): a property of the text and the drafter, not of the hardware (None: 1, none accepted).
    acceptance_length: Annotated[float | None, Option(
        "With --speculative-config: the mean tokens a request gains a step (vLLM logs it as 'Mean acceptance "
        "length', 1 to 1 + k; it depends on the text and the drafter). Without it the latency figures count one a "
        "step, none accepted.")] = Field(None, ge=1, le=1 + MAX_SPECULATIVE_TOKENS, allow_inf_nan=False)
    # vLLM's --limit-mm-per-prompt: items a prompt may carry per modality (a modality not named: vLLM's 999); sizes
    # a vision tower's profile run (analysis.model.vision). Nothing multimodal allowed: no encoder profile.
    limit_mm_per_prompt: Annotated[dict[Modality, Annotated[int, Field(strict=True, ge=0)]] | None, Option(
        "vLLM's --limit-mm-per-prompt JSON ('{\"image\": 1, \"video\": 0}'; Kimi-K2.5: \"vision_chunk\"): sizes a "
        "vision tower's start-up profile (Qwen2-VL, Qwen2.5-VL: a video of up to 14 frames where max_model_len "
        "allows it); every modality of the tower at 0 plans an engine without the tower.",
        parse=parse_mm_limits)] = None
    # vLLM's --mm-encoder-tp-mode: "weights" splits a vision tower's layers over the tensor-parallel ranks like the
    # decoder's; "data" keeps the whole tower on every rank and splits the items between them.
    mm_encoder_tp_mode: Annotated[Literal["weights", "data"], Option(
        "vLLM's --mm-encoder-tp-mode: weights (a vision tower split over the tp ranks) or data (the whole tower on "
        "every rank, the items split between them).")] = "weights"

    @classmethod
    def for_engine(cls, engine: EngineSettings) -> PlanInputs:
        """What a sweep's engine asks (vLLM's ``LLM`` class: the offline entry), as the sweep's dry run and the
        pre-flight ask the plan about it: its swept settings, the pipeline its world size implies, and the
        ``engine_args`` that change memory or defaults (enforce_eager, the SSM state's dtype, a speculative config).
        A speculative config the plan does not take is a PlanError naming it."""
        args = engine.engine_args
        spec = args.get("speculative_config")
        if isinstance(spec, dict):
            try:
                spec = SpeculativeConfig.model_validate(SpeculativeConfig.memory_fields(spec))
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
                   mamba_ssm_cache_dtype=args.get("mamba_ssm_cache_dtype") or "auto",
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
    version, device, pipeline and speculator (analysis.vllm.release.async_scheduling_default)."""
    if inputs.async_scheduling is not None:
        return inputs.async_scheduling
    spec = inputs.speculative_config
    return async_scheduling_default(inputs.vllm_version, on_gpu=on_gpu,
                                    pipeline_parallel_size=inputs.pipeline_parallel_size,
                                    speculative_method=spec.method if spec else None)


# The fields given by options of their own: --tp and --pp, which take lists for the procurement table.
LIST_OPTIONS = {"tensor_parallel_size": "--tp", "pipeline_parallel_size": "--pp"}


def option(name: str) -> Option | None:
    """The `kvprof plan` option declared on a PlanInputs field, or None (a field given another way)."""
    return next((m for m in PlanInputs.model_fields[name].metadata if isinstance(m, Option)), None)


def option_flag(name: str) -> str:
    """The `kvprof plan` flag that gives a PlanInputs field: --kv-dtype for kv_cache_dtype, --tp for
    tensor_parallel_size, --field-name otherwise."""
    if name in LIST_OPTIONS:
        return LIST_OPTIONS[name]
    o = option(name) if name in PlanInputs.model_fields else None
    flag = o.flag if o is not None and o.flag else "--" + name.replace("_", "-")
    return flag.split("/")[0]
