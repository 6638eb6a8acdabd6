"""``Plan``: what `kvprof plan` predicts, as one typed model — what ``make_plan`` returns, what ``--json`` prints
and what ``--save`` stores.

Every key a plan can carry is a field here, with its unit and meaning; a field the plan does not reach (no GPU,
no batch, no prompt) is absent from the JSON, not null, and ``None`` in Python. A field the plan answers but could
not size (a KV budget without a device) is null. ``extra="forbid"``: a misspelt key written by the planner is an
error, and a misspelt attribute read by a consumer is an AttributeError, never a silent None.

The JSON Schema of this model and of the other objects `kvprof plan` prints is ``plan.schema.json`` beside this
file (``analysis.planning.outputs``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from analysis.serving.outcome import ServedOutcome
from analysis.vllm.budget import Reserve
from analysis.vllm.offload import OffloadPlan

# A plan's JSON is read by other tools: this version changes when a field changes meaning or goes away.
PLAN_VERSION = 1

# Strict where a hand-edited saved plan could carry a look-alike: `true` or "16" is not a block size.
Count = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[int, Field(strict=True, gt=0)]
Real = Annotated[int | float, Field(ge=0, allow_inf_nan=False)]  # an int stays an int: 327,680 B, not 327,680.0
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Interval = Annotated[list[Annotated[float, Field(allow_inf_nan=False)]], Field(min_length=2, max_length=2)]
# Named terms of a predicted time (analysis.latency.step.named_terms): weights_s, kv_s, attention_s,
# communication_s, floor_s, and api_s for a served TTFT; they add up to the time.
Terms = dict[str, Annotated[float, Field(allow_inf_nan=False)]]

_STRICT = ConfigDict(extra="forbid")


class KvCacheGroup(BaseModel):
    """One of vLLM's KV-cache groups (v1/core/kv_cache_utils.py): layers of one kind sharing the block table."""

    model_config = _STRICT

    kind: str = Field(description="the layer kind (analysis.model.layers): full, sliding, chunked, mla, mamba, …")
    layers: Count = Field(description="layers in the group")
    window: Count | None = Field(None, description="a sliding or chunked group's window, tokens")
    blocks_per_request: Count = Field(description="blocks the group reserves for one request of max_model_len")


class ServedPlan(BaseModel):
    """A `vllm bench serve` load replayed through vLLM's scheduler (analysis.serving): its served figures, with the
    interval the replay's held-out error on published serving runs gives (analysis/catalog/replay_evidence.yaml)."""

    model_config = _STRICT

    outcome: ServedOutcome
    ttft_median_interval_s: Interval = Field(description="the replayed median TTFT × the 10th-90th percentile of "
                                                         "measured ÷ replayed on published runs")
    tpot_mean_interval_s: Interval | None = Field(description="the same for the mean TPOT")
    checked_against: dict[str, str] = Field(description="per figure (ttft, tpot): the published runs and the error")
    note: str = Field(description="what the replay follows and leaves out")


class SpeculativePlan(BaseModel):
    """What ``--speculative-config`` adds: the drafter's memory (analysis.vllm.speculative) and how latency counts
    its tokens."""

    model_config = _STRICT

    method: str = Field(description="ngram, eagle, eagle3, mtp or draft_model")
    num_speculative_tokens: Positive
    draft_weight_bytes: Count = Field(description="the drafter's weights a GPU, counted in weight_bytes")
    draft_layers: Count
    draft_kv_bytes_per_token: Count = Field(description="the drafter's KV a token a GPU, in every block")
    slots_beyond_context: Count = Field(description="tokens a running request holds past its context: 1 + k + "
                                                    "lookahead")
    reserve_bytes: Count = Field(description="non-torch memory the drafter adds (ngram's token history)")
    shares: str = Field(description="what the drafter shares with the target model")
    acceptance_length: Real | None = Field(None, description="--acceptance-length: tokens a request gains a step")
    latency: str = Field(description="how the latency figures count speculative tokens")
    not_planned: str = Field(description="what of the drafter is not planned")


class PipelineStage(BaseModel):
    """One pipeline-parallel stage (analysis.vllm.pipeline): its layers, memory and blocks."""

    model_config = _STRICT

    stage: Count
    first_layer: Count
    layers: Positive
    weight_bytes: Count
    activation_bytes: Count | None = Field(description="the stage's profile-run peak (null with a fixed KV budget)")
    kv_budget_bytes: int | None
    bytes_per_block: Count
    num_blocks: Count | None


class CalibrationProvenance(BaseModel):
    """Where an applied calibration was fitted and what of it differs from this plan
    (analysis.planning.calibration.calibration_provenance)."""

    model_config = _STRICT

    device: str | None
    model: str | None
    model_config_sha256: str | None
    vllm_version: str | None
    transferred: bool = Field(description="fitted on another device and scaled by the two spec sheets")
    transferred_because: list[str]
    fitted_on_model: str | None = Field(description="set when fitted on another model than the one planned")
    unknown: list[str] = Field(description="what the calibration does not say")
    warnings: list[str]


class Plan(BaseModel):
    """A plan: the engine vLLM would build, its memory and blocks, and, on a device, its latency, power and energy,
    each latency figure with its interval and what it was checked against. Bytes are per GPU, times in seconds."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, title="Plan")

    plan_version: Literal[1] = Field(PLAN_VERSION, description="this contract's version")

    # --- the engine planned ------------------------------------------------------------------------------------
    model: str = Field(description="the architecture's name")
    dtype: str = Field(description="the weights' dtype")
    attention: str = Field(description="the attention kind (mha, gqa, mqa, mla, hybrid …)")
    gpu: str | None = Field(description="the catalog GPU or probed device; null without one")
    gpu_note: str | None = Field(None, description="how the device was chosen, where a name was resolved or a "
                                                   "calibration named it")
    tensor_parallel_size: Positive
    pipeline_parallel_size: Positive | None = Field(None, description="set with pipeline parallelism")
    kv_cache_dtype: str = Field(description="the KV-cache dtype vLLM resolves (auto → the model's or the "
                                            "checkpoint's)")
    kv_cache_dtype_from: Literal["option", "checkpoint"] = Field(
        description="checkpoint: --kv-cache-dtype auto took the checkpoint's declared KV dtype, as vLLM does")
    quantization: str | None = Field(description="the checkpoint's quantization, described")
    block_size: Positive = Field(description="the configured block size, tokens")
    max_model_len: Positive
    max_num_batched_tokens: Positive
    max_num_seqs: Positive
    async_scheduling: bool
    entry: Literal["serve", "offline"] = Field(description="vLLM's entry point: serve (`vllm serve`) or offline "
                                                           "(LLM / `vllm bench latency`)")
    accounting_rules: str = Field(description="the vLLM release's memory-accounting rules applied")

    # --- weights ------------------------------------------------------------------------------------------------
    params_total: Count
    params_active: Count = Field(description="parameters a token passes through (routed experts: the active ones)")
    weight_bytes: Count = Field(description="what vLLM's 'Model loading took' counts on rank 0: weights, encoder, "
                                            "RoPE caches, LoRA slots, the drafter")
    lora_bytes: Count | None = Field(None, description="of weight_bytes, the LoRA slots (with --max-loras)")
    weights_note: str | None = None

    # --- KV cache: bytes ----------------------------------------------------------------------------------------
    kv_bytes_per_token_layer: Real = Field(description="KV bytes a token a layer a GPU (the seeds' 2·h_kv·d·b/tp)")
    kv_bytes_per_token: Real = Field(description="KV bytes a token a GPU, every layer (and the drafter's)")
    kv_bytes_per_sequence: Real = Field(description="KV bytes a sequence of `context` tokens takes a GPU")
    context: Positive = Field(description="tokens a sequence holds: --context, else prompt + output, else "
                                          "max_model_len")

    # --- KV cache: budget and blocks ----------------------------------------------------------------------------
    kv_budget_bytes: int | None = Field(description="the KV pool a GPU; null without a device or a fixed budget")
    kv_budget_source: str | None
    device_total_bytes: Count | None = Field(None, description="the device total vLLM reads (cudaMemGetInfo)")
    reserve: Reserve | None = Field(None, description="memory kept outside weights and KV (activation peak, "
                                                      "non-torch, CUDA graphs)")
    bytes_per_block: Count = Field(description="one block of every layer of a group, a GPU")
    kv_block_size: Positive = Field(description="the block vLLM allocates: block_size, raised on a hybrid model "
                                                "until a page holds a recurrent state")
    num_blocks: Count | None = Field(description="blocks in the pool, vLLM's null block included")
    kv_cache_groups: list[KvCacheGroup]
    blocks_per_request: Count = Field(description="blocks one request of max_model_len reserves, every group")
    kv_cache_tokens: Count | None = Field(description="vLLM's 'GPU KV cache size' in tokens")
    max_concurrency: Real | None = Field(description="vLLM's 'Maximum concurrency' at max_model_len")
    ideal_kv_cache_tokens: Real | None = Field(description="the seeds' contiguous arithmetic: budget ÷ bytes a "
                                                           "token")
    ideal_max_concurrency: Real | None
    blocks_per_sequence_at_context: Count
    kv_full_batch: Count | None = Field(description="sequences of `context` tokens the pool holds together (null "
                                                    "block excluded)")
    batch: Positive | None = Field(None, description="--batch: the decode batch planned")
    batch_fits: bool | None = Field(None, description="batch ≤ kv_full_batch")
    speculative: SpeculativePlan | None = None
    kv_offloading: OffloadPlan | None = None
    served: ServedPlan | None = Field(None, description="with --max-concurrency or --request-rate: the load "
                                                        "replayed through vLLM's scheduler")
    served_note: str | None = Field(None, description="why a load asked for was not replayed")
    pipeline_stages: list[PipelineStage] | None = None
    pool_stage: Count | None = Field(None, description="the stage whose blocks size the pool (the fewest)")

    # --- the device and the roofline ----------------------------------------------------------------------------
    bandwidth_Bps: Real | None = Field(None, description="the device's memory bandwidth, bytes/s")
    peak_flops: Real | None = Field(None, description="the dense peak of the weights' kernel family, FLOP/s")
    ridge_point: Real | None = Field(None, description="peak_flops ÷ bandwidth_Bps, FLOP/B")
    crossover_context: Real | None = Field(None, description="t*: the context where a step reads as many KV bytes "
                                                             "as weight bytes")
    latency_model: str | None = Field(None, description="which model the latency figures come from")
    latency_note: str | None = None
    arithmetic_intensity: Real | None = None
    roofline_decode_step_s: Seconds | None = None
    roofline_decode_bound: Literal["memory", "compute"] | None = None
    roofline_tokens_per_s: Real | None = None
    roofline_prefill_s: Seconds | None = None
    prefill_bound: Literal["memory", "compute"] | None = None
    decode_weight_bytes: Real | None = Field(None, description="weight bytes a decode step reads a GPU (roofline)")
    decode_kv_bytes: Real | None = Field(None, description="KV bytes a decode step reads and writes a GPU (the "
                                                           "step model's, else the roofline's)")
    decode_flops: Real | None = None

    # --- decode -------------------------------------------------------------------------------------------------
    decode_step_s: Seconds | None = Field(None, description="one decode step at `batch` and `context`")
    decode_bound: str | None = Field(None, description="the largest term (weights, kv, attention, communication, "
                                                       "floor), or memory/compute on a CPU's roofline")
    decode_terms: Terms | None = None
    decode_rates: dict[str, Real] | None = Field(None, description="the effective weight and KV bandwidths and "
                                                                   "FLOP/s the step model applied")
    decode_experts_touched: Real | None = Field(None, description="routed experts a MoE layer reads a step")
    decode_recurrent_state_bytes: Count | None = Field(None, description="of decode_kv_bytes, a hybrid's recurrent "
                                                                         "state read and written back")
    decode_sparse_indexer_bytes: Count | None = Field(None, description="of decode_kv_bytes, sparse attention's "
                                                                        "indexer keys")
    decode_regime: str | None = Field(None, description="the corpus regime whose errors give the interval")
    decode_step_interval_s: Interval | None = None
    decode_checked_against: str | None = None
    decode_tokens_per_step: Real | None = Field(None, description="under speculative decoding: tokens a request "
                                                                  "gains a step")
    tpot_s: Seconds | None = Field(None, description="under speculative decoding: decode step ÷ tokens a step")
    tpot_interval_s: Interval | None = None
    tokens_per_s: Real | None = Field(None, description="output tokens a second of the replica")
    tokens_per_s_interval: Interval | None = None

    # --- power and energy ---------------------------------------------------------------------------------------
    decode_power_w: Real | None = Field(None, description="board power of one GPU while it decodes")
    decode_power_interval_w: Interval | None = None
    decode_power_checked_against: str | None = None
    tdp_w: Real | None = None
    idle_w: Real | None = None
    decode_j_per_output_token: Real | None = Field(None, description="every GPU of the replica's energy ÷ output "
                                                                     "tokens")
    decode_j_per_output_token_interval: Interval | None = None
    decode_energy_checked_against: str | None = None

    # --- prefill, TTFT and whole requests -----------------------------------------------------------------------
    prompt_len: Positive | None = None
    prefill_s: Seconds | None = None
    prefill_terms: Terms | None = None
    ttft_s: Seconds | None = Field(None, description="time to first token of a prompt arriving while "
                                                     "ttft_running_sequences decode (served: the API server too)")
    ttft_terms: Terms | None = None
    ttft_interval_s: Interval | None = None
    ttft_checked_against: str | None = None
    ttft_running_sequences: Count | None = None
    output_len: Positive | None = None
    request_concurrency: Positive | None = Field(None, description="requests in flight the request figures assume")
    served_tpot_s: Seconds | None = Field(None, description="`vllm serve`'s time per output token, arriving prompts "
                                                            "mixed into the steps")
    served_tpot_terms: Terms | None = None
    served_tpot_interval_s: Interval | None = None
    served_tpot_checked_against: str | None = None
    burst_ttft_s: Seconds | None = Field(None, description="mean TTFT of request_concurrency prompts arriving "
                                                           "together (a closed loop's waves)")
    burst_ttft_terms: Terms | None = None
    burst_ttft_interval_s: Interval | None = None
    burst_ttft_checked_against: str | None = None
    burst_ttft_median_s: Seconds | None = None
    request_latency_s: Seconds | None = Field(None, description="ttft_s + (output_len − 1) × served_tpot_s")
    request_latency_interval_s: Interval | None = None
    bench_latency_s: Seconds | None = Field(None, description="`vllm bench latency`'s average latency (--entry "
                                                              "offline)")
    bench_latency_terms: Terms | None = None
    bench_latency_interval_s: Interval | None = None
    bench_latency_checked_against: str | None = None

    # --- a calibration's figures --------------------------------------------------------------------------------
    calibration_source: str | None = None
    calibration_provenance: CalibrationProvenance | None = None
    calibration_warnings: list[str] | None = None
    calibration_speculative_note: str | None = None
    calibrated_decode_step_s: Seconds | None = None
    calibrated_decode_step_interval_s: Interval | None = None
    calibrated_checked_against: str | None = None
    calibrated_tokens_per_s: Real | None = None
    calibrated_decode_bound: Literal["memory", "compute"] | None = None
    calibrated_decode_power_w: Real | None = None
    calibrated_j_per_output_token: Real | None = None
    calibrated_power_source: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The plan as `--json` prints it: the fields the plan reached, nothing it did not."""
        return self.model_dump(mode="json", exclude_unset=True)

    @property
    def time_per_output_token_s(self) -> float | None:
        """The time per output token a buyer is held to: the calibrated step; else, for whole requests, the served
        TPOT with arriving prompts mixed in; else the decode step (under speculative decoding, over the tokens it
        yields)."""
        for t in (self.calibrated_decode_step_s, self.served_tpot_s, self.tpot_s, self.decode_step_s):
            if t is not None:
                return t
        return None
